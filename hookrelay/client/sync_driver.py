"""The blocking driver: runs a call's plan with httpx.Client, tenacity and ``time.sleep``."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, TypeVar, cast

import httpx
from tenacity import Retrying

from hookrelay.client import retry
from hookrelay.client.backoff import SyncClock
from hookrelay.client.base import Settings, check, failed, request_for
from hookrelay.client.errors import ApiError
from hookrelay.client.ops import Emit, Next, Open, Plan, Reply, Send, Sleep
from hookrelay.client.sse import Parser, ServerEvent

T = TypeVar("T")


class _Stream:
    """The one stream a plan has open, read event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response, self.lines, self.parser = response, response.iter_lines(), Parser()

    def next(self) -> ServerEvent | None:
        with failed():
            for line in self.lines:
                if (event := self.parser.feed(line)) is not None:
                    return event
        return None


class SyncDriver:
    """Performs the operations of plans (:mod:`hookrelay.client.ops`) for ``Client``."""

    def __init__(self, http: httpx.Client, settings: Settings, clock: SyncClock) -> None:
        self.http, self.settings, self.clock = http, settings, clock

    def run(self, plan: Plan[T]) -> T:
        drive = self._drive(plan)
        try:
            next(drive)
        except StopIteration as done:
            return cast(T, done.value)
        raise AssertionError("a one-answer call emitted items")  # pragma: no cover

    def iterate(self, plan: Plan[None]) -> Iterator[Any]:
        return self._drive(plan)

    def _drive(self, plan: Plan[T]) -> Generator[Any, None, T]:
        """Runs ``plan``, yielding what it emits; returns what it returns."""
        stream: _Stream | None = None
        sent: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    op = plan.throw(error) if error is not None else plan.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
                sent, error = None, None
                if isinstance(op, Emit):
                    yield op.item
                    continue
                try:
                    if isinstance(op, Send):
                        sent = self._send(op)
                    elif isinstance(op, Sleep):
                        self.clock.sleep(op.seconds)
                    elif isinstance(op, Open):
                        if stream is not None:
                            stream.response.close()
                        stream, sent = self._open(op)
                    elif isinstance(op, Next):
                        assert stream is not None, "Next before Open"
                        sent = stream.next()
                except Exception as exc:  # handed to the plan, which may handle it
                    error = exc
        finally:
            plan.close()
            if stream is not None:
                stream.response.close()

    def _send(self, op: Send) -> Reply:
        request = request_for(self.http, op.call, self.settings)
        options = retry.options(op.call.retry, self.settings.attempts)
        attempts = 0
        try:
            for attempt in Retrying(sleep=self.clock.sleep, **options):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    with failed():
                        response = self.http.send(request)
                    check(response)
        except ApiError as exc:
            exc.attempts = attempts
            raise
        return Reply(response, attempts)

    def _open(self, op: Open) -> tuple[_Stream | None, int]:
        request = request_for(self.http, op.call, self.settings)
        with failed():
            response = self.http.send(request, stream=True)
            if response.status_code != 200:
                response.read()
        if response.status_code != 200:
            response.close()
            check(response)
            return None, response.status_code
        return _Stream(response), response.status_code
