"""Submit-time check of a callback URL, with refusals that say how to allow what was meant."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from hookrelay.outbox.egress import AddressPolicy, Resolver, guard_target
from hookrelay.outbox.errors import (
    BlockedDestination,
    InvalidCallbackUrl,
    LookupFailed,
    PlainHttpRefused,
)
from hookrelay.service.api.errors import Unprocessable


async def check_callback_url(url: Any, policy: AddressPolicy, resolver: Resolver) -> str:
    """Syntax, scheme and every resolved address of a callback URL (422 if refused).

    A lookup that fails or runs out of time fails this submit alone, with a 422
    that says so; our own resolver failing is a 503, since the URL may be fine.
    """
    if not isinstance(url, str) or not url:
        raise Unprocessable(
            "callbackUrl is required and must be a string", code="invalid_callback_url"
        )
    # Each refusal says which setting would allow it: the usual first stumble is a
    # receiver on the integrator's own machine.
    try:
        await guard_target(url, policy, resolver)
    except BlockedDestination as exc:
        hint = (
            f" (to allow it, e.g. for a receiver on this machine or your network, start hookrelay"
            f" with HOOKRELAY_ALLOW_PRIVATE_CIDRS={exc.allow}; comma-separated CIDRs)"
            if exc.allow
            else ""
        )
        raise Unprocessable(
            f"callbackUrl refused: {exc.reason}{hint}", code="blocked_callback_url"
        ) from exc
    except PlainHttpRefused as exc:
        raise Unprocessable(
            f"callbackUrl is invalid: {exc} (or start hookrelay with HOOKRELAY_ALLOW_HTTP=true,"
            " e.g. for a local receiver)",
            code="invalid_callback_url",
        ) from exc
    except InvalidCallbackUrl as exc:
        raise Unprocessable(f"callbackUrl is invalid: {exc}", code="invalid_callback_url") from exc
    except (LookupFailed, UnicodeError) as exc:
        host = urlsplit(url).hostname or url
        reason = exc.reason if isinstance(exc, LookupFailed) else "not a valid host name"
        raise Unprocessable(
            f"callbackUrl host {host!r} cannot be resolved ({reason}): hookrelay checks DNS"
            " when the task is submitted (and again before every delivery), so the name must"
            " resolve from the hookrelay server now; offline, use an IP address such as"
            " http://127.0.0.1:9000/ (allowed by HOOKRELAY_ALLOW_PRIVATE_CIDRS)",
            code="invalid_callback_url",
        ) from exc
    return url
