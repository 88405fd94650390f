"""A receiver on 127.0.0.1 that answers with raw bytes: what no HTTP server library would send.

Each request is read in full (headers, then a Content-Length body); the answer
for its path is written as given and the connection closed, so an answer cut
anywhere (mid status line, mid headers, mid body) is the receiver's last word.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RawReceiver:
    """``answer(path)`` gives the bytes sent back to a POST of ``path``."""

    answer: Callable[[str], bytes]
    hits: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _server: asyncio.Server | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(":") for h in lines[1:])
                    if k.strip().lower() == "content-length"
                ),
                0,
            )
            await reader.readexactly(length)
            self.hits[path] += 1
            writer.write(self.answer(path))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError):
            pass  # the client went away: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def start(self) -> RawReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
