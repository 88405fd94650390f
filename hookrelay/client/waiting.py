"""``wait``: until a task is terminal, by long polls, or by polls with backoff.

Each request is a long poll (``?wait=``, at most 30 s, with the last ETag). The
server holds it until the task changes; an answer that comes back early and
unchanged means nothing held it (a server shutting down, a proxy that drops the
parameter, a server without long polls), and so do a lost connection and a 5xx or
429: then the next request waits its turn, 200 ms doubling to 2 s, never sooner
than ``Retry-After``. Any change resets that schedule.
"""

from __future__ import annotations

from hookrelay.client.backoff import Backoff, Clock
from hookrelay.client.calls import TaskCache, task_path
from hookrelay.client.errors import (
    ApiError,
    RateLimited,
    ServerError,
    TransportError,
    WaitTimeout,
    retry_after,
)
from hookrelay.client.ops import Call, Plan, Send, Sleep
from hookrelay.models import Task

MAX_HOLD_S = 30.0
# Beyond the hold, how long the answer may take to arrive before the poll is lost.
READ_SLACK_S = 10.0


def seconds(value: float) -> str:
    """``?wait=`` as the server reads it: a plain decimal, at most 30."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def wait(task_id: str, timeout: float, clock: Clock, cache: TaskCache) -> Plan[Task]:
    deadline = clock.now() + timeout
    backoff = Backoff()
    task: Task | None = None
    etag: str | None = None
    while True:
        hold = min(MAX_HOLD_S, max(0.0, deadline - clock.now()))
        call = Call(
            "GET",
            task_path(task_id),
            params={"wait": seconds(hold)} if hold >= 0.001 else {},
            headers={"If-None-Match": etag} if etag else {},
            retry="none",
            read_timeout=hold + READ_SLACK_S,
        )
        asked = clock.now()
        try:
            reply = yield Send(call)
        except (TransportError, ServerError, RateLimited) as exc:
            after = exc.retry_after if isinstance(exc, ApiError) else None
        else:
            response = reply.response
            after = retry_after(response)
            changed = False
            if response.status_code != 304:
                new, new_etag = Task.from_json(response.json()), response.headers.get("etag")
                changed = etag is not None and new_etag != etag
                task, etag = new, new_etag
                cache.put(task_id, etag, task)
                if task.terminal:
                    return task
            if changed or clock.now() - asked >= hold / 2:
                backoff.reset()  # a change, or a poll that was held: ask again at once
                if clock.now() >= deadline:
                    raise WaitTimeout(task, timeout)
                continue
        left = deadline - clock.now()
        if left <= 0:
            raise WaitTimeout(task, timeout)
        yield Sleep(min(backoff.next(after), left))
