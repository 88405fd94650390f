"""The HTTP API: how a request is read, authenticated, checked and answered, and the
REST routes (:mod:`.routes`).

- :mod:`.errors`         the HTTP error tree, and the one table from outbox errors to answers
- :mod:`.request_guard`  what PostgreSQL and JSON cannot hold stops before any route
- :mod:`.bodies`         request bodies: size cap, content type, strict JSON
- :mod:`.validation`     the shapes of bodies and query parameters, field by field
- :mod:`.callback_url`   the submit-time check of a callback URL
- :mod:`.auth`           tenant API keys (cached, revoked by NOTIFY) and the admin token
- :mod:`.listing`        ``GET /v1/tasks`` pages bounded in bytes
- :mod:`.openapi`        ``/openapi.json``, written as data

The bottom layer of the service: it imports the outbox and nothing else of the
service. The console and the live streams build on it; ``hookrelay.service.server.app``
mounts it all.
"""
