"""A client for hookrelay's HTTP API: ``Client`` (blocking) and ``AsyncClient`` (``await``).

::

    from hookrelay.client import Client

    with Client("https://hookrelay.example.com", api_key) as hookrelay:
        task = hookrelay.submit("render", input={"page": 1}, callback_url=url)
        done = hookrelay.wait(task.id, timeout=60)

Needs only httpx, tenacity and cryptography: it never imports the service. Errors are
one tree (:mod:`hookrelay.client.errors`); retries and backoff are described in
:mod:`hookrelay.client.retry` and :mod:`hookrelay.client.backoff`.
"""

from hookrelay.client.aio import AsyncClient
from hookrelay.client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    HookrelayError,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    WaitTimeout,
)
from hookrelay.client.following import TaskEvent
from hookrelay.client.sync import Client
from hookrelay.models import (
    Attempt,
    DeadLetter,
    Delivery,
    Notifications,
    NotificationType,
    PortalLink,
    Progress,
    Task,
    TaskStatus,
    TerminalStatus,
    TestEvent,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "Attempt",
    "Client",
    "Conflict",
    "DeadLetter",
    "Delivery",
    "Forbidden",
    "HookrelayError",
    "InvalidRequest",
    "NotFound",
    "NotificationType",
    "Notifications",
    "PortalLink",
    "Progress",
    "RateLimited",
    "ServerError",
    "Task",
    "TaskEvent",
    "TaskStatus",
    "TerminalStatus",
    "TestEvent",
    "TransportError",
    "Unauthorized",
    "WaitTimeout",
]
