"""The REST routes, one module per resource, each with a ``routes`` list that
``hookrelay.service.server.app`` mounts: tasks, admin (tenants), dead letters,
destinations, signing keys, test events, health, metrics and the docs page.

The streaming routes (SSE, WebSocket) are in :mod:`hookrelay.service.live`. May import
the rest of :mod:`hookrelay.service.api` and the outbox.
"""
