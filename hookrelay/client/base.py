"""What both clients share below the plans: credentials, requests, and httpx's failures
as the client's own exceptions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx

from hookrelay.client.errors import TransportError, from_response
from hookrelay.client.ops import Call

# Raised before the request could leave: sending it again cannot repeat anything.
UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class Settings:
    api_key: str | None = field(repr=False)
    admin_token: str | None = field(repr=False)
    timeout: float
    attempts: int

    def credential(self, call: Call) -> str:
        """The bearer token ``call`` needs; ValueError if the client was given none."""
        if call.auth == "admin":
            found, needs = self.admin_token, "admin_token"
        elif call.auth == "tenant":
            found, needs = self.api_key, "api_key"
        else:
            found, needs = self.api_key or self.admin_token, "api_key or admin_token"
        if not found:
            raise ValueError(f"{call.method} {call.path} needs the client's {needs}")
        return found


def request_for(http: httpx.Client | httpx.AsyncClient, call: Call, s: Settings) -> httpx.Request:
    """The httpx request for ``call``, with its credential and read timeout."""
    headers = {**call.headers, "Authorization": f"Bearer {s.credential(call)}"}
    timeout = (
        httpx.Timeout(s.timeout, read=call.read_timeout)
        if call.read_timeout is not None
        else httpx.Timeout(s.timeout)
    )
    return http.build_request(
        call.method,
        call.path,
        json=call.body,
        params=dict(call.params) or None,
        headers=headers,
        timeout=timeout,
    )


@contextlib.contextmanager
def failed() -> Iterator[None]:
    """httpx's transport errors as :class:`TransportError`."""
    try:
        yield
    except httpx.TransportError as exc:
        sent = not isinstance(exc, UNSENT)
        raise TransportError(f"{type(exc).__name__}: {exc}", sent=sent) from exc


def check(response: httpx.Response) -> None:
    """Raise the client's error for an error answer (its body must be read)."""
    if response.status_code >= 400:
        raise from_response(response)
