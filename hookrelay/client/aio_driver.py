"""The async driver: runs a call's plan with httpx.AsyncClient, tenacity and ``anyio``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, TypeVar, cast

import httpx
from tenacity import AsyncRetrying

from hookrelay.client import retry
from hookrelay.client.backoff import AsyncClock
from hookrelay.client.base import Settings, check, failed, request_for
from hookrelay.client.errors import ApiError
from hookrelay.client.ops import Emit, Next, Op, Open, Plan, Reply, Send, Sleep
from hookrelay.client.sse import Parser, ServerEvent

T = TypeVar("T")


class _Stream:
    """The one stream a plan has open, read event by event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response, self.lines, self.parser = response, response.aiter_lines(), Parser()

    async def next(self) -> ServerEvent | None:
        with failed():
            async for line in self.lines:
                if (event := self.parser.feed(line)) is not None:
                    return event
        return None


class _Streams:
    current: _Stream | None = None

    async def close(self) -> None:
        if self.current is not None:
            await self.current.response.aclose()
            self.current = None


class AsyncDriver:
    """Performs the operations of plans (:mod:`hookrelay.client.ops`) for ``AsyncClient``."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings, clock: AsyncClock) -> None:
        self.http, self.settings, self.clock = http, settings, clock

    async def run(self, plan: Plan[T]) -> T:
        streams = _Streams()
        sent: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    op = plan.throw(error) if error is not None else plan.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)
                assert not isinstance(op, Emit), "a one-answer call emitted items"
                sent, error = await self._perform(op, streams)
        finally:
            plan.close()
            await streams.close()

    async def iterate(self, plan: Plan[None]) -> AsyncGenerator[Any, None]:
        streams = _Streams()
        sent: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    op = plan.throw(error) if error is not None else plan.send(sent)
                except StopIteration:
                    return
                if isinstance(op, Emit):
                    sent, error = None, None
                    yield op.item
                else:
                    sent, error = await self._perform(op, streams)
        finally:
            plan.close()
            await streams.close()

    async def _perform(self, op: Op, streams: _Streams) -> tuple[Any, Exception | None]:
        """(answer, None), or (None, the error to hand to the plan)."""
        try:
            if isinstance(op, Send):
                return await self._send(op), None
            if isinstance(op, Sleep):
                await self.clock.sleep(op.seconds)
            elif isinstance(op, Open):
                await streams.close()
                streams.current, status = await self._open(op)
                return status, None
            elif isinstance(op, Next):
                assert streams.current is not None, "Next before Open"
                return await streams.current.next(), None
        except Exception as exc:  # handed to the plan, which may handle it
            return None, exc
        return None, None

    async def _send(self, op: Send) -> Reply:
        request = request_for(self.http, op.call, self.settings)
        options = retry.options(op.call.retry, self.settings.attempts)
        attempts = 0
        try:
            async for attempt in AsyncRetrying(sleep=self.clock.sleep, **options):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    with failed():
                        response = await self.http.send(request)
                    check(response)
        except ApiError as exc:
            exc.attempts = attempts
            raise
        return Reply(response, attempts)

    async def _open(self, op: Open) -> tuple[_Stream | None, int]:
        request = request_for(self.http, op.call, self.settings)
        with failed():
            response = await self.http.send(request, stream=True)
            if response.status_code != 200:
                await response.aread()
        if response.status_code != 200:
            await response.aclose()
            check(response)
            return None, response.status_code
        return _Stream(response), response.status_code
