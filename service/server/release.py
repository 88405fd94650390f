"""The release this process runs, as ``hookrelay --version`` and ``/healthz`` name it."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def release() -> str:
    """The installed hookrelay-server's version."""
    try:
        return version("hookrelay-server")
    except PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"
