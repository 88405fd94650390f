"""``hookrelay.outbox.sync`` on SQLAlchemy sync connections and sessions needs no greenlet.

``sqlalchemy.ext.asyncio`` requires greenlet (the ``sqlalchemy[asyncio]`` extra); a
sync executor that installed plain ``sqlalchemy`` must not pull it in. The check runs
in a child interpreter whose import system refuses greenlet, as if it were not installed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import asyncpg
import pytest

from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from tests.executors import sa_url
from tests.support import ROOT

pytestmark = pytest.mark.anyio

CHILD = textwrap.dedent(
    """
    import json, sys

    class NoGreenlet:
        def find_spec(self, name, path=None, target=None):
            if name == "greenlet" or name.startswith("greenlet."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoGreenlet())
    url, started, completed = sys.argv[1:]

    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    import hookrelay.outbox.sync

    engine = create_engine(url)
    with engine.begin() as conn:
        running = hookrelay.outbox.sync.start_task(conn, started)
    with Session(engine) as session, session.begin():
        done = hookrelay.outbox.sync.complete_task(session, completed, "succeeded", result={"ok": 1})
    engine.dispose()
    try:
        import sqlalchemy.ext.asyncio  # noqa: F401
        blocked = False
    except ImportError:
        blocked = True
    print(json.dumps({
        "statuses": [running.status, done.status],
        "greenlet": "greenlet" in sys.modules,
        "asyncio_ext": "sqlalchemy.ext.asyncio" in sys.modules,
        "blocked": blocked,
    }))
    """
)


async def test_sync_sqlalchemy_runs_without_greenlet(pool: asyncpg.Pool, runtime) -> None:
    async with pool.acquire() as conn:
        tenant = await create_tenant(conn, "acme", runtime.secret_box)
        spec = NewTask(type="t", callback_url="http://127.0.0.1:9/h")
        started, _ = await create_task(conn, tenant.id, spec)
        completed, _ = await create_task(conn, tenant.id, spec)
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", CHILD, sa_url(runtime.dsn, "psycopg"), started.id, completed.id),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    seen = json.loads(out)
    # The hook works (the asyncio extension cannot load), and nothing needed it.
    assert seen == {
        "statuses": ["running", "succeeded"],
        "greenlet": False,
        "asyncio_ext": False,
        "blocked": True,
    }
    rows = await pool.fetch("SELECT status FROM tasks WHERE id = ANY($1) ORDER BY id", [started.id])
    assert [r["status"] for r in rows] == ["running"]
    assert await pool.fetchval("SELECT count(*) FROM outbox WHERE task_id = $1", completed.id) == 1
