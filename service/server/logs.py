"""Structured JSON logs, one object a line; ``extra={"task_id": ..., "event_id": ...}`` is kept."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from hookrelay.service.server.tty_text import one_line

CONTEXT_KEYS = ("task_id", "event_id", "tenant_id", "counters")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class PlainFormatter(logging.Formatter):
    """For one-shot commands: ``hookrelay: warning: ...`` on one printable line."""

    def format(self, record: logging.LogRecord) -> str:
        return f"hookrelay: {record.levelname.lower()}: {one_line(record.getMessage())}"


def configure(level: str = "INFO", *, json_lines: bool = True) -> None:
    """JSON lines at ``level`` for services; for one-shot commands (``json_lines=False``)
    warnings and errors only, as plain lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Access logs would carry Authorization-free but noisy lines per request.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
