"""Every signal one hookrelay process sends another, in one place: channel, payload, version.

Signals are PostgreSQL NOTIFYs. They only wake things up early: dispatchers also
poll, stream hubs number and read the log every second while they have
subscribers, and every listener looks at everything again after a gap. But a
listener that cannot read a signal waits for its next poll, which for a status
stream or a long poll is a stall its client sees. It happened once: 0013 changed
the ``changes`` payload and stopped the API's writes from sending ``tasks``, and
until they were stopped, the streams and long polls of APIs still on the release
before went silent. So a signal's format is versioned, and a release sends and
understands the signals of the release before it.

**Versions.** A signal's payload format has a version, carried by its channel's
name: ``hookrelay_<signal>`` is version 1 (the names 0.1.0 used, from before
versions were named), ``hookrelay_<signal>_v<N>`` is version N (:attr:`Signal.channel`).
A payload's format never changes under a channel name. A release that changes a
format sends the new version beside the old one, and listens to both, for as long
as the releases it runs beside (:data:`RUNS_BESIDE`) read the old one; a later
release drops it. A payload a listener cannot parse is treated as a gap (look at
everything again), never as an error.

**This release** sends and understands version 1 of every signal, exactly the
formats 0.1.0 sends and understands (tests/test_signal_versions.py pins them;
tests/test_upgrade.py runs 0.1.0's processes beside these):

- ``outbox``: payload empty (any payload is ignored). Sent by the API after its
  commits (with their numbering, ``number_changes_and_wake``), by an executor's
  completion at commit (``notify``) and by the console closing a circuit. Heard by
  dispatchers: claim now.
- ``tasks``: payload one task id (empty: none). Sent by executors' transactions
  at commit (``notify``, ``notify_task``). Heard by long polls (wake that task's
  waiters) and stream hubs (number the change queue now).
- ``changes``: payload lines ``<tenant id> <last seq> [<task id> ...]``, a tenant
  on one line or several, under 8000 bytes a notification. Sent by the numberer
  inside the database (``number_task_changes``, schema.sql), whichever process
  numbers, whatever its release. Heard by stream hubs (read the tenant's log) and
  long polls (wake the tasks named).
- ``keys``: payload one tenant id. Sent by an API key rotation
  (``rotate_api_key``). Heard by the APIs' key caches: forget that tenant's keys.

The ``changes`` signal is sent by SQL in the database, so its format is the
migrations' to change, not a release's: once a migration changes it, every
process's numbering sends the new one, old processes' included. Such a migration
must go on sending version 1 too while the releases before it may run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal at one version of its payload format."""

    name: str
    version: int

    @property
    def channel(self) -> str:
        """The NOTIFY channel: unsuffixed for version 1 (0.1.0's names), ``_v<N>`` after."""
        base = f"hookrelay_{self.name}"
        return base if self.version == 1 else f"{base}_v{self.version}"


OUTBOX = Signal("outbox", 1)
TASKS = Signal("tasks", 1)
CHANGES = Signal("changes", 1)
KEYS = Signal("keys", 1)

# What this release sends, and what it listens to. Both hold the previous release's
# version of each signal while the two may run side by side.
SENT: tuple[Signal, ...] = (OUTBOX, TASKS, CHANGES, KEYS)
UNDERSTOOD: tuple[Signal, ...] = (OUTBOX, TASKS, CHANGES, KEYS)

# The releases whose processes may run beside this one's on one database, in a
# rolling upgrade or a rollback: they send only signals in UNDERSTOOD, and hear
# every signal this release sends (version 1 of each). 0.1.0 is commit a62dbb1,
# the release before the version was first raised.
RUNS_BESIDE = ("0.1.0",)


@dataclass(frozen=True, slots=True)
class Changed:
    """One line of a ``changes`` notification: a tenant's new last number, and its tasks."""

    tenant_id: str
    last_seq: int
    task_ids: tuple[str, ...]


def parse_changes(payload: str) -> list[Changed] | None:
    """The lines of a ``changes`` payload (version 1); None if it is not one."""
    changed: list[Changed] = []
    for line in payload.splitlines():
        tenant_id, _, rest = line.partition(" ")
        seq, _, tasks = rest.partition(" ")
        if not tenant_id or not seq.isdigit():
            return None
        changed.append(Changed(tenant_id, int(seq), tuple(tasks.split())))
    return changed
