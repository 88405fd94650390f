"""The examples of the README and of the docs pages (docs/), run as written.

Shell walk-throughs run in bash as the text gives them: the README's ``<!-- tour:... -->``
blocks and docs/getting-started.md's ``<!-- try:... -->`` blocks. Only the ports are
swapped for free ones (this machine may already use 8000 and 9000), the venv creation
is skipped (the suite runs inside one, linked as ``.venv``), and the database is the
test's instead of an embedded one. A second terminal's commands run in the background
of the third terminal's shell.

Python examples (``<!-- run:... -->``) read their credentials from the environment
variables the text tells the reader to set (``API_KEY``, ``SIGNING_SECRET``,
``ADMIN_TOKEN``, ``TASK_ID``); here they are a live ``hookrelay serve``'s. The
client examples run as their own processes, as a reader runs them, a waiting partner
beside its executor. Executors in their own transaction get the test's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import create_engine

from hookrelay.outbox.keys.signing import Signer, generate_secret
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from hookrelay.receiver.postgres import DDL
from tests.clientfakes import task_json
from tests.support import ADMIN_TOKEN, ROOT, WebhookSink, free_port, until, wait_for_port

pytestmark = pytest.mark.anyio

README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
PARTNERS = ROOT / "docs" / "guides" / "partners.md"
EXECUTORS = ROOT / "docs" / "guides" / "executors.md"
RECEIVERS = ROOT / "docs" / "guides" / "receivers.md"
VENV_LINE = "python3 -m venv .venv && .venv/bin/pip install -q ./client ."
MARKER = re.compile(r"<!-- (run|try|tour):(\S+) -->")


def blocks(page: Path, marker: str, lang: str = "sh") -> list[str]:
    """The code blocks of ``page`` right after ``<!-- marker -->``, in order."""
    return re.findall(rf"<!-- {marker} -->\n```{lang}\n(.*?)```", page.read_text(), flags=re.S)


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


# Every marked example and how many blocks it has: a new one must be added here, and
# to a test below that runs it.
MARKED = {
    ("README.md", "tour:serve"): 1,
    ("README.md", "tour:listen"): 1,
    ("README.md", "tour:walk"): 1,
    ("README.md", "run:partner"): 1,
    ("README.md", "run:executor"): 1,
    ("README.md", "run:receiver"): 1,
    ("README.md", "run:ops"): 1,
    ("docs/getting-started.md", "try:serve"): 1,
    ("docs/getting-started.md", "try:listen"): 1,
    ("docs/getting-started.md", "try:walk"): 2,
    ("docs/guides/partners.md", "run:partner"): 1,
    ("docs/guides/partners.md", "run:follow"): 1,
    ("docs/guides/executors.md", "run:executor"): 1,
    ("docs/guides/executors.md", "run:executor-tx"): 3,
    ("docs/guides/receivers.md", "run:dedupe"): 1,
}


def test_every_marked_example_is_run() -> None:
    found: dict[tuple[str, str], int] = {}
    for page in pages():
        for kind, name in MARKER.findall(page.read_text()):
            key = (str(page.relative_to(ROOT)), f"{kind}:{name}")
            found[key] = found.get(key, 0) + 1
    assert found == MARKED
    for (name, marker), count in MARKED.items():
        lang = "python" if marker.startswith("run:") and marker != "run:ops" else "sh"
        assert len(blocks(ROOT / name, marker, lang)) == count, (name, marker)


def test_the_readme_is_a_landing_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    # "Try it locally" makes the credentials that "Use it from Python" reads.
    assert text.index("## Run it") < text.index("## Try it locally")
    assert text.index("## Try it locally") < text.index("## Use it from Python")
    run = next(line for line in text.splitlines() if line.endswith("hookrelay serve"))
    assert run == f"{VENV_LINE} && .venv/bin/hookrelay serve"
    assert "pip install -q -e ./client -e '.[dev]' && scripts/check" in text


def test_the_python_examples_are_short_and_the_copies_agree() -> None:
    python = [
        block
        for page, marker in MARKED
        if marker.startswith("run:") and marker != "run:ops"
        for block in blocks(ROOT / page, marker, "python")
    ]
    assert python and all(len(block.strip().splitlines()) <= 15 for block in python)
    # The guides show the README's partner and executor as they are.
    assert blocks(PARTNERS, "run:partner", "python") == blocks(README, "run:partner", "python")
    assert blocks(EXECUTORS, "run:executor", "python") == blocks(README, "run:executor", "python")


def ports(text: str, api: int, rx: int) -> str:
    return text.replace(":8000", f":{api}").replace("9000", str(rx))


async def start_serve(
    tmp_path: Path, dsn: str, api: int, line: str
) -> tuple[asyncio.subprocess.Process, dict[str, str]]:
    """Terminal 1: ``line`` in ``tmp_path`` on the test's database, until it listens."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKRELAY_")}
    env |= {"DATABASE_URL": dsn, "HOOKRELAY_PORT": str(api)}
    server = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        line,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    await wait_for_port(api, server, timeout=60)
    return server, env


