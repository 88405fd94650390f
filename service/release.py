"""The release this process runs, as ``hookrelay --version`` and ``/healthz`` name it."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version


@cache
def release() -> str:
    try:
        return version("hookrelay")
    except PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "unknown"
