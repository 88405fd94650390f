"""What an API process does once a task write has committed: wake whoever waits on it.

The API's writes send no NOTIFY inside their transaction: notifying commits
queue on one lock across the whole PostgreSQL cluster, which capped every
tenant's writes at the rate that lock lets commits through. Instead, after the
commit, :meth:`Signals.committed`

- wakes this process's long-polls on the task at once;
- asks the stream hub to number the change, which pushes it to every stream
  (one numbering serves all the commits made while the previous one ran);
- for a new event, wakes the dispatchers: those of this process directly
  (``serve``), every other through one ``NOTIFY hookrelay_outbox`` per burst,
  sent outside any writer's transaction by the numbering that burst asks for
  anyway (one round trip, not two: ``number_changes_and_wake``). The NOTIFY names
  this process when it has a dispatcher of its own, which then ignores it: it was
  woken at each commit already, and looking again cost a due-lanes read per burst.

A process that dies between a commit and these wake-ups loses nothing: the
dispatchers poll (``HOOKRELAY_POLL_INTERVAL_S``) and the sweeper numbers what is
queued at every sweep; only the push is late.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from hookrelay.outbox.destinations import host_key
from hookrelay.outbox.errors import InvalidCallbackUrl
from hookrelay.outbox.models import Task
from hookrelay.outbox.store import OUTBOX_CHANNEL
from hookrelay.service.live import StreamHub
from hookrelay.service.live.long_poll import TaskWatcher

log = logging.getLogger("hookrelay.signals")


class Signals:
    """After-commit wake-ups of one API process (see the module docstring)."""

    def __init__(self, hub: StreamHub, watcher: TaskWatcher) -> None:
        self._hub, self._watcher = hub, watcher
        self._local: list[Callable[[tuple[str, str] | None], None]] = []
        # Names this process in its NOTIFYs, so that a dispatcher it wakes directly
        # (wake_locally) does not look a second time for the same events.
        self.origin = f"api-{secrets.token_hex(8)}"

    def wake_locally(self, callback: Callable[[tuple[str, str] | None], None]) -> None:
        """Also call ``callback`` (a dispatcher of this process) for every new event,
        with its lane (destination host, tenant id) when known."""
        self._local.append(callback)

    def committed(self, task: Task) -> None:
        """A change of ``task`` has committed (a terminal one: with a new outbox event).

        Never raises: the write is committed, and a failed wake-up only makes a
        waiter find it at its next poll.
        """
        self._watcher.notify(task.id)
        if not task.terminal:
            self._hub.number_soon()
            return
        self._hub.number_soon(wake=(OUTBOX_CHANNEL, self.origin if self._local else ""))
        if not self._local:
            return
        lane = _lane(task)
        for wake in self._local:
            try:
                wake(lane)
            except Exception as exc:  # e.g. that dispatcher's loop has closed
                log.warning("could not wake a local dispatcher: %s", exc)


def _lane(task: Task) -> tuple[str, str] | None:
    """The lane of ``task``'s new event, for this process's dispatcher to claim from at
    once; None (it looks at every lane) if the URL has no destination key."""
    try:
        return host_key(task.callback_url), task.tenant_id
    except InvalidCallbackUrl:
        return None
