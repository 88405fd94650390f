"""A LISTEN connection that comes back: it reconnects whenever the server drops it.

Notifications only wake things up early; polling still finds the work. But a
process that lost its LISTEN for good (after a database restart, say) would
fall back to polling for the rest of its life, so this keeps reconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg

from hookrelay.outbox.store.pool import connect

log = logging.getLogger("hookrelay.listener")
RECONNECT_S = 1.0


class Listener:
    """LISTEN on each channel of ``callbacks``, calling its ``callback(payload)``;
    ``on_gap()`` after any outage. One connection serves every channel.

    ``on_gap`` runs whenever notifications may have been missed (at each
    (re)connect and when the connection is lost), so callers can look again.

    Several parts of a process share one (:meth:`join`): PostgreSQL wakes every
    backend that listens in a database at each notifying commit, whatever its
    channels, so each LISTEN connection costs the server a wake-up per commit and,
    where channels overlap, the process a read of the same notification again.
    """

    def __init__(
        self,
        dsn: str,
        callbacks: Mapping[str, Callable[[str], None]],
        *,
        on_gap: Callable[[], None] = lambda: None,
        name: str = "hookrelay-listener",
    ) -> None:
        self._dsn = dsn
        self._callbacks: dict[str, list[Callable[[str], None]]] = {}
        self._gaps: list[Callable[[], None]] = []
        self._name = name
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self.join(callbacks, on_gap=on_gap)

    def join(
        self,
        callbacks: Mapping[str, Callable[[str], None]],
        *,
        on_gap: Callable[[], None] = lambda: None,
    ) -> None:
        """Add ``callbacks`` (beside those of the channel, if it has any) and ``on_gap``;
        before :meth:`start`."""
        if self._task is not None:
            raise RuntimeError(f"{self._name} has started: join it before")
        for channel, callback in callbacks.items():
            self._callbacks.setdefault(channel, []).append(callback)
        self._gaps.append(on_gap)

    @property
    def _channels(self) -> str:
        return ", ".join(self._callbacks)

    def _on_gap(self) -> None:
        # Each part's own: one that fails must not keep the others from looking again.
        for gap in self._gaps:
            try:
                gap()
            except Exception:
                log.exception("%s: a gap handler failed", self._name)

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()

    def _notified(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        for callback in self._callbacks[channel]:
            try:
                callback(payload)
            except Exception:  # one part's failure must not deafen the others
                log.exception("%s: a callback on %s failed", self._name, channel)

    async def _run(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await connect(self._dsn, wait_s=RECONNECT_S * 5)
                for channel in self._callbacks:
                    await conn.add_listener(channel, self._notified)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda *_, lost=lost: lost.set())
                self._conn = conn  # "connected" only once LISTEN is in place
                self._on_gap()
                await lost.wait()
                log.warning("LISTEN %s: connection lost; reconnecting", self._channels)
            except asyncio.CancelledError:
                if conn is not None and conn is not self._conn:
                    conn.terminate()  # stopped between connecting and LISTEN
                raise
            except Exception as exc:  # polling still works meanwhile
                log.warning("LISTEN %s unavailable: %s", self._channels, exc)
            self._on_gap()
            await asyncio.sleep(RECONNECT_S)
