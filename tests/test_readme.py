"""The README's "Try it locally" walk-through, run as written against a live ``hookrelay serve``.

The commands are taken from the README's ``<!-- try:... -->`` blocks; only the ports are
swapped for free ones (this machine may already use 8000 and 9000), the venv creation is
skipped (the suite runs inside it), and the database is the test's instead of an embedded
one. Terminal 2's listener runs in the background of terminal 3's shell.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import asyncpg
import pytest

from outbox.tasks import NewTask, create_task
from outbox.tenants import create_tenant

from .support import ROOT, free_port, wait_for_port

pytestmark = pytest.mark.anyio

VENV_LINE = "python3 -m venv .venv && .venv/bin/pip install -q -e ."


def blocks(kind: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"<!-- try:{kind} -->\n```sh\n(.*?)```", text, flags=re.S)


def test_readme_has_the_walk_through() -> None:
    (serve,) = blocks("serve")
    assert serve.splitlines()[0] == VENV_LINE
    assert len(blocks("listen")) == 1 and len(blocks("walk")) == 2


async def test_try_it_locally_as_written(dsn: str, tmp_path: Path) -> None:
    api, rx = free_port(), free_port()

    def ports(text: str) -> str:
        return text.replace(":8000", f":{api}").replace("9000", str(rx))

    (serve,) = blocks("serve")
    (listen,) = blocks("listen")
    before, after = blocks("walk")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "DATABASE_URL": dsn, "HOOKRELAY_PORT": str(api)}
    env = {k: v for k, v in env.items() if not k.startswith("HOOKRELAY_") or k == "HOOKRELAY_PORT"}
    server = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        serve.splitlines()[1],
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    script = "\n".join(
        [
            "set -eo pipefail",
            ports(before),
            f"{ports(listen).strip()} > listen.log 2>&1 &",
            "LISTENER=$!; trap 'kill $LISTENER' EXIT",
            "until grep -q Ready: listen.log; do sleep 0.1; done",
            ports(after),
        ]
    )
    try:
        await wait_for_port(api, server, timeout=60)
        walk = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        raw, _ = await asyncio.wait_for(walk.communicate(), 120)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        await server.wait()
    out = raw.decode()
    assert walk.returncode == 0, out
    received = (tmp_path / "listen.log").read_text()

    # The dead receiver: three attempts, a dead letter, redeliver 202 then 409 while pending.
    assert out.count("Cannot connect to host") >= 3, out
    assert "'status': 'dead', 'attempts': 3" in out
    assert re.search(r"HTTP/1.1 202.*HTTP/1.1 409 .*already", out, flags=re.S), out
    # With the listener up: the replay and the second task arrive verified, the redelivery too.
    assert "'status': 'delivered'" in out and "HTTP/1.1 304" in out
    assert received.count("signature verified (v1)") == 3, received
    assert "NOT verified" not in received and "task.succeeded" in received
    ids = re.findall(r"--> POST /webhooks  (evt_\S+)  task.failed", received)
    assert len(ids) == 2 and ids[0] == ids[1], received  # redelivered: the same webhook-id


def python_blocks(kind: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"<!-- run:{kind} -->\n```python\n(.*?)```", text, flags=re.S)


async def test_executor_examples_run_as_written(pool: asyncpg.Pool, runtime) -> None:
    """Each executor example (asyncpg, psycopg, SQLAlchemy) completes a task with the
    caller's own write, given the names the text calls yours."""
    examples = python_blocks("executor")
    assert len(examples) == 3
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE renders (id int PRIMARY KEY, url text)")
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        for n, example in enumerate(examples):
            await conn.execute("INSERT INTO renders VALUES ($1)", n)
            task, _ = await create_task(
                conn, tenant.id, NewTask(type="render", callback_url="http://127.0.0.1:9/h")
            )
            url = f"https://cdn.example/{n}.png"
            names = {"conn": conn, "dsn": runtime.dsn, "task_id": task.id}
            code = compile(example, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            scope = {**names, "url": url, "render_id": n}
            ran = eval(code, scope)
            if ran is not None:
                await ran
            if "engine" in scope:
                scope["engine"].dispose()  # its pool's connection, which an app keeps
            done = await conn.fetchrow("SELECT status, result FROM tasks WHERE id = $1", task.id)
            assert (done["status"], done["result"]) == ("succeeded", {"url": url}), example
            assert await conn.fetchval("SELECT url FROM renders WHERE id = $1", n) == url
            assert await conn.fetchval("SELECT count(*) FROM outbox WHERE task_id = $1", task.id)
