"""Waiting on a condition, in place of fixed sleeps, for tests and benchmarks alike."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def eventually(
    predicate: Callable[[], Any], timeout: float = 10.0, *, what: str = "", every: float = 0.02
) -> Any:
    """Call ``predicate`` (sync or async) until it returns something truthy; return that.

    In place of fixed sleeps: the test (or benchmark) goes on as soon as the condition
    holds, and a loaded machine gets the whole ``timeout`` before it fails. ``every`` is the
    pause between calls, longer for a predicate that is itself costly.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            name = what or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"not true after {timeout:g} s: {name} (last: {value!r})")
        await asyncio.sleep(every)
