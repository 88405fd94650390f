"""Callback headers: a task's own headers on every attempt of its webhook, sealed at rest.

A partner may ask for headers its receiver expects (a static ``x-api-key``). Their
rules are the contract's: at most :data:`MAX_HEADERS`, :data:`MAX_BYTES` of names and
values in all, no name the webhook's own framing or signature uses (:data:`RESERVED`,
:data:`RESERVED_PREFIXES`). Their values are secrets: sealed like signing secrets
(AES-GCM under the master key, :class:`~hookrelay.outbox.keys.at_rest.SecretBox`), the
task id as associated data so a sealed blob cannot be moved to another task; only the
names are stored in the clear, for the task resource. The signature does not cover them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from hookrelay.outbox.keys.at_rest import SecretBox

MAX_HEADERS = 10
MAX_BYTES = 4096  # names and values, as UTF-8, in all
RESERVED = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "connection",
        "transfer-encoding",
        "te",
        "upgrade",
        "traceparent",
        "tracestate",
    }
)
RESERVED_PREFIXES = ("proxy-", "webhook-")
# RFC 9110 token characters for a name; a value is visible ASCII, spaces and tabs
# inside, so no value can end a header line or carry a byte a receiver reads differently.
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?")
_AAD = b"hookrelay callback headers\0"


def problem(headers: Mapping[str, str]) -> str | None:
    """What is wrong with ``headers`` (naming the offending header), or None."""
    if len(headers) > MAX_HEADERS:
        return f"at most {MAX_HEADERS} headers, got {len(headers)}"
    seen: set[str] = set()
    size = 0
    for name, value in headers.items():
        lower = name.lower()
        if not _NAME.fullmatch(name):
            return f"{name!r} is not a valid header name"
        if lower in RESERVED or lower.startswith(RESERVED_PREFIXES):
            return f"{name!r} is a reserved header name"
        if lower in seen:
            return f"{name!r} is given twice (header names are case-insensitive)"
        seen.add(lower)
        if not _VALUE.fullmatch(value):
            return f"the value of {name!r} must be printable ASCII, spaces and tabs only inside"
        size += len(name.encode()) + len(value.encode())
    if size > MAX_BYTES:
        return f"at most {MAX_BYTES} bytes of names and values in all, got {size}"
    return None


def seal(box: SecretBox, task_id: str, headers: Mapping[str, str]) -> bytes:
    """``headers`` encrypted for the task ``task_id``."""
    return box.encrypt(json.dumps(list(headers.items())), aad=_AAD + task_id.encode())


def unseal(box: SecretBox, task_id: str, blob: bytes) -> dict[str, str]:
    """The headers :func:`seal` sealed for ``task_id``; ConfigurationError if they do not
    decrypt (another master key, another task's blob)."""
    return dict(json.loads(box.decrypt(blob, aad=_AAD + task_id.encode())))


def reseal(old: SecretBox, new: SecretBox, task_id: str, blob: bytes) -> bytes:
    """``blob`` sealed again under ``new`` (a master key rotation)."""
    return new.encrypt(old.decrypt(blob, aad=_AAD + task_id.encode()), aad=_AAD + task_id.encode())
