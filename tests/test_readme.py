"""The README's "Try it locally" walk-through and its Python examples, run as written.

The commands are taken from the README's ``<!-- try:... -->`` blocks; only the ports are
swapped for free ones (this machine may already use 8000 and 9000), the venv creation is
skipped (the suite runs inside it), and the database is the test's instead of an embedded
one. Terminal 2's listener runs in the background of terminal 3's shell.

The Python examples (``<!-- run:... -->`` blocks) are executed with the names the text
calls yours bound to the test's: the executor examples on the test's database, the
client and receiver ones against a live ``hookrelay serve``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from hookrelay.client import Client
from hookrelay.outbox.keys.signing import Signer, generate_secret
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from hookrelay.receiver.postgres import DDL
from tests.clientfakes import task_json
from tests.support import ADMIN_TOKEN, ROOT, WebhookSink, free_port, until, wait_for_port

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
    caller's own write, given the names the text calls yours: ``dsn`` only, so each
    makes its own connection the plain way (no codec or set-up call of hookrelay's)."""
    examples = python_blocks("executor")
    assert len(examples) == 3
    assert "conn = await asyncpg.connect(dsn)\n" in examples[0]
    assert not any("init_connection" in example for example in examples)
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE renders (id int PRIMARY KEY, url text)")
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        for n, example in enumerate(examples):
            await conn.execute("INSERT INTO renders VALUES ($1)", n)
            task, _ = await create_task(
                conn, tenant.id, NewTask(type="render", callback_url="http://127.0.0.1:9/h")
            )
            url = f"https://cdn.example/{n}.png"
            code = compile(example, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            scope = {"dsn": runtime.dsn, "task_id": task.id, "url": url, "render_id": n}
            ran = eval(code, scope)
            if ran is not None:
                await ran
            if "engine" in scope:
                scope["engine"].dispose()  # its pool's connection, which an app keeps
            if n == 0:  # the executor's own, bare asyncpg connection, closed by the example
                assert type(scope["conn"]) is asyncpg.Connection and scope["conn"].is_closed()
            done = await conn.fetchrow("SELECT status, result FROM tasks WHERE id = $1", task.id)
            assert (done["status"], done["result"]) == ("succeeded", {"url": url}), example
            assert await conn.fetchval("SELECT url FROM renders WHERE id = $1", n) == url
            assert await conn.fetchval("SELECT count(*) FROM outbox WHERE task_id = $1", task.id)


PYTHON_EXAMPLES = ("client", "executor-http", "receiver", "dedupe")


def test_the_python_examples_are_short() -> None:
    blocks = [block for kind in PYTHON_EXAMPLES for block in python_blocks(kind)]
    assert len(blocks) == 5
    assert all(len(block.strip().splitlines()) < 15 for block in blocks)
    text = (ROOT / "README.md").read_text()
    # The client comes first: right after the quick start.
    assert text.index("## Use it from Python") < text.index("## Try it locally")


def test_client_and_receiver_examples_run_as_written(hookrelay_serve) -> None:
    """Submit-and-wait and follow against a live serve, whose tasks an executor thread
    completes with the README's executor example; then the receiver example verifies
    and deduplicates the webhooks that serve delivered."""
    tenant = hookrelay_serve.tenant()
    sink = WebhookSink()
    submit_and_wait, follow = python_blocks("client")
    (executor,) = python_blocks("executor-http")
    (receiver,) = python_blocks("receiver")

    def here(code: str) -> str:
        code = code.replace("http://127.0.0.1:8000", hookrelay_serve.url)
        return code.replace("http://127.0.0.1:9000/webhooks", sink.url)

    def execute() -> None:
        # Every task of the tenant, from its first change on: none can be missed.
        done = 0
        with Client(hookrelay_serve.url, tenant["apiKey"]) as watch:
            for event in watch.follow_all(last_event_id=0):
                if event.task.status == "queued":
                    exec(here(executor), {"admin_token": ADMIN_TOKEN, "task_id": event.task.id})
                    done += 1
                if done == 2:
                    return

    worker = threading.Thread(target=execute, daemon=True)
    worker.start()
    try:
        outputs = []
        for example in (submit_and_wait, follow):
            with contextlib.redirect_stdout(io.StringIO()) as out:
                exec(here(example), {"api_key": tenant["apiKey"]})
            outputs.append(out.getvalue().splitlines())
        worker.join(30)
        until(lambda: len(sink.received) == 2, timeout=20, what="both webhooks")
    finally:
        sink.close()
    assert outputs[0] == ["succeeded {'pages': 1}"]
    # The stream starts at the task's state when it opens: the executor may be ahead.
    expected = ["queued", "running", "50% rendering", "succeeded"]
    assert outputs[1] == expected[len(expected) - len(outputs[1]) :], outputs[1]

    scope: dict[str, Any] = {"signing_secret": tenant["signingSecret"]}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(receiver, scope)
        receive = scope["receive"]
        answers = [receive(headers, body) for headers, body in sink.received]
        headers, body = sink.received[0]
        answers.append(receive(headers, body))  # a redelivery: no second "received"
        answers.append(receive(headers, body.replace(b"succeeded", b"failed")))
    assert answers == [204, 204, 204, 400]
    ids = sorted(h["webhook-id"] for h, _ in sink.received)
    received = sorted(line.split()[2] for line in out.getvalue().splitlines())
    assert received == ids and out.getvalue().count("task.succeeded") == 2


async def test_dedupe_example_runs_as_written(pool: asyncpg.Pool) -> None:
    (example,) = python_blocks("dedupe")
    secret = generate_secret()
    task = task_json("succeeded", 2, result={"pages": 3})
    body = json.dumps({"type": "task.succeeded", "timestamp": "2026-01-01T00:00:00Z", "data": task})
    headers = Signer([secret]).headers("evt_1", int(time.time()), body.encode())
    async with pool.acquire() as conn:
        await conn.execute(DDL)
        await conn.execute("CREATE TABLE renders (task_id text, pages int)")
        scope: dict[str, Any] = {"signing_secret": secret}
        exec(example, scope)
        for _ in range(2):  # the same webhook twice: one row
            await scope["receive"](conn, headers, body.encode())
        assert await conn.fetch("SELECT * FROM renders") == [("task_a", 3)]
