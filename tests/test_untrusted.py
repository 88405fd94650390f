"""receiver_text: whatever a receiver sends becomes printable text PostgreSQL stores."""

from __future__ import annotations

import random

import pytest

from hookrelay.outbox.egress.untrusted import receiver_text

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"ok", "ok"),
        ("caf\u00e9 \u2713", "caf\u00e9 \u2713"),  # valid UTF-8 is kept as it is
        (b"caf\xc3\xa9", "caf\u00e9"),
        (b"\xff\xfe", "\\xff\\xfe"),  # not UTF-8: the bytes, shown
        ("/\udcff\udcfe", "/\\xff\\xfe"),  # aiohttp's surrogateescape of the same bytes
        (b"\xed\xa0\x80", "\\xed\\xa0\\x80"),  # an encoded surrogate is not UTF-8
        ("\ud800x", "\\ud800x"),  # a lone surrogate from anywhere else
        (b"a\x00b", "a\\x00b"),  # PostgreSQL text refuses NUL
        ("a\r\nb\tc", "a\\x0d\\x0ab\\x09c"),  # one line in a log
        ("\x1b[2J", "\\x1b[2J"),  # a terminal's escape sequence
        ("\x85\x9f\x7f", "\\u0085\\u009f\\x7f"),  # C1 controls and DEL
        ("a\u202eb\u2028c", "a\\u202eb\\u2028c"),  # bidi override, line separator
    ],
)
def test_escapes(raw: str | bytes, text: str) -> None:
    assert receiver_text(raw, 100) == text


def test_caps_the_length_after_escaping() -> None:
    assert receiver_text("x" * 500, 10) == "x" * 10
    assert len(receiver_text(b"\xff" * 500, 10)) == 10


def test_twice_is_once() -> None:
    once = receiver_text(b"\x00\xff\x1b\xed\xa0\x80 ok", 100)
    assert receiver_text(once, 100) == once


async def test_any_bytes_are_storable(pool) -> None:
    rng = random.Random(7)
    samples = [rng.randbytes(rng.randrange(0, 200)) for _ in range(200)]
    samples += [bytes([b]) for b in range(256)]
    async with pool.acquire() as conn:
        for raw in samples:
            for text in (
                receiver_text(raw, 1000),
                receiver_text(raw.decode("utf-8", "surrogateescape"), 1000),
            ):
                assert await conn.fetchval("SELECT $1::text", text) == text
