"""Hostile receivers on loopback, end to end: whatever they send costs them an attempt.

A fault judged ours is given back unspent, and an outcome that cannot be
stored is never recorded: either way the event would be retried forever, no
attempt charged, nothing in its log, never dead. Each answer here comes from
a raw TCP server (tests/rawreceiver.py), as no HTTP library would write it.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

import asyncpg
import pytest

from hookrelay.outbox.dispatch.dispatcher import Dispatcher, running
from hookrelay.outbox.models import EventId
from hookrelay.service.server.prerequisites import Runtime
from tests.rawreceiver import RawReceiver
from tests.support import backlog, dispatcher, wait_drained

pytestmark = pytest.mark.anyio

MAX_ATTEMPTS = 2

# Every text the local-fault classifier ever matched, and what our own errnos
# read like: a receiver may put any of them in its status line or headers.
PHRASES = [
    b"Session is closed",
    b"Connector is closed",
    b"Connector is closed.",
    b"Too many open files",
    b"[Errno 24] Too many open files",
    b"Too many open files in system",
    b"Cannot assign requested address",
    b"[Errno 99] Cannot assign requested address",
    b"No buffer space available",
    b"Cannot allocate memory",
    b"pool_closed: Session is closed",
]


def phrase_answer(path: str) -> bytes:
    """The phrase in a status line or a header value, then the connection closed
    before the headers end (what made aiohttp quote them in its error)."""
    _, where, i = path.split("/")
    phrase = PHRASES[int(i)]
    if where == "status":
        return b"HTTP/1.1 500 " + phrase + b"\r\n"
    if where == "header":
        return b"HTTP/1.1 500 Internal Server Error\r\nX-Error: " + phrase + b"\r\n"
    if where == "both":
        return b"HTTP/1.1 503 " + phrase + b"\r\nRetry-After: 0\r\nX-Error: " + phrase
    raise AssertionError(path)


async def deliver_all(
    pool: asyncpg.Pool, runtime: Runtime, rx: RawReceiver, paths: list[str]
) -> tuple[Dispatcher, dict[str, EventId]]:
    """One event per path, dispatched under a small attempt budget until none is left."""
    rt = replace(runtime, settings=replace(runtime.settings, max_attempts=MAX_ATTEMPTS))
    tenant, events = None, {}
    for path in paths:
        tenant, [event_id] = await backlog(pool, rt, rx.url(path), 1, tenant)
        events[path] = event_id
    async with running(dispatcher(rt, pool)) as d:
        await wait_drained(pool, timeout=60)
    return d, events


async def attempt_log(pool: asyncpg.Pool) -> dict[str, list[asyncpg.Record]]:
    rows = await pool.fetch("SELECT * FROM delivery_attempts ORDER BY event_id, number")
    log: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        log.setdefault(row["event_id"], []).append(row)
    return log


async def test_quoted_local_fault_phrases_cost_the_receiver_its_budget(pool, runtime) -> None:
    paths = [f"/{where}/{i}" for where in ("status", "header", "both") for i in range(len(PHRASES))]
    rx = await RawReceiver(phrase_answer).start()
    try:
        d, events = await deliver_all(pool, runtime, rx, paths)
    finally:
        await rx.stop()
    assert d.counters["local_faults"] == 0
    log = await attempt_log(pool)
    dead = {r["event_id"]: r for r in await pool.fetch("SELECT * FROM dead_letters")}
    for path, event_id in events.items():
        assert rx.hits[path] == MAX_ATTEMPTS, path
        assert [a["outcome"] for a in log[event_id]] == ["retry", "dead"], path
        assert all(a["error"] for a in log[event_id]), path
        assert event_id in dead and dead[event_id]["attempts"] == MAX_ATTEMPTS, path


def unstorable_answer(path: str) -> bytes:
    """Bytes PostgreSQL text or asyncpg refuse, where an answer's text is quoted."""
    return {
        "/location": b"HTTP/1.1 302 Found\r\nLocation: /\xff\xfe\x80\xed\xa0\x80\r\n"
        b"Content-Length: 0\r\n\r\n",
        "/reason": b"HTTP/1.1 500 \xff\xfe\x00\r\nContent-Length: 0\r\n\r\n",
        "/body": b"HTTP/1.1 500 Oops\r\nContent-Length: 9\r\n\r\n\x00\xff\x1b[2J\xed\xa0\x80",
        "/retry-after": b"HTTP/1.1 503 Busy\r\nRetry-After: \xff\xfe\r\nContent-Length: 0\r\n\r\n",
        "/cut": b"HTTP/1.1 500 \xff\r\nX: \xfe\x80",
    }[path]


async def test_bytes_that_are_not_text_are_recorded_escaped(pool, runtime) -> None:
    paths = ["/location", "/reason", "/body", "/retry-after", "/cut"]
    rx = await RawReceiver(unstorable_answer).start()
    try:
        d, events = await deliver_all(pool, runtime, rx, paths)
    finally:
        await rx.stop()
    assert d.counters["local_faults"] == 0 and d.counters["unrecorded"] == 0
    log = await attempt_log(pool)
    for path, event_id in events.items():
        assert [a["outcome"] for a in log[event_id]] == ["retry", "dead"], path
    location = log[events["/location"]][0]
    assert location["status_code"] == 302
    assert "redirect 302 to /\\xff\\xfe\\x80\\xed\\xa0\\x80 not followed" in location["error"]
    body = log[events["/body"]][0]
    assert body["response_prefix"] == "\\x00\\xff\\x1b[2J\\xed\\xa0\\x80"
    assert log[events["/retry-after"]][0]["status_code"] == 503


