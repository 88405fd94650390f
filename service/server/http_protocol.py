"""uvicorn's httptools protocol with read deadlines, an early header cap and a connection cap.

uvicorn bounds only the idle time *between* requests (keep-alive). Measured before:
an idle connection, a trickled request line or header and an unfinished body each
stayed open for as long as the client liked; a 128 MB header was buffered whole
before the app's 431. Here, per connection:

- the request line and headers must arrive within ``header_timeout_s`` of the
  connection (or of the request's first byte, on keep-alive): else 408 and close;
- the body must arrive within ``body_timeout_s`` of the headers: else 408 and close;
- request line + headers over ``max_header_bytes`` are refused *while reading* (431);
- past ``max_connections`` open connections a new one gets 503 and is closed at
  once, so its descriptor is freed and the process keeps descriptors for the
  dispatcher's own connections and the database;
- what one turn of the event loop writes to a connection leaves in one ``write``
  (:class:`OneWritePerTurn`): uvicorn writes a response's head and its body apart, and
  on loopback a ``write`` is the dearest call an answer makes (the sender's kernel
  does the receiver's TCP work too: a quarter of the API's CPU per submit, measured
  with py-spy --native).

uvicorn offers no public way to do any of this (its issue #157 has asked for request
timeouts since 2018), so this subclasses its ``HttpToolsProtocol``, which is not a
public API: the overridden parser callbacks, ``connections``, ``parser``, ``flow``,
``cycle`` and the cycle's ``response_started``, ``disconnected`` and
``message_event``. pyproject.toml pins uvicorn to the releases that were tested
(0.30 to 0.55), and tests/test_uvicorn_internals.py fails, naming the piece, when a
release changes any of them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Unavailable"}
# After a refusal, how long the rest of what the client sends is read and dropped:
# closing with unread data makes the kernel send RST, which can destroy the answer.
LINGER_S = 1.0
CAP_LINGER_S = 0.2  # shorter: under a flood of connections, descriptors are the point


def answer(status: int, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response in the API's error shape, closing the connection."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class OneWritePerTurn(asyncio.Transport):
    """A transport that gathers the writes of one event-loop turn into one.

    The writes are joined and handed to the real transport at the end of the turn
    (``call_soon``), so the order of bytes and of ``close`` is kept and nothing waits
    longer than the turn. Everything else is the real transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.wrapped, self._loop = transport, loop
        self._pending: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Hand what was written so far to the real transport."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self.wrapped.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.wrapped.close()

    def write_eof(self) -> None:
        self.flush()
        self.wrapped.write_eof()

    def abort(self) -> None:
        self._pending.clear()
        self.wrapped.abort()

    def get_write_buffer_size(self) -> int:
        return self.wrapped.get_write_buffer_size() + sum(len(d) for d in self._pending)

    def is_closing(self) -> bool:
        return self.wrapped.is_closing()

    def can_write_eof(self) -> bool:
        return self.wrapped.can_write_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.wrapped.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.wrapped.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.wrapped.get_protocol()

    def pause_reading(self) -> None:
        self.wrapped.pause_reading()

    def resume_reading(self) -> None:
        self.wrapped.resume_reading()

    def is_reading(self) -> bool:
        return self.wrapped.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.wrapped.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.wrapped.get_write_buffer_limits()


class GuardedHttpTools(HttpToolsProtocol):
    """Set the limits with :func:`protocol_class`; the defaults here are for tests."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0
    max_header_bytes = 16_384
    max_connections = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._in_headers = True  # reading a request line and headers (not a body)
        self._begun = False  # a byte of a request has arrived on this connection
        self._tail = b""  # the last bytes seen, for a terminator split across reads
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self.transport, self._refused = transport, True
            self._answer_and_close(
                answer(503, "too_many_connections", "too many open connections"), CAP_LINGER_S
            )
            return
        super().connection_made(OneWritePerTurn(transport, self.loop))
        self._arm(self.header_timeout_s, "the request line and headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.parser is not None and self.flow is not None:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: read and drop
        if self._in_headers:
            # httptools buffers a header until it is complete, so its callbacks come
            # too late for a cap: count the bytes up to the blank line here instead.
            self._begun = True
            end = (self._tail + data).find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
            self._tail = (self._tail + data)[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._refuse(
                    431,
                    "headers_too_large",
                    f"request line and headers exceed {self.max_header_bytes} bytes",
                )
                return
        super().data_received(data)

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a keep-alive request: its own header deadline
            self._arm(self.header_timeout_s, "the request line and headers")

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._arm(self.body_timeout_s, "the request body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_headers, self._header_bytes, self._tail = True, 0, b""
        super().on_message_complete()

    # Limits
    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str, seconds: float) -> None:
        self._deadline = None
        if not self._begun or (self.cycle is not None and self.cycle.response_started):
            # Nothing asked (an idle connection), or the app is answering: just close.
            self.transport.close()
            return
        self._refuse(408, "request_timeout", f"{what} did not arrive within {seconds:g} s")

    def _refuse(self, status: int, code: str, message: str) -> None:
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._disarm()
        if self.cycle is not None:  # a request the app is reading: it sees a disconnect
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self._answer_and_close(answer(status, code, message), LINGER_S)

    def _answer_and_close(self, response: bytes, linger_s: float) -> None:
        self.transport.write(response)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(linger_s, self.transport.close)
        else:  # pragma: no cover - TCP transports can
            self.transport.close()


def protocol_class(
    *,
    header_timeout_s: float,
    body_timeout_s: float,
    max_header_bytes: int,
    max_connections: int,
) -> type[GuardedHttpTools]:
    """A ``GuardedHttpTools`` with these limits, for ``uvicorn.Config(http=...)``."""
    return type(
        "GuardedHttpTools",
        (GuardedHttpTools,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "max_header_bytes": max_header_bytes,
            "max_connections": max_connections,
        },
    )