async def run_script(tmp_path: Path, env: dict[str, str], lines: list[str]) -> tuple[int, str]:
    """Terminals 2 and 3 in one bash, stopping at the first failure; exit status, output."""
    walk = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        "\n".join(["set -eo pipefail", *lines]),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    raw, _ = await asyncio.wait_for(walk.communicate(), 120)
    assert walk.returncode is not None
    return walk.returncode, raw.decode()


def in_background(commands: str, log: str) -> list[str]:
    """Terminal 2 in the background of terminal 3, until its receiver is up."""
    return [
        f"{{\n{commands.strip()}\n}} > {log} 2>&1 &",
        # The group's subshell and what it runs (hookrelay listen is its child, not it).
        "LISTENER=$!; trap 'pkill -P $LISTENER; kill $LISTENER' EXIT",
        f"until grep -q Ready: {log}; do sleep 0.1; done",
    ]


async def test_the_readme_tour_and_its_python_as_written(dsn: str, tmp_path: Path) -> None:
    """Terminal 1's serve, terminal 2's tenant and listener, terminal 3's walk; then
    partner.py waiting while executor.py finishes its task, and the ops commands."""
    api, rx = free_port(), free_port()
    (serve,) = blocks(README, "tour:serve")
    (listen,) = blocks(README, "tour:listen")
    (walk,) = blocks(README, "tour:walk")
    (ops,) = blocks(README, "run:ops")
    for name in ("partner", "executor"):
        (example,) = blocks(README, f"run:{name}", "python")
        (tmp_path / f"{name}.py").write_text(ports(example, api, rx))
    server, env = await start_serve(tmp_path, dsn, api, serve.strip())
    try:
        code, out = await run_script(
            tmp_path,
            env,
            [
                *in_background(ports(listen, api, rx), "listen.log"),
                ports(walk, api, rx),
                # partner.py in one terminal, executor.py in another with the id it printed
                ".venv/bin/python partner.py > partner.log 2>&1 &",
                "PARTNER=$!",
                "until grep -q submitted partner.log; do sleep 0.1; done",
                "TASK_ID=$(awk '/^submitted/ {print $2}' partner.log) .venv/bin/python executor.py",
                "wait $PARTNER",
                "cat partner.log",
                ports(ops, api, rx),
                # both webhooks verified before the listener goes
                "until [ $(grep -c 'verified (v1)' listen.log) -ge 2 ]; do sleep 0.1; done",
            ],
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        await server.wait()
    assert code == 0, out
    received = (tmp_path / "listen.log").read_text()
    assert '"status":"succeeded"' in out, out
    assert re.search(r"submitted task_\S+\nsucceeded \{'pages': 1\}$", out, flags=re.M), out
    assert "no dead letters match" in out and "would replay 0 dead letter(s)" in out, out
    webhooks = re.findall(r"--> POST /webhooks  evt_\S+  task.succeeded", received)
    assert len(webhooks) == 2 and "NOT verified" not in received, received


async def test_getting_started_walk_through_as_written(dsn: str, tmp_path: Path) -> None:
    api, rx = free_port(), free_port()
    (serve,) = blocks(GETTING_STARTED, "try:serve")
    (listen,) = blocks(GETTING_STARTED, "try:listen")
    before, after = blocks(GETTING_STARTED, "try:walk")
    assert serve.splitlines()[0] == VENV_LINE
    server, env = await start_serve(tmp_path, dsn, api, serve.splitlines()[1])
    try:
        code, out = await run_script(
            tmp_path,
            env,
            [
                ports(before, api, rx),
                *in_background(ports(listen, api, rx), "listen.log"),
                ports(after, api, rx),
            ],
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        await server.wait()
    assert code == 0, out
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


async def test_executor_examples_run_as_written(pool: asyncpg.Pool, runtime) -> None:
    """Each executor in its own transaction (asyncpg, psycopg, SQLAlchemy) completes a
    task with the caller's own write."""
    examples = blocks(EXECUTORS, "run:executor-tx", "python")
    engine = create_engine(runtime.dsn.replace("postgresql://", "postgresql+psycopg://"))
    # The executor's own connection, made the plain way: no codec or set-up of ours.
    plain = await asyncpg.connect(runtime.dsn)
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE renders (id int PRIMARY KEY, url text)")
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        for n, example in enumerate(examples):
            await conn.execute("INSERT INTO renders VALUES ($1)", n)
            task, _ = await create_task(
                conn, tenant.id, NewTask(type="render", callback_url="http://127.0.0.1:9/h")
            )
            url = f"https://cdn.example/{n}.png"
            scope: dict[str, Any] = {}
            exec(compile(example, str(EXECUTORS), "exec"), scope)
            finish = scope["finish_render"]
            # The first argument is the caller's: a connection, a DSN or an engine.
            first = {"conn": plain, "dsn": runtime.dsn, "engine": engine}
            given = [first[p] for p in inspect.signature(finish).parameters if p in first]
            done = finish(*given, task.id, n, url)
            if inspect.isawaitable(done):
                await done
            row = await conn.fetchrow("SELECT status, result FROM tasks WHERE id = $1", task.id)
            assert (row["status"], row["result"]) == ("succeeded", {"url": url}), example
            assert await conn.fetchval("SELECT url FROM renders WHERE id = $1", n) == url
            assert await conn.fetchval("SELECT count(*) FROM outbox WHERE task_id = $1", task.id)
    engine.dispose()  # its pool's connection, which an app keeps
    await plain.close()
    assert len(examples) == 3


def run_example(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_partner_examples_beside_the_executor_and_the_receiver(
    hookrelay_serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partner's wait and follow, each as its own process with the executor run beside
    it on the id it printed; then the receiver verifies and deduplicates the webhooks
    that serve delivered."""
    tenant = hookrelay_serve.tenant()
    sink = WebhookSink()
    env = {"API_KEY": tenant["apiKey"], "ADMIN_TOKEN": ADMIN_TOKEN}

    def here(code: str) -> str:
        code = code.replace("http://127.0.0.1:8000", hookrelay_serve.url)
        return code.replace("http://127.0.0.1:9000/webhooks", sink.url)

    (executor,) = blocks(README, "run:executor", "python")
    outputs = []
    try:
        for page, name in ((README, "run:partner"), (PARTNERS, "run:follow")):
            (example,) = blocks(page, name, "python")
            partner = run_example(here(example), env)
            assert partner.stdout is not None
            first = partner.stdout.readline()
            assert first.startswith("submitted task_"), first + partner.stdout.read()
            done = subprocess.run(
                [sys.executable, "-c", here(executor)],
                env={**os.environ, **env, "TASK_ID": first.split()[1]},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            out, _ = partner.communicate(timeout=60)
            assert partner.returncode == 0, out
            outputs.append(out.splitlines())
        until(lambda: len(sink.received) == 2, timeout=20, what="both webhooks")
    finally:
        sink.close()
    assert outputs[0] == ["succeeded {'pages': 1}"]
    # The stream starts at the task's state when it opens: the executor may be ahead.
    expected = ["queued", "running", "50% rendering", "succeeded"]
    assert outputs[1] and outputs[1] == expected[len(expected) - len(outputs[1]) :], outputs[1]

    monkeypatch.setenv("SIGNING_SECRET", tenant["signingSecret"])
    (receiver,) = blocks(README, "run:receiver", "python")
    scope: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(receiver, scope)
        receive = scope["receive"]
        answers = [receive(headers, body) for headers, body in sink.received]
        headers, body = sink.received[0]
        answers.append(receive(headers, body))  # a redelivery: no second "received"
        answers.append(receive(headers, body.replace(b"succeeded", b"failed")))
    assert answers == [204, 204, 204, 400]
    ids = sorted(h["webhook-id"] for h, _ in sink.received)
    received = sorted(line.split()[2] for line in printed.getvalue().splitlines())
    assert received == ids and printed.getvalue().count("task.succeeded") == 2


async def test_dedupe_example_runs_as_written(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    (example,) = blocks(RECEIVERS, "run:dedupe", "python")
    secret = generate_secret()
    monkeypatch.setenv("SIGNING_SECRET", secret)
    task = task_json("succeeded", 2, result={"pages": 3})
    body = json.dumps({"type": "task.succeeded", "timestamp": "2026-01-01T00:00:00Z", "data": task})
    headers = Signer([secret]).headers("evt_1", int(time.time()), body.encode())
    async with pool.acquire() as conn:
        await conn.execute(DDL)
        await conn.execute("CREATE TABLE renders (task_id text, pages int)")
        scope: dict[str, Any] = {}
        exec(example, scope)
        for _ in range(2):  # the same webhook twice: one row
            await scope["receive"](conn, headers, body.encode())
        assert await conn.fetch("SELECT * FROM renders") == [("task_a", 3)]