# -- fuzzing ----------------------------------------------------------------------------

SEED = 20240611
CASES = 48
# Bytes that are not UTF-8 (lone continuation, overlong, encoded surrogates, past
# U+10FFFF), NUL, lone CR and LF, an ANSI escape, a bidi override, C1 controls.
NASTY = [
    b"\xff", b"\xfe\xfe", b"\x80", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xed\xb3\xbf",
    b"\xf4\x90\x80\x80", b"\x00", b"\r", b"\n", b"\x1b[2J", b"\xe2\x80\xae", b"\xc2\x85", b"\x7f",
]  # fmt: skip
# The same, less what ends a header line: values that get past the parser.
NASTY_IN_LINE = [b for b in NASTY if b not in (b"\x00", b"\r", b"\n")]


def nasty(rng: random.Random, n: int, pieces: list[bytes] = NASTY) -> bytes:
    return b"".join(
        rng.choice(pieces) if rng.random() < 0.4 else bytes([rng.randrange(0x20, 0x7F)])
        for _ in range(n)
    )


def fuzzed_answer(rng: random.Random) -> bytes:
    """One answer: half of them well-formed HTTP carrying hostile text (so the
    status, headers and body are read and quoted), half malformed anywhere."""
    well_formed = rng.random() < 0.5
    body = rng.choice(
        [b"", b"ok", rng.randbytes(rng.randrange(1, 3_000)), nasty(rng, rng.randrange(1, 400))]
    )
    in_line = NASTY_IN_LINE if well_formed else NASTY
    if well_formed or rng.random() < 0.5:
        code = rng.choice([b"200", b"204", b"301", b"302", b"307", b"308", b"410", b"429", b"503"])
        reason = rng.choice([b"OK", b"", nasty(rng, rng.randrange(1, 40), in_line)])
        status = b"HTTP/1.1 " + code + b" " + reason
    else:
        version = rng.choice([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b"ICY", nasty(rng, 8)])
        code = rng.choice([b"999", b"100", b"0", b"99999", b"-1", b"2OO", b"", nasty(rng, 3)])
        reason = rng.choice([b"x" * rng.choice([100, 9_000, 70_000]), nasty(rng, 20)])
        status = version + b" " + code + b" " + reason
    names = [b"Location", b"Retry-After", b"X-Junk", b"Content-Encoding"]
    values = [
        nasty(rng, rng.randrange(0, 80), in_line),
        nasty(rng, rng.randrange(0, 80), in_line),
        b"/" + rng.randbytes(40).translate(None, b"\x00\r\n"),
        b"http://\xff\xfe/\xc3\x28",
        b"99999999999999999999",
        b"Wed, 21 Oct 2015 07:28:00 GMT",
    ]
    if not well_formed:
        names += [b"Transfer-Encoding", nasty(rng, 6)]
        values += [nasty(rng, rng.randrange(0, 20)), b"gzip", b"chunked"]
    lines = [status, b"Location: " + rng.choice(values)]
    lines += [rng.choice(names) + b": " + rng.choice(values) for _ in range(rng.randrange(0, 5))]
    length = str(len(body)).encode()
    if well_formed:
        lines.append(b"Content-Length: " + length)
    elif rng.random() < 0.8:
        lines.append(b"Content-Length: " + rng.choice([length, b"-1", b"99999", nasty(rng, 3)]))
    eol = b"\r\n" if well_formed else rng.choice([b"\r\n", b"\n", b"\r", b"\n\r"])
    raw = eol.join(lines) + eol + eol + body
    if not well_formed and rng.random() < 0.4:  # cut anywhere
        raw = raw[: rng.randrange(0, len(raw) + 1)]
    return raw


# What receiver_text escapes (a lone surrogate could not have been stored at all).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.slow
async def test_fuzzed_answers_each_cost_an_attempt_and_are_recorded(pool, runtime) -> None:
    rng = random.Random(SEED)
    answers = {f"/fuzz/{i}": fuzzed_answer(rng) for i in range(CASES)}
    rx = await RawReceiver(answers.__getitem__).start()
    try:
        d, events = await deliver_all(pool, runtime, rx, list(answers))
    finally:
        await rx.stop()
    # Nothing was taken for our own fault (a bug escaping the attempt is one), and
    # every outcome was stored.
    assert d.counters["local_faults"] == 0 and d.counters["unrecorded"] == 0
    log = await attempt_log(pool)
    tasks = {
        r["event_id"]: r for r in await pool.fetch("SELECT event_id, delivery_attempts FROM tasks")
    }
    for path, event_id in events.items():
        attempts = log.get(event_id, [])
        why = f"{path}: {answers[path][:120]!r}"
        assert attempts, why
        assert [a["number"] for a in attempts] == list(range(1, len(attempts) + 1)), why
        assert attempts[-1]["outcome"] in ("delivered", "dead"), why
        assert tasks[event_id]["delivery_attempts"] == len(attempts) >= 1, why
        for a in attempts:
            for text in (a["error"], a["response_prefix"]):
                assert text is None or UNSAFE.search(text) is None, why
