"""Text bound for an operator's terminal: control characters escaped, one line per failure.

Dead letters carry receiver-controlled text (an error message, a response
prefix), tenants carry the names callers chose. Printed raw, an escape
sequence in them could clear the screen, retitle the window or hide a line,
so every CLI table and message goes through :func:`printable`.
"""

from __future__ import annotations

import re
import sys
import unicodedata

# Bidirectional overrides and isolates reorder what follows them on screen.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_DSN_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control, bidi and line-separator character shown as an escape."""
    out = []
    for ch in str(text):
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch in _BIDI or unicodedata.category(ch) in {"Cc", "Zl", "Zp"}:
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def one_line(message: object, *, secrets: tuple[str | None, ...] = ()) -> str:
    """A failure as one printable line, with DSN passwords and the given secrets masked."""
    text = " ".join(str(message).split())
    text = _DSN_PASSWORD.sub(r"\1***@", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return printable(text)


def fail(message: object, *, secrets: tuple[str | None, ...] = ()) -> None:
    """Print ``hookrelay: <message>`` to stderr as one line."""
    print(f"hookrelay: {one_line(message, secrets=secrets)}", file=sys.stderr)
