"""What a call asks of its driver: the operations its plan yields, and their answers.

Every client call is a *plan*, a generator that yields operations and is sent their
answers, written once for both drivers (``Client`` runs plans with blocking I/O,
``AsyncClient`` with ``await``). A failed operation is thrown into the plan as the
client's exception, where the plan may handle it (a lost stream is reconnected).

====================  ==========================================  ===================
operation             does                                         answer
====================  ==========================================  ===================
``Send(call)``        one request, retried as ``call.retry`` says  :class:`Reply`
``Sleep(seconds)``    waits (on the client's clock)                None
``Open(call)``        opens a Server-Sent Events stream            its status: 200, 204
``Next()``            the open stream's next event                 ServerEvent or None
``Emit(item)``        hands an item to the caller's loop           None
====================  ==========================================  ===================
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

import httpx

T = TypeVar("T")

# safe: the request may be sent again (a read, or a write that repeats harmlessly);
# unsent: only when it certainly never arrived; none: the plan handles failures itself.
Retry = Literal["safe", "unsent", "none"]
# Which credential goes in Authorization: the tenant's API key, the admin token, or
# whichever the client has (the tenant's first).
Auth = Literal["tenant", "admin", "any"]


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request of the API."""

    method: str
    path: str
    auth: Auth = "tenant"
    body: Any = None  # JSON; None sends no body
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    retry: Retry = "safe"
    read_timeout: float | None = None  # None: the client's own


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful (< 400) answer, its body read, and how many sends it took."""

    response: httpx.Response
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class Send:
    call: Call


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Open:
    call: Call


@dataclass(frozen=True, slots=True)
class Next:
    pass


@dataclass(frozen=True, slots=True)
class Emit:
    item: Any


Op: TypeAlias = Send | Sleep | Open | Next | Emit
Plan: TypeAlias = Generator[Op, Any, T]
