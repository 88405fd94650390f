"""hookrelay for the people around the service: partners, executors and receivers.

- :mod:`hookrelay.client`: ``Client`` and ``AsyncClient`` for the HTTP API (submit,
  wait, follow, reconcile; start, progress and complete for executors).
- :mod:`hookrelay.receiver`: verify a webhook's signature, deduplicate by its
  ``webhook-id``, and adapters for Starlette/FastAPI, Flask and Django.

Neither imports the service: they need only httpx, tenacity and cryptography.
"""
