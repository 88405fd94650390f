"""The hookrelay service: the HTTP API, the live status streams, the ops console, the
long-running processes and the CLI, all over :mod:`hookrelay.outbox`.

Imports go one way, each line building on the next (pyproject.toml's contracts)::

    cli
    server
    console | live
    api

and reach the outbox through its subpackages' public names (the package map in
CONTRIBUTING.md); the service never runs SQL of its own.
"""
