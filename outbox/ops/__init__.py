"""What is done to events outside their normal path: dead letters and their replay,
operator actions that leave an audit trail, putting an event back in the outbox,
and purging what is past retention.

- :mod:`.dead_letters`  what the dispatcher gave up on: listing, lookup, replay
- :mod:`.audit`         replays and circuit closes recorded with who, how many and why
- :mod:`.requeue`       the one way an event goes back (replay and redelivery alike)
- :mod:`.retention`     purges in small batches within a time budget

May import: the store, errors and models. :mod:`hookrelay.outbox.tasks` builds on
:mod:`.requeue` and :mod:`.retention`, so nothing here imports a task's use cases.

The names below are the package's surface: what the service (and any caller outside
the outbox) imports, from here and not from the modules. Inside the outbox, modules
import each other's modules directly.
"""

from hookrelay.outbox.ops.audit import (
    NO_REASON,
    MinuteCount,
    bulk_replay,
    close_circuit,
    preview_replay,
    replay_audited,
    replay_selected,
)
from hookrelay.outbox.ops.dead_letters import (
    DeadLetter,
    DeadLetterFilter,
    get_dead_letter,
    list_dead_letters,
    to_resource,
)

__all__ = [
    "NO_REASON",
    "DeadLetter",
    "DeadLetterFilter",
    "MinuteCount",
    "bulk_replay",
    "close_circuit",
    "get_dead_letter",
    "list_dead_letters",
    "preview_replay",
    "replay_audited",
    "replay_selected",
    "to_resource",
]
