"""How a long-running command starts and stops: signals, the listening socket, uvicorn.

SIGTERM (what ``docker stop`` and systemd send) and SIGINT (Ctrl-C) mean the
same thing: stop accepting, let the dispatcher drain, stop the embedded
server, exit 0. Both are caught on the event loop by :class:`Stopping`, and
uvicorn's own handlers are switched off: uvicorn re-raises the signal once it
has shut down, which killed the process (exit 143) before the embedded server
could be stopped. A second signal forces the HTTP side to stop at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator

import uvicorn

from hookrelay.outbox.errors import ConfigurationError

log = logging.getLogger("hookrelay")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(Exception):  # noqa: N818 - an outcome, not a failure
    """A stop was requested while the process was still starting."""


class Stopping:
    """The process's stop request: set by the first SIGTERM or SIGINT."""

    def __init__(self) -> None:
        self.requested = False
        self._on_stop: list[Callable[[], None]] = []
        self._on_force: list[Callable[[], None]] = []
        self._forced_by: int | None = None

    @contextlib.contextmanager
    def handling_signals(self, *, forced_by: int | None = None) -> Iterator[Stopping]:
        """SIGTERM and SIGINT request the stop; a second one forces it.

        ``forced_by``: this signal alone forces the stop, and a repeated one of the
        others changes nothing. A worker process (service/server/supervisor.py) is
        sent SIGTERM by its supervisor and, under systemd, by the service manager
        too: two of them must not cut its open requests off.
        """
        self._forced_by = forced_by
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._signal, sig)
        try:
            yield self
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)

    def on_stop(
        self, callback: Callable[[], None], *, force: Callable[[], None] | None = None
    ) -> None:
        """Call ``callback`` on the stop request (now, if it was already made)."""
        self._on_stop.append(callback)
        if force is not None:
            self._on_force.append(force)
        if self.requested:
            callback()

    def on_force(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on a second stop request (stop without waiting)."""
        self._on_force.append(callback)

    def _signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._forced_by is not None and sig != self._forced_by:
            if not self.requested:
                self._request(name)
            return
        if self.requested:
            log.warning("%s again: stopping without waiting", name)
            self._force()
            return
        self._request(name)
        if sig == self._forced_by:
            log.warning("%s received: stopping without waiting", name)
            self._force()

    def _request(self, name: str) -> None:
        self.requested = True
        log.info("%s received: stopping", name)
        for callback in list(self._on_stop):
            callback()

    def _force(self) -> None:
        for force in self._on_force:
            force()

    @contextlib.asynccontextmanager
    async def interruptible(self) -> AsyncIterator[None]:
        """Start-up steps that a stop request cancels (raising :class:`Stopped`)."""
        if self.requested:
            raise Stopped
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            task.cancel()

        self._on_stop.append(cancel)
        try:
            yield
        except asyncio.CancelledError:
            if not self.requested:
                raise
            task.uncancel()
            raise Stopped from None
        finally:
            self._on_stop.remove(cancel)
        if self.requested:
            raise Stopped


def bind(
    host: str,
    port: int,
    *,
    host_setting: str = "--host or HOOKRELAY_HOST",
    port_setting: str = "--port or HOOKRELAY_PORT",
) -> socket.socket:
    """A listening socket (the API's, or ``dispatch``'s metrics port), bound before
    anything else starts.

    A busy port or a bad host then fails at once in one line, naming the settings
    that choose them (``host_setting``, ``port_setting``), not after the database
    was started and migrated.
    """
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigurationError(
            f"cannot listen on {where}: unknown host; fix {host_setting} ({exc})"
        ) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigurationError(
                f"port {port} on {host} is already in use: stop what listens there, "
                f"or choose another port with {port_setting}"
            ) from None
        raise ConfigurationError(
            f"cannot listen on {where}: {exc.strerror}; fix {host_setting}, or {port_setting}"
        ) from None
    return sock


class Server(uvicorn.Server):
    """uvicorn without signal handlers of its own, announcing itself once it listens,
    and ending long-lived responses (status streams) as soon as shutdown begins."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        on_listening: Callable[[], None],
        on_shutdown: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config)
        self._on_listening = on_listening
        self._on_shutdown = on_shutdown

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Stopping owns SIGTERM and SIGINT; see the module docstring.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_listening()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn waits for open responses before the lifespan shutdown; a stream
        # would hold it for the whole graceful timeout, so streams end first.
        self._on_shutdown()
        await super().shutdown(sockets=sockets)

    def stop(self) -> None:
        self.should_exit = True

    def force(self) -> None:
        self.force_exit = True
