"""Text for the operator's terminal: no control character reaches it raw, failures are one line."""

from __future__ import annotations

import pytest

from hookrelay.service.server.tty_text import one_line, printable

ATTACK = "\x1b]0;PWNED\x07\x1b[2J"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (ATTACK, "\\x1b]0;PWNED\\x07\\x1b[2J"),
        ("a\rb\nc\td\x00e\x7f", "a\\x0db\\x0ac\\x09d\\x00e\\x7f"),
        ("\x9b31m", "\\x9b31m"),  # C1 CSI
        ("abc\u202eexe.txt", "abc\\u202eexe.txt"),  # right-to-left override
        ("line\u2028sep", "line\\u2028sep"),
        ("plain café ✓", "plain café ✓"),
    ],
)
def test_printable_escapes_controls(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_printable_may_keep_newlines() -> None:
    assert printable("a\nb\x1b", keep_newlines=True) == "a\nb\\x1b"


def test_one_line_masks_dsn_passwords_and_secrets() -> None:
    message = "cannot reach postgresql://app:s3cr3t@db:5432/x\n  with token tok_123"
    shown = one_line(message, secrets=("tok_123", None))
    assert shown == "cannot reach postgresql://app:***@db:5432/x with token ***"
