"""Signals between processes keep the previous release's formats (outbox/store/signals.py).

0.1.0 listens on four channels and parses their payloads as written below. This
release must send exactly that, and understand it, while the two may run side by
side; a format change gets a channel of its own. The patterns here are written out
from 0.1.0's parsers, not taken from this release's code, so a change to what this
release sends fails here first. tests/test_upgrade.py runs 0.1.0's processes.
"""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from hookrelay.outbox import complete_task
from hookrelay.outbox.store import OUTBOX_CHANNEL, Listener, changes, signals, tenants
from hookrelay.outbox.store.migrations import migrations
from hookrelay.outbox.tasks.submit import NewTask, create_task
from hookrelay.outbox.tenants import create_tenant
from hookrelay.service.live.long_poll import TaskWatcher
from tests.support import ROOT, eventually

# 0.1.0's channels and what its listeners do with each payload.
PREVIOUS_RELEASE = {
    "hookrelay_outbox": re.compile(r""),  # the dispatcher ignores the payload
    "hookrelay_tasks": re.compile(r"[^\s]*"),  # the watcher takes it whole as a task id
    # the hub and the watcher split lines, then spaces: tenant, a number, task ids
    "hookrelay_changes": re.compile(r"[^\s]+ \d+( [^\s]+)*(\n[^\s]+ \d+( [^\s]+)*)*"),
    "hookrelay_keys": re.compile(r"[^\s]+"),  # the key cache takes it whole as a tenant id
}


def test_version_1_is_on_the_channels_0_1_0_uses() -> None:
    assert {s.channel for s in signals.SENT if s.version == 1} == set(PREVIOUS_RELEASE)
    assert {s.channel for s in signals.UNDERSTOOD if s.version == 1} == set(PREVIOUS_RELEASE)


def test_a_new_format_gets_a_channel_of_its_own() -> None:
    assert signals.Signal("changes", 1).channel == "hookrelay_changes"
    assert signals.Signal("changes", 2).channel == "hookrelay_changes_v2"


def test_every_channel_in_the_sql_is_a_signal_sent() -> None:
    sent = {s.channel for s in signals.SENT}
    texts = [(ROOT / "schema.sql").read_text(), (ROOT / "outbox/sql/queries.sql").read_text()]
    named = {c for text in texts for c in re.findall(r"pg_notify\('([^']+)'", text)}
    assert named and named <= sent
    # The numberer lives in the database: the migration that last defined it is what
    # every process's numbering runs, whatever its release.
    numberer = [m for m in migrations() if "FUNCTION number_task_changes" in m.sql][-1]
    assert set(re.findall(r"pg_notify\('([^']+)'", numberer.sql)) <= sent


@pytest.mark.anyio
async def test_what_this_release_sends_is_what_0_1_0_reads(dsn, pool, runtime) -> None:
    heard: list[tuple[str, str]] = []
    listener = await asyncpg.connect(dsn)
    for channel in PREVIOUS_RELEASE:
        await listener.add_listener(
            channel, lambda _c, _p, ch, payload: heard.append((ch, payload))
        )
    try:
        async with pool.acquire() as conn:
            tenant = await create_tenant(conn, "acme", runtime.secret_box)
            task, _ = await create_task(conn, tenant.id, NewTask("t", "http://127.0.0.1:9/h"))
            await complete_task(conn, task.id, "succeeded")  # an executor's, notifying
            # The API's, after its commits: with the numbering they ask for.
            await changes.number_pending(conn, wake=(OUTBOX_CHANNEL, ""))
            await tenants.replace_api_key(conn, tenant_id=tenant.id, api_key_hash=b"\x01" * 32)
        await eventually(lambda: {ch for ch, _ in heard} == set(PREVIOUS_RELEASE))
    finally:
        await listener.close()
    for channel, payload in heard:
        assert PREVIOUS_RELEASE[channel].fullmatch(payload), (channel, payload)
    assert ("hookrelay_tasks", task.id) in heard
    assert ("hookrelay_keys", tenant.id) in heard
    assert any(
        ch == "hookrelay_changes" and p.split("\n")[0].split(" ")[::2] == [tenant.id, task.id]
        for ch, p in heard
    )


@pytest.mark.anyio
async def test_what_0_1_0_sends_wakes_this_release(dsn, pool) -> None:
    listener = Listener(dsn, {}, name="test-watcher")
    watcher = TaskWatcher(listener)
    await listener.start()
    try:
        await eventually(lambda: watcher.connected)
        for channel, payload in [
            ("hookrelay_tasks", "task_a"),  # 0.1.0's executors, at commit
            ("hookrelay_changes", "ten_x 12 task_b task_a"),  # 0.1.0's numbering
            ("hookrelay_changes", "ten_x 13 task_c\nten_y 4 task_a"),
        ]:
            with watcher.watch("task_a") as woken:
                await pool.execute("SELECT pg_notify($1, $2)", channel, payload)
                await asyncio.wait_for(woken.wait(), 5)
        # A payload it cannot read (a later format on the old channel, say) wakes every
        # waiter to look again: late, never lost.
        with watcher.watch("task_z") as woken:
            await pool.execute("SELECT pg_notify('hookrelay_changes', '{\"v\": 2}')")
            await asyncio.wait_for(woken.wait(), 5)
    finally:
        await listener.stop()
