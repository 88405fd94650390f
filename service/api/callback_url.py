"""Submit-time check of a callback URL, with refusals that name the rule that refused.

The tenant is told the rule, never a setting that would loosen it (the service's
settings are the operator's business); the operator's log says which setting would
have allowed it, except for a cloud metadata address, which is never to be exempted.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger("hookrelay.api")


async def check_callback_url(url: Any, policy: AddressPolicy, resolver: Resolver) -> str:
    """Syntax, scheme and every resolved address of a callback URL (422 if refused).

    A lookup that fails or runs out of time fails this submit alone, with a 422
    that says so; our own resolver failing is a 503, since the URL may be fine.
    """
    if not isinstance(url, str) or not url:
        raise Unprocessable(
            "callbackUrl is required and must be a string", code="invalid_callback_url"
        )
    try:
        await guard_target(url, policy, resolver)
    except BlockedDestination as exc:
        # The usual first stumble is a receiver on the operator's own machine: the
        # log tells them which setting would allow it.
        if exc.allow:
            log.info(
                "callbackUrl refused: %s (HOOKRELAY_ALLOW_PRIVATE_CIDRS=%s would allow it)",
                exc.reason,
                exc.allow,
            )
        raise Unprocessable(
            f"callbackUrl refused: {exc.reason}; private and reserved address ranges are refused",
            code="blocked_callback_url",
        ) from exc
    except PlainHttpRefused as exc:
        log.info("callbackUrl refused: %s (HOOKRELAY_ALLOW_HTTP=true would allow it)", exc)
        raise Unprocessable(f"callbackUrl is invalid: {exc}", code="invalid_callback_url") from exc
    except InvalidCallbackUrl as exc:
        raise Unprocessable(f"callbackUrl is invalid: {exc}", code="invalid_callback_url") from exc
    except (LookupFailed, UnicodeError) as exc:
        host = urlsplit(url).hostname or url
        reason = exc.reason if isinstance(exc, LookupFailed) else "not a valid host name"
        raise Unprocessable(
            f"callbackUrl host {host!r} cannot be resolved ({reason}): hookrelay checks DNS"
            " when the task is submitted (and again before every delivery), so the name must"
            " resolve from the hookrelay server now",
            code="invalid_callback_url",
        ) from exc
    return url
