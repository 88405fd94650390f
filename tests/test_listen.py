"""``hookrelay listen`` end to end: ``hookrelay serve`` delivers to it, both as real processes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hookrelay.outbox.keys import ed25519, signing
from hookrelay.receiver import verify
from tests.receiver import Receiver
from tests.support import (
    ADMIN,
    ROOT,
    bearer,
    dispatcher_env,
    free_port,
    start,
    submit_and_complete,
    wait_for_port,
)

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


class Listen:
    """A ``hookrelay listen`` child process whose output is collected line by line."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port, self.lines = proc, port, list[str]()
        self._reader = asyncio.create_task(self._read())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhooks"

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append(line.decode())

    @property
    def text(self) -> str:
        return "".join(self.lines)

    async def wait_for(self, needle: str, count: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while self.text.count(needle) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} x{count} not printed; output:\n{self.text}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.proc.terminate()
        await self.proc.wait()
        await self._reader


@contextlib.asynccontextmanager
async def listen(*args: str) -> AsyncIterator[Listen]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "hookrelay.service.cli", "listen", "--port", str(port), *args),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    rx = Listen(proc, port)
    try:
        await rx.wait_for("Ready:")
        yield rx
    finally:
        await rx.stop()


@pytest.fixture
async def serve(runtime, dsn, request) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Any]]]:
    """``hookrelay serve`` (2 attempts, fast retries) and a tenant; yields (client, tenant).
    The tenant signs v1 unless the test is parametrized with ``scheme``."""
    scheme = getattr(request, "param", "v1")
    port = free_port()
    proc = await start("serve", dispatcher_env(runtime, dsn, port=str(port), max_attempts="2"))
    try:
        await wait_for_port(port, proc)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=15) as c:
            body = {"name": "listen", "signatureScheme": scheme}
            r = await c.post("/v1/admin/tenants", json=body, headers=ADMIN)
            assert r.status_code == 201, r.text
            yield c, r.json()
    finally:
        proc.terminate()
        await proc.wait()


