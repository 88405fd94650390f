"""Traffic through the cluster's APIs: tasks submitted and completed, every answer kept.

Each worker submits a task to its API and completes it, again and again, until stopped.
What was answered 2xx is what the service promised; a failover must keep all of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from bench.clusterhosts import ADMIN

PAUSE_S = 0.05  # after a failed request: a client backing off, not hammering a 503


@dataclass
class Load:
    apis: list[str]
    key: str
    callback_url: str
    workers_per_api: int = 3
    submitted: dict[str, str] = field(default_factory=dict)  # task id -> API that took it
    completed: dict[str, str] = field(default_factory=dict)  # task id -> its event id
    completed_at: dict[str, float] = field(default_factory=dict)  # task id -> monotonic
    last_ok: dict[str, float] = field(default_factory=dict)  # API -> its latest 2xx
    failures: Counter[str] = field(default_factory=Counter)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        for api in self.apis:
            for _ in range(self.workers_per_api):
                self._tasks.append(asyncio.create_task(self._worker(api)))

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def completed_since(self, t: float) -> int:
        return sum(1 for at in self.completed_at.values() if at >= t)

    def answered_since(self, api: str, t: float) -> bool:
        return self.last_ok.get(api, 0.0) >= t

    async def _worker(self, api: str) -> None:
        auth = {"Authorization": f"Bearer {self.key}"}
        async with httpx.AsyncClient(base_url=api, timeout=30) as c:
            while not self._stop.is_set():
                task_id = await self._ask(
                    api, c, "/v1/tasks", {"type": "t", "callbackUrl": self.callback_url}, auth
                )
                if task_id is None:
                    continue
                self.submitted[task_id] = api
                done = await self._ask(
                    api, c, f"/v1/tasks/{task_id}/complete", {"status": "succeeded"}, ADMIN
                )
                if done is not None:
                    self.completed[task_id] = done
                    self.completed_at[task_id] = time.monotonic()

    async def _ask(
        self, api: str, c: httpx.AsyncClient, path: str, body: object, headers: dict[str, str]
    ) -> str | None:
        """POST; on 2xx the task id (submit) or event id (complete), else None."""
        try:
            r = await c.post(path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            self.failures[type(exc).__name__] += 1
        else:
            if r.is_success:
                self.last_ok[api] = time.monotonic()
                task = r.json()
                return str(task["delivery"]["eventId"] if "complete" in path else task["id"])
            self.failures[str(r.status_code)] += 1
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), PAUSE_S)
        return None
