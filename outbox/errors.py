"""Exceptions raised by the ``outbox`` package.

The tree::

    OutboxError
    ├── DatabaseUnavailable        the database cannot be reached (after retries)
    ├── TaskNotFound               no task with that id (for that tenant)
    ├── TenantNotFound             no tenant with that id
    ├── TestEventNotFound          no test event with that id (for that tenant)
    ├── InvalidTransition          the task is not in a state that allows the change
    │   ├── NotTerminal            redelivery asked of a task with no terminal event yet
    │   ├── AlreadyPending         its event is still waiting in the outbox
    │   └── ProgressBackwards      a progress report lower than the last one
    ├── IdempotencyError
    │   ├── IdempotencyKeyReused   same key, different request body
    │   └── IdempotencyInFlight    same key, the first request is still running
    ├── DeadLetterNotFound         no dead letter with that event id
    ├── AlreadyReplayed            the dead letter is already back in the outbox
    ├── InvalidCallbackUrl         a callback URL is malformed (also a ValueError)
    ├── BlockedDestination         a callback URL points where we must not connect
    ├── TransportError             an HTTP exchange with a receiver failed
    │   └── LookupFailed           the receiver's name did not resolve (in time)
    ├── LocalFault                 our own side failed (resolver, file descriptors, pool, proxy)
    ├── MigrationBlocked           running transactions kept holding a migration's tables
    └── ConfigurationError         a bad key, secret or setting
        └── SchemaMismatch         the database's migrations are not the ones this release runs on

asyncpg errors that are business outcomes (a unique key taken) are mapped to
these in ``hookrelay.outbox.store``, so callers never need to import asyncpg to handle
one. service/api/errors.py maps each of them to one HTTP answer. A received webhook
that fails verification is :mod:`hookrelay.receiver`'s error, not one of these.
"""

from __future__ import annotations

from typing import Any, Literal


class OutboxError(Exception):
    """Root of every error this package raises on purpose."""


class DatabaseUnavailable(OutboxError):
    """The database could not be reached, even after retrying."""


class TaskNotFound(OutboxError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found")
        self.task_id = task_id


class TestEventNotFound(OutboxError):
    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, event_id: str) -> None:
        super().__init__(f"test event {event_id!r} not found")
        self.event_id = event_id


class TenantNotFound(OutboxError):
    def __init__(self, tenant_id: str) -> None:
        super().__init__(f"tenant {tenant_id!r} not found")
        self.tenant_id = tenant_id


class InvalidTransition(OutboxError):
    """The task's current status does not allow the requested change.

    ``current`` carries the task row as it is now, so the caller can show it.
    """

    def __init__(self, task_id: str, current: Any) -> None:
        super().__init__(f"task {task_id!r} cannot make that transition")
        self.task_id = task_id
        self.current = current


class NotTerminal(InvalidTransition):
    """Redelivery asked of a task that has no terminal event yet."""


class ProgressBackwards(InvalidTransition):
    """A progress report with a lower percent than the task already shows."""


class AlreadyPending(InvalidTransition):
    """The event is still waiting in the outbox; it needs no second copy."""


class IdempotencyError(OutboxError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class IdempotencyKeyReused(IdempotencyError):
    def __init__(self, key: str) -> None:
        super().__init__(key, "this Idempotency-Key was used with a different request body")


class IdempotencyInFlight(IdempotencyError):
    def __init__(self, key: str) -> None:
        super().__init__(key, "a request with this Idempotency-Key is still in progress")


class DeadLetterNotFound(OutboxError):
    def __init__(self, event_id: str) -> None:
        super().__init__(f"dead letter {event_id!r} not found")
        self.event_id = event_id


class AlreadyReplayed(OutboxError):
    def __init__(self, event_id: str) -> None:
        super().__init__(f"dead letter {event_id!r} was already replayed")
        self.event_id = event_id


class InvalidCallbackUrl(OutboxError, ValueError):
    """A callback URL is malformed or uses what is not allowed (scheme, credentials...).

    Also a ValueError, as the URL checks raised before this class existed.
    """


class PlainHttpRefused(InvalidCallbackUrl):
    """A plain-http callback URL while the policy allows https only."""


class BlockedDestination(OutboxError):
    """A callback URL resolves to an address the SSRF guard refuses.

    ``allow`` is the narrowest CIDR that, listed as allowed, would let it through (for
    the operator's log; never told to the tenant); None for a cloud metadata address,
    which no refusal suggests exempting.
    """

    def __init__(self, reason: str, allow: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.allow = allow


class TransportError(OutboxError):
    """Connecting to a receiver, or reading its answer, failed: worth retrying."""


class LookupFailed(TransportError):
    """A destination's name could not be resolved: no such name, or no answer in time."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"DNS lookup of {host} failed: {reason}")
        self.host = host
        self.reason = reason


LocalFaultKind = Literal[
    "resolver_unavailable",
    "out_of_fds",
    "out_of_memory",
    "no_local_ports",
    "pool_closed",
    "egress_proxy",
    "bug",
]


class LocalFault(OutboxError):
    """Our own side failed, not the receiver: the attempt is not charged to the event."""

    def __init__(self, kind: LocalFaultKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind: LocalFaultKind = kind
        self.detail = detail


class MigrationBlocked(OutboxError):
    """A migration could not have its tables' locks, tried for minutes, and was not applied."""


class ConfigurationError(OutboxError):
    """A key, secret or setting is malformed."""


class SchemaMismatch(ConfigurationError):
    """The database holds migrations this release does not know, or lacks ones it needs."""