async def delivery(c: httpx.AsyncClient, key: str, task_id: str, want: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        found: dict[str, Any] = (await c.get(f"/v1/tasks/{task_id}", headers=bearer(key))).json()
        if found["delivery"]["status"] == want or time.monotonic() > deadline:
            assert found["delivery"]["status"] == want, found
            return dict(found["delivery"])
        await asyncio.sleep(0.1)


async def test_verified_webhook_is_printed_and_answered_204(serve) -> None:
    c, tenant = serve
    async with listen("--secret", tenant["signingSecret"]) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        await rx.wait_for("<-- 204")
        d = await delivery(c, tenant["apiKey"], task_id, "delivered")
    assert "signature verified (v1)" in rx.text and "NOT verified" not in rx.text
    assert f"{d['eventId']}  task.succeeded" in rx.text
    assert f'"id": "{task_id}"' in rx.text  # the body, indented


async def test_wrong_secret_is_reported_and_refused(serve) -> None:
    c, tenant = serve
    async with listen("--secret", signing.generate_secret()) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        d = await delivery(c, tenant["apiKey"], task_id, "dead")
    assert rx.text.count("signature NOT verified: no signature matches") == 2
    assert d["lastStatusCode"] == 400


v1a = pytest.mark.parametrize("serve", ["v1a"], indirect=True)


@v1a
async def test_v1a_webhook_verifies_with_the_public_key(serve) -> None:
    c, tenant = serve
    assert tenant["publicKey"].startswith("whpk_") and not tenant.get("signingSecret")
    # A key from before a rotation beside the current one: either may verify.
    old = ed25519.generate_keypair().public_key
    async with listen("--public-key", old, "--public-key", tenant["publicKey"]) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        await rx.wait_for("<-- 204")
        d = await delivery(c, tenant["apiKey"], task_id, "delivered")
    assert "verified with 2 public keys (v1a)" in rx.text
    assert "signature verified (v1a)" in rx.text and "NOT verified" not in rx.text
    assert f"{d['eventId']}  task.succeeded" in rx.text


@v1a
async def test_v1a_with_a_wrong_public_key_is_refused(serve) -> None:
    c, tenant = serve
    async with listen("--public-key", ed25519.generate_keypair().public_key) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        d = await delivery(c, tenant["apiKey"], task_id, "dead")
    assert rx.text.count("signature NOT verified: no signature matches") == 2
    assert d["lastStatusCode"] == 400


@v1a
async def test_v1a_tampered_body_is_refused_and_the_genuine_one_forwarded(serve) -> None:
    c, tenant = serve
    app = await Receiver().start()
    try:
        key = tenant["publicKey"]
        async with listen("--public-key", key, "--forward", app.url) as rx:
            task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
            await app.wait_for(1)
            got = app.received[0]
            verify(got.headers, got.body, public_keys=[key])
            # The same signed headers with one byte of the body changed.
            sent = {k: v for k, v in got.headers.items() if k.lower().startswith("webhook-")}
            tampered = got.body.replace(b"succeeded", b"succeedeD", 1)
            async with httpx.AsyncClient() as other:
                r = await other.post(rx.url, content=tampered, headers=sent)
            assert r.status_code == 400
            await rx.wait_for("signature NOT verified: no signature matches")
            await delivery(c, tenant["apiKey"], task_id, "delivered")
    finally:
        await app.stop()
    assert len(app.received) == 1  # the tampered one was not forwarded


@pytest.mark.parametrize("serve", ["both"], indirect=True)
async def test_a_secret_for_a_both_tenant_verifies_v1(serve) -> None:
    c, tenant = serve
    args = ("--secret", tenant["signingSecret"], "--public-key", tenant["publicKey"])
    async with listen(*args) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        await delivery(c, tenant["apiKey"], task_id, "delivered")
    assert "signature verified (v1)" in rx.text
    assert "verified with 1 secret (v1) and 1 public key (v1a)" in rx.text


async def test_status_option_makes_hookrelay_retry_then_dead_letter(serve) -> None:
    c, tenant = serve
    async with listen("--secret", tenant["signingSecret"], "--status", "500") as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        d = await delivery(c, tenant["apiKey"], task_id, "dead")
    assert rx.text.count("<-- 500 (--status)") == 2 and d["attempts"] == 2


async def test_without_secret_nothing_is_verified(serve) -> None:
    c, tenant = serve
    async with listen() as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        await delivery(c, tenant["apiKey"], task_id, "delivered")
    assert "signature not checked (no --secret or --public-key given)" in rx.text


async def test_forward_passes_verified_webhooks_and_the_apps_answer(serve) -> None:
    c, tenant = serve
    app = await Receiver().start()
    try:
        async with listen("--secret", tenant["signingSecret"], "--forward", app.url) as rx:
            task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
            await app.wait_for(1)
            await delivery(c, tenant["apiKey"], task_id, "delivered")
            got = app.received[0]
            # What reaches the app still verifies: body and signature headers unchanged.
            verify(got.headers, got.body, secrets=[tenant["signingSecret"]])
            assert task_id.encode() in got.body
            await rx.wait_for(f"<-- 204 (from {app.url})")
    finally:
        await app.stop()


async def test_forward_failure_answers_502(serve) -> None:
    c, tenant = serve
    nowhere = f"http://127.0.0.1:{free_port()}/"
    async with listen("--secret", tenant["signingSecret"], "--forward", nowhere) as rx:
        task_id = await submit_and_complete(c, tenant["apiKey"], rx.url)
        d = await delivery(c, tenant["apiKey"], task_id, "dead")
    assert d["lastStatusCode"] == 502 and f"forward to {nowhere} failed" in rx.text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--forward", "http://127.0.0.1:1/"], "--forward needs --secret or --public-key"),
        (["--secret", "whsec_not base64!"], "not valid base64"),
        (["--public-key", "whsec_abc"], "does not start with 'whpk_'"),
        (["--status", "99"], "--status must be an HTTP status"),
    ],
)
async def test_bad_options_exit_2_with_a_reason(args: list[str], message: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "hookrelay.service.cli", "listen", *args),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and message in err.decode()
