"""What is done to events outside their normal path: dead letters and their replay,
operator actions that leave an audit trail, putting an event back in the outbox,
and purging what is past retention.

- :mod:`.dead_letters`  what the dispatcher gave up on: listing, lookup, replay
- :mod:`.audit`         replays and circuit closes recorded with who, how many and why
- :mod:`.requeue`       the one way an event goes back (replay and redelivery alike)
- :mod:`.retention`     purges in small batches within a time budget
- :mod:`.notifications` where a tenant is told about its own delivery trouble

May import (pyproject.toml's layers) the store, destinations and the shared errors, ids,
metrics and models; never keys or egress, its neighbours, nor tasks, which builds on
:mod:`.requeue` and :mod:`.retention`. It uses the store, errors and models.

Its surface, ``__all__``, is what the service imports (never its modules).
"""

from hookrelay.outbox.ops.audit import (
    NO_REASON,
    MinuteCount,
    bulk_replay,
    close_circuit,
    preview_replay,
    record,
    replay_audited,
    replay_selected,
    tenant_actor,
)
from hookrelay.outbox.ops.dead_letters import (
    DeadLetter,
    DeadLetterFilter,
    get_dead_letter,
    list_dead_letters,
)
from hookrelay.outbox.ops.notifications import (
    NOTIFICATION_TYPES,
    NotificationSettings,
    SentNotification,
    delete_notifications,
    get_notifications,
    recent_notifications,
    set_notifications,
)

__all__ = [
    "NOTIFICATION_TYPES",
    "NO_REASON",
    "NotificationSettings",
    "SentNotification",
    "delete_notifications",
    "get_notifications",
    "recent_notifications",
    "set_notifications",
    "DeadLetter",
    "DeadLetterFilter",
    "MinuteCount",
    "bulk_replay",
    "close_circuit",
    "get_dead_letter",
    "list_dead_letters",
    "preview_replay",
    "record",
    "replay_audited",
    "replay_selected",
    "tenant_actor",
]
