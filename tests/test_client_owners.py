"""The client's calls for a tenant's own dead letters and notifications, sync and async,
against a live ``hookrelay serve``: typed answers, the error tree, and a lost answer."""

from __future__ import annotations

import contextlib
import socket
from datetime import datetime, timedelta

import pytest
from standardwebhooks import Webhook

from hookrelay.client import (
    AsyncClient,
    Client,
    Conflict,
    DeadLetter,
    InvalidRequest,
    NotFound,
    Notifications,
    Unauthorized,
)
from tests.support import ADMIN_TOKEN, LosingProxy, WebhookSink, eventually, free_port, until


def nowhere() -> str:
    """A URL nothing listens on: every attempt fails, and the event dies. A port of its
    own per test, so one test's failures open no circuit in front of another's."""
    return f"http://127.0.0.1:{free_port()}/hook"


def test_dead_letters_replay_and_notifications(hookrelay_serve) -> None:
    partner = hookrelay_serve.tenant()
    hook = nowhere()
    sink = WebhookSink()
    try:
        with (
            contextlib.ExitStack() as stack,
            Client(hookrelay_serve.url, partner["apiKey"], admin_token=ADMIN_TOKEN) as c,
        ):
            assert c.notifications() is None
            told = c.set_notifications(sink.url, ["delivery.dead"])
            assert isinstance(told, Notifications)
            assert (told.url, told.events) == (sink.url, ("delivery.dead",))
            assert c.notifications() == told
            tasks = [c.submit("t", callback_url=hook) for _ in range(2)]
            for t in tasks:
                c.complete(t.id, "succeeded")

            def both_dead() -> list[DeadLetter]:
                found = list(c.dead_letters(page_size=1))  # one page per letter
                return found if len(found) == 2 else []

            letters = until(both_dead, 30, what="two dead letters")
            assert {x.task_id for x in letters} == {t.id for t in tasks}
            one = c.dead_letter(letters[0].event_id)
            assert [a.number for a in one.attempt_history] == [1, 2, 3]
            assert one.replayed_at is None and one.tenant_id == partner["id"]
            with pytest.raises(NotFound):
                c.dead_letter("evt_nope")
            assert c.replay(dry_run=True) == 2
            future = datetime.now().astimezone() + timedelta(days=1)
            assert c.replay(since=future, dry_run=True) == 0
            assert list(c.dead_letters(event_type="task.failed")) == []

            # Told once per dead event, signed with the tenant's secret.
            until(lambda: len(sink.received) == 2, 30, what="two notifications")
            for headers, body in sink.received:
                payload = Webhook(partner["signingSecret"]).verify(body, headers)
                assert payload["type"] == "delivery.dead"
            assert {p["data"]["eventId"] for p in (
                Webhook(partner["signingSecret"]).verify(b, h) for h, b in sink.received
            )} == {x.event_id for x in letters}  # fmt: skip

            # From here on the callback's port takes connections and never answers, so a
            # replayed event takes its attempts' deadlines (seconds) to die again, not
            # milliseconds: the "already replayed" below cannot race its next death.
            hanging = socket.create_server(("127.0.0.1", int(hook.rsplit(":", 1)[1].split("/")[0])))
            stack.callback(hanging.close)
            # One replay whose answer is lost: sent again, the 409 is taken as its answer.
            proxy = LosingProxy(hookrelay_serve.port)
            try:
                with Client(proxy.url, partner["apiKey"]) as lossy:
                    assert lossy.replay(letters[0].event_id, reason="endpoint fixed") == 1
            finally:
                proxy.close()
            assert proxy.lost == 1
            with pytest.raises(Conflict) as refused:
                c.replay(letters[0].event_id)  # sent once: "already replayed" is an error
            assert refused.value.code == "already_replayed"
            # The rest by filter: only letters dead before the first replayed one died again.
            cut = max(x.failed_at for x in letters) + timedelta(microseconds=1)
            assert c.replay(until=cut, event_type="task.succeeded", reason="bulk") == 1

            with pytest.raises(InvalidRequest):
                c.set_notifications("http://10.0.0.1/hook")
            with pytest.raises(InvalidRequest):
                list(c.dead_letters(since="yesterday"))
            with pytest.raises(ValueError):
                c.replay(since=datetime(2026, 1, 1), dry_run=True)  # no time zone
            c.delete_notifications()
            c.delete_notifications()
            assert c.notifications() is None
        with Client(hookrelay_serve.url, "hr_wrong") as wrong, pytest.raises(Unauthorized):
            list(wrong.dead_letters())
        admin = Client(hookrelay_serve.url, admin_token=ADMIN_TOKEN)
        with admin, pytest.raises(ValueError, match="api_key"):
            admin.notifications()  # refused before sending: no tenant key
    finally:
        sink.close()


@pytest.mark.anyio
async def test_the_same_calls_with_await(hookrelay_serve) -> None:
    partner = hookrelay_serve.tenant()
    hook = nowhere()
    async with AsyncClient(hookrelay_serve.url, partner["apiKey"], admin_token=ADMIN_TOKEN) as c:
        assert await c.notifications() is None
        told = await c.set_notifications(nowhere())
        assert told.events == ("delivery.dead", "destination.unhealthy", "destination.recovered")
        assert await c.notifications() == told
        task = await c.submit("t", callback_url=hook)
        await c.complete(task.id, "failed", error={"why": "x"})

        async def dead() -> list[DeadLetter]:
            found = [x async for x in c.dead_letters(event_type="task.failed")]
            return found if found else []

        await eventually(dead, 30)
        [letter] = await dead()
        assert letter.task_id == task.id and letter.event_type == "task.failed"
        shown = await c.dead_letter(letter.event_id)
        assert len(shown.attempt_history) == 3
        assert await c.replay(dry_run=True, event_type="task.failed") == 1
        assert await c.replay(letter.event_id) == 1
        with pytest.raises(NotFound):
            await c.replay("evt_nope")
        await c.delete_notifications()
        assert await c.notifications() is None
