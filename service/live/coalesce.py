"""Work that many callers ask for and one run can do for all of them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

log = logging.getLogger("hookrelay.coalesce")
RETRY_S = 1.0  # after a run that failed (the database is away)


class Coalesced:
    """Runs ``work`` soon after each :meth:`poke`; pokes made during a run share the
    next run, so a burst of pokes costs one or two runs, not one each."""

    def __init__(
        self, work: Callable[[], Awaitable[None]], *, name: str, spacing_s: float = 0.0
    ) -> None:
        # spacing_s: runs start at least this far apart. A poke after a quiet spell runs
        # at once; under a steady stream of pokes they share one run per spacing. Not a
        # fixed wait before each run: at a few hundred pokes a second that timer was a
        # wake-up of its own per poke, and each costs more than the run saves.
        self._work, self._name, self._spacing_s = work, name, spacing_s
        self._started = -math.inf  # when the last run started (loop time)
        self._again = False
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def poke(self) -> None:
        self._again = True
        if not self._stopped and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._again and not self._stopped:
            if (wait := self._started + self._spacing_s - loop.time()) > 0:
                await asyncio.sleep(wait)
            self._started = loop.time()
            self._again = False
            try:
                await self._work()
            except Exception as exc:  # what it would have done is done by polls meanwhile
                log.warning("%s failed: %s", self._name, exc)
                if not self._stopped:
                    asyncio.get_running_loop().call_later(RETRY_S, self.poke)
                return

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
