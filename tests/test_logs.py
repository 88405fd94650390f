"""Logs are JSON with task and event ids, and never carry a secret, key or signature."""

from __future__ import annotations

import json
import logging

import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.service.server.logs import JsonFormatter
from tests.support import ADMIN, ADMIN_TOKEN, bearer, dispatcher, wait_drained

pytestmark = pytest.mark.anyio


async def test_no_secrets_in_logs(client, pool, runtime, receiver, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    t = (await client.post("/v1/admin/tenants", json={"name": "x"}, headers=ADMIN)).json()
    r = await client.post(
        "/v1/tasks", json={"type": "t", "callbackUrl": receiver.url}, headers=bearer(t["apiKey"])
    )
    tid = r.json()["id"]
    await client.post(f"/v1/tasks/{tid}/complete", json={"status": "succeeded"}, headers=ADMIN)
    await client.get("/v1/tasks/x", headers=bearer("hr_wrong_key"))
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        await wait_drained(pool)
    signature = receiver.received[0].headers["webhook-signature"]
    formatter = JsonFormatter()
    lines = [formatter.format(rec) for rec in caplog.records]
    text = "\n".join(lines)
    for secret in (
        t["apiKey"],
        t["signingSecret"],
        ADMIN_TOKEN,
        signature.split(",")[1],
        runtime.settings.master_key,
        "hr_wrong_key",
    ):
        assert secret not in text
    entries = [json.loads(line) for line in lines]
    attempts = [e for e in entries if e["msg"].startswith("attempt")]
    assert attempts and attempts[0]["task_id"] == tid and attempts[0]["event_id"].startswith("evt_")
    stopped = [e for e in entries if e["msg"] == "dispatcher stopped"]
    assert stopped and stopped[0]["counters"]["delivered"] == 1
