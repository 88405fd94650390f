"""Test events: a signed ``ping`` webhook to a URL, sent through the normal outbox.

An integrator checks their endpoint before any real task: the event is signed,
retried, logged and dead-lettered exactly like a task's, but belongs to no task
(its ``task_id`` is NULL), so no task summary follows it; its state is read
from the outbox, the dead letters and its attempt log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from hookrelay.outbox import ids
from hookrelay.outbox.errors import TestEventNotFound
from hookrelay.outbox.models import Attempt, EventId, TestEventStatus, iso
from hookrelay.outbox.store import events
from hookrelay.outbox.tasks.transitions import destination_host

__all__ = ["PING", "TestEvent", "get_test_event", "send_test_event"]

PING = "ping"


def ping_body(now: datetime) -> str:
    """The body, serialised once like every event's, so every attempt sends the same bytes."""
    payload: dict[str, Any] = {"type": PING, "timestamp": iso(now), "data": {}}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


async def send_test_event(conn: asyncpg.Connection, tenant_id: str, callback_url: str) -> EventId:
    """Queue a ping to ``callback_url`` for ``tenant_id`` (checked by the caller); its event id."""
    event_id = EventId(ids.event_id())
    async with conn.transaction():
        await events.insert_outbox(
            conn,
            event_id=event_id,
            tenant_id=tenant_id,
            task_id=None,
            event_type=PING,
            callback_url=callback_url,
            host=destination_host(callback_url),
            body=ping_body(datetime.now(UTC)),
        )
        await events.notify(conn)
    return event_id


@dataclass(frozen=True, slots=True)
class TestEvent:
    """A test event as its tenant sees it: where it is and every attempt so far."""

    __test__ = False  # not a pytest test class, whatever its name

    event_id: EventId
    status: TestEventStatus
    attempts: list[Attempt]

    def to_resource(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "type": PING,
            "status": self.status,
            "attempts": [a.to_resource() for a in self.attempts],
        }


async def get_test_event(conn: asyncpg.Connection, tenant_id: str, event_id: str) -> TestEvent:
    """The tenant's test event; :class:`TestEventNotFound` if it has none by that id."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        # One snapshot, so the state and the log agree with each other.
        status = await events.test_event_state(conn, event_id=event_id, tenant_id=tenant_id)
        if status is None:
            raise TestEventNotFound(event_id)
        log = await events.event_attempts(conn, event_id=event_id, tenant_id=tenant_id)
    return TestEvent(EventId(event_id), status, log)
