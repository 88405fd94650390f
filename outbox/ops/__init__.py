"""What is done to events outside their normal path: dead letters and their replay,
operator actions that leave an audit trail, putting an event back in the outbox,
and purging what is past retention.

- :mod:`.dead_letters`  what the dispatcher gave up on: listing, lookup, replay
- :mod:`.audit`         replays and circuit closes recorded with who, how many and why
- :mod:`.requeue`       the one way an event goes back (replay and redelivery alike)
- :mod:`.retention`     purges in small batches within a time budget

May import: the store, errors and models. :mod:`hookrelay.outbox.tasks` builds on
:mod:`.requeue` and :mod:`.retention`, so nothing here imports a task's use cases.
"""
