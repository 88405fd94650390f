"""The uvicorn internals that service/server/http_protocol.py relies on, each by name.

``GuardedHttpTools`` subclasses uvicorn's ``HttpToolsProtocol`` for read deadlines, an
early header cap and a connection cap. uvicorn has no public hook for any of them
(its issue #157 asks for request timeouts, open since 2018), and the protocol class is
not a documented API. So pyproject.toml pins uvicorn to the releases these tests and
tests/test_serving.py passed on. A release that renames, moves or reshapes anything
below fails here with the name of what changed: fix http_protocol.py, then widen the pin.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from importlib.metadata import requires, version
from typing import Any

import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from hookrelay.service.server.event_loop import uvicorn_config
from hookrelay.service.server.http_protocol import GuardedHttpTools

pytestmark = pytest.mark.anyio

# Each method GuardedHttpTools overrides, with the parameters it is called with.
OVERRIDDEN = {
    "__init__": ["self", "config", "server_state", "app_state", "_loop"],
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "data_received": ["self", "data"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
}


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def app(scope: Any, receive: Any, send: Any) -> None:
    await receive()  # holds the request open: its cycle is inspected meanwhile


def load(config: uvicorn.Config) -> None:
    with warnings.catch_warnings():
        # Before 0.50, uvicorn's ws="auto" loads websockets' deprecated legacy module.
        warnings.simplefilter("ignore", DeprecationWarning)
        config.load()


def test_the_installed_uvicorn_is_in_the_pinned_range() -> None:
    pins = [Requirement(r) for r in requires("hookrelay-server") or []]
    (pin,) = [r for r in pins if r.name == "uvicorn"]
    assert pin.specifier.contains(version("uvicorn")), (pin, version("uvicorn"))
    assert any(s.operator == "<" for s in pin.specifier), "uvicorn needs an upper bound"


def test_the_guard_subclasses_the_httptools_protocol_uvicorn_uses() -> None:
    # uvicorn.Config(http=...) takes the class as it is (a string would name one of uvicorn's).
    assert issubclass(GuardedHttpTools, HttpToolsProtocol)
    assert httptools_impl.RequestResponseCycle is RequestResponseCycle
    config = uvicorn.Config(app, http=GuardedHttpTools)
    load(config)
    assert config.http_protocol_class is GuardedHttpTools


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_each_overridden_method_keeps_its_name_and_parameters(name: str) -> None:
    method = getattr(HttpToolsProtocol, name, None)
    assert method is not None, f"HttpToolsProtocol.{name} is gone"
    assert list(inspect.signature(method).parameters) == OVERRIDDEN[name], name


async def test_a_connection_has_the_state_the_guard_reads_and_writes() -> None:
    loop = asyncio.get_running_loop()
    config = uvicorn_config(app, host="127.0.0.1", port=8000)
    load(config)
    state = ServerState()
    # Called with the keywords uvicorn.server's create_protocol passes.
    proto = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=state, app_state={}, _loop=loop
    )
    assert isinstance(proto, GuardedHttpTools)
    assert proto.loop is loop
    assert proto.connections is state.connections  # the connection cap counts this set
    assert proto.parser is not None and proto.cycle is None and proto.flow is None

    transport = Transport()
    proto.connection_made(transport)
    assert proto.transport.wrapped is transport and proto.flow is not None
    assert proto in state.connections

    # The parser's callbacks reach the overridden methods by name.
    proto.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab")
    cycle = proto.cycle
    assert isinstance(cycle, RequestResponseCycle)
    assert cycle.response_started is False and cycle.disconnected is False
    assert isinstance(cycle.message_event, asyncio.Event)
    assert proto._deadline is not None  # the body deadline, armed by on_headers_complete

    proto.connection_lost(None)
    assert cycle.disconnected is True and proto.parser is None
    assert proto not in state.connections and proto._deadline is None
    for task in list(state.tasks):
        task.cancel()


class CountingTransport(Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        super().write(data)


async def answer_in_two_messages(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


async def test_a_response_leaves_in_one_write() -> None:
    # uvicorn writes the head and the body apart; the guard's transport joins them.
    loop = asyncio.get_running_loop()
    config = uvicorn_config(answer_in_two_messages, host="127.0.0.1", port=8000)
    load(config)
    proto = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}, _loop=loop
    )
    transport = CountingTransport()
    proto.connection_made(transport)
    for _ in range(2):  # keep-alive: each answer in one write of its own
        before = len(transport.writes)
        proto.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(5):
            await asyncio.sleep(0)
        (written,) = transport.writes[before:]
        assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.endswith(b"\r\n\r\nok")
    proto.connection_lost(None)


async def test_close_and_eof_send_what_was_written_first() -> None:
    from hookrelay.service.server.http_protocol import OneWritePerTurn

    inner = CountingTransport()
    t = OneWritePerTurn(inner, asyncio.get_running_loop())
    t.write(b"a")
    t.writelines([b"b", b""])
    assert inner.writes == [] and t.get_write_buffer_size() == 2
    t.close()  # before the turn ends: nothing written is lost, and it goes first
    assert inner.writes == [b"ab"] and inner.closed
    await asyncio.sleep(0)  # the turn's own flush finds nothing left
    assert inner.writes == [b"ab"]

    t.write(b"dropped")
    t.abort()  # an abort drops what is unsent, as a real transport's does
    await asyncio.sleep(0)
    assert inner.writes == [b"ab"] and inner.aborted
