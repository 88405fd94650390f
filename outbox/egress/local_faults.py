"""Our own faults are not the receiver's: telling them apart, and reporting them.

An attempt that fails because of this process (no file descriptors left, our
resolver unreachable, the HTTP pool closed under it, a bug) says nothing about
the receiver. The dispatcher gives such a row back without spending an
attempt, due again after ``DEFER_S`` so a fault that persists is not a hot
loop, logs it and counts it in ``hookrelay_local_faults_total{kind}``.
"""

from __future__ import annotations

import errno
import logging
import os
import ssl
import time
from collections import Counter

from hookrelay.outbox.egress.untrusted import receiver_text
from hookrelay.outbox.errors import LocalFault, LocalFaultKind
from hookrelay.outbox.metrics import LOCAL_FAULTS

__all__ = ["DEFER_S", "FaultReporter", "as_local_fault"]

log = logging.getLogger("hookrelay.dispatcher")

DEFER_S = 1.0
# A fault that repeats is logged once per this many seconds per kind, with a count.
_LOG_EVERY_S = 5.0
_DETAIL_CHARS = 1000

_ERRNO_KINDS: dict[int, LocalFaultKind] = {
    errno.EMFILE: "out_of_fds",
    errno.ENFILE: "out_of_fds",
    errno.ENOMEM: "out_of_memory",
    errno.ENOBUFS: "out_of_memory",
    errno.EADDRNOTAVAIL: "no_local_ports",
}


def _one(exc: BaseException) -> LocalFault | None:
    # By type and errno only. An exception's text may quote the receiver's
    # status line or headers ("500 Session is closed"), and a fault judged
    # ours costs nothing: a receiver could make its event retry forever.
    # The errno of an OSError is our own socket call's, set by our kernel;
    # an SSLError's is OpenSSL's code instead, in a TLS exchange with the receiver.
    if isinstance(exc, LocalFault):
        return exc
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError) and exc.errno in _ERRNO_KINDS:
        detail = f"{type(exc).__name__}: [Errno {exc.errno}] {os.strerror(exc.errno)}"
        return LocalFault(_ERRNO_KINDS[exc.errno], detail)
    return None


def as_local_fault(exc: BaseException) -> LocalFault | None:
    """The local fault in ``exc`` or its cause/context chain, if there is one."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        found = _one(current)
        if found is not None:
            return found
        os_error = getattr(current, "os_error", None)  # aiohttp's connector errors
        if isinstance(os_error, BaseException):
            pending.append(os_error)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


class FaultReporter:
    """Counts every local fault; logs each kind at most once per ``_LOG_EVERY_S``."""

    def __init__(self, counters: Counter[str]) -> None:
        self._counters = counters
        self._last_logged: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def report(self, fault: LocalFault, event_id: str) -> None:
        LOCAL_FAULTS.labels(fault.kind).inc()
        self._counters["local_faults"] += 1
        now = time.monotonic()
        if now - self._last_logged.get(fault.kind, -_LOG_EVERY_S) < _LOG_EVERY_S:
            self._unlogged[fault.kind] += 1
            return
        self._last_logged[fault.kind] = now
        log.warning(
            "local fault (%s), not the receiver's: event given back without spending an "
            "attempt: %s (%d more since the last report)",
            fault.kind,
            # A bug's detail is an exception's text, which may quote a receiver.
            receiver_text(fault.detail, _DETAIL_CHARS),
            self._unlogged.pop(fault.kind, 0),
            extra={"event_id": event_id},
        )
