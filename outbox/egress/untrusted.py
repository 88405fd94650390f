"""Text a receiver controls, made storable and safe to show, in one place.

A receiver chooses its status line, headers and body, and exception texts
quote them. Bytes that are not UTF-8 reach us as lone surrogates (aiohttp
decodes headers with ``surrogateescape``), which asyncpg cannot encode;
PostgreSQL text refuses NUL; control characters rewrite a terminal or split
a log line. An outcome that cannot be stored is never recorded, so its event
is sent again at every lease expiry with nothing charged. Every string of a
receiver's that leaves an attempt passes through :func:`receiver_text`.
"""

from __future__ import annotations

import re

__all__ = ["receiver_text"]

# C0 and C1 controls, DEL, line and paragraph separators, bidirectional
# overrides and isolates (they reorder what follows on screen), lone surrogates.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        # surrogateescape's stand-in for a byte that was not UTF-8: show the byte.
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def receiver_text(raw: str | bytes, limit: int) -> str:
    """``raw`` as printable, valid text of at most ``limit`` characters.

    Invalid UTF-8 bytes become ``\\xNN``, controls and other unsafe characters
    ``\\xNN`` or ``\\uNNNN``; anything else is kept. The result passes through
    unchanged, so applying it twice is harmless.
    """
    text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
    if _UNSAFE.search(text) is None:  # the usual case: nothing to escape
        return text[:limit]
    # Escapes only lengthen the text: what is past the limit before is past it after.
    return _UNSAFE.sub(_escape, text[:limit])[:limit]
