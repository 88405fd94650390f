"""Every receiver snippet in docs/guides/receivers.md, run against webhooks signed by
hookrelay's signer.

Node and Go snippets need their toolchains: missing ones skip the test on a developer's
machine, but fail it in CI (``CI`` set), where ``.ci/run`` installs them.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from hookrelay.outbox.keys.signing import Signer, generate_secret
from tests.support import ROOT, free_port, wait_for_port

pytestmark = pytest.mark.anyio

DOC = ROOT / "docs" / "guides" / "receivers.md"
# snippet name -> (file name, build command or None, run command, toolchain)
RUNNERS = {
    "python-standardwebhooks": ("receiver.py", None, [sys.executable, "receiver.py"], None),
    "python-hmac": ("receiver.py", None, [sys.executable, "receiver.py"], None),
    "node": ("receiver.js", None, ["node", "receiver.js"], "node"),
    # Built first: under `go run` the server is a grandchild that outlives a terminate.
    "go": ("receiver.go", ["go", "build", "-o", "receiver", "receiver.go"], ["./receiver"], "go"),
}


def snippet(name: str) -> str:
    found = re.search(rf"<!-- snippet:{name} -->\n```\w+\n(.*?)```", DOC.read_text(), re.S)
    assert found, f"docs/guides/receivers.md has no {name} snippet"
    return found.group(1)


def test_every_snippet_is_tested() -> None:
    assert set(re.findall(r"<!-- snippet:(\S+) -->", DOC.read_text())) == set(RUNNERS)


class Snippet:
    def __init__(self, proc: asyncio.subprocess.Process, port: int, secret: str) -> None:
        self.proc, self.url, self.secret = proc, f"http://127.0.0.1:{port}/webhooks", secret

    async def output(self) -> str:
        self.proc.terminate()
        out, _ = await self.proc.communicate()
        return out.decode()


@pytest.fixture(params=sorted(RUNNERS))
async def running(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Snippet]:
    name: str = request.param
    filename, build, command, tool = RUNNERS[name]
    if tool is not None and shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed; CI must run the {name} snippet")
        pytest.skip(f"{tool} is not installed")
    (tmp_path / filename).write_text(snippet(name))
    port = free_port()
    secret = generate_secret()
    env = {
        **os.environ,
        "PORT": str(port),
        "WEBHOOK_SECRET": secret,
        # Go builds into a cache of its own and never fetches a newer toolchain.
        "GOCACHE": str(tmp_path / "gocache"),
        "GOPATH": str(tmp_path / "gopath"),
        "GOTOOLCHAIN": "local",
    }
    if build is not None:
        builder = await asyncio.create_subprocess_exec(
            *build, cwd=tmp_path, env=env, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(builder.communicate(), 300)
        assert builder.returncode == 0, err.decode()
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await wait_for_port(port, proc)
        yield Snippet(proc, port, secret)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


BODY = b'{"type":"task.succeeded","timestamp":"2026-12-03T00:00:00Z","data":{"id":"task_1"}}'


async def test_snippet_verifies_deduplicates_and_refuses(running: Snippet) -> None:
    # A rotation in progress: the receiver holds only one of the two secrets.
    signer = Signer([generate_secret(), running.secret])
    now = int(time.time())
    async with httpx.AsyncClient(timeout=10) as c:

        async def post(body: bytes, ts: int, msg_id: str = "evt_1") -> int:
            headers = signer.headers(msg_id, ts, BODY)
            r = await c.post(running.url, content=body, headers=headers)
            return r.status_code

        assert await post(BODY, now) == 204
        assert await post(BODY, now + 1) == 204  # a retry: same id, new timestamp
        assert await post(BODY.replace(b"task_1", b"task_2"), now) == 400  # tampered body
        assert await post(BODY, now - 600) == 400  # too old to be fresh
        assert await post(BODY, now, msg_id="evt_2") == 204
    out = await running.output()
    assert re.findall(r"received: (\S+)", out) == ["evt_1", "evt_2"], out
    assert "received: evt_1 task.succeeded task_1" in out
    assert out.count("duplicate: evt_1") == 1 and out.count("refused") == 2, out
