"""Server-Sent Events read line by line, as the HTML specification parses them.

Comments (``: ping``) are skipped; an event is dispatched at a blank line. An event
with an ``id:`` and no data (how ``GET /v1/events`` gives its starting position) is
dispatched too, with empty ``data``, so the reader can keep the position.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerEvent:
    event: str
    data: str
    id: str | None


class Parser:
    """Feed it lines (without their line ends); it returns each complete event."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self._seen = False

    def feed(self, line: str) -> ServerEvent | None:
        if line == "":
            if not self._seen:
                return None
            found = ServerEvent(self._event or "message", "\n".join(self._data), self._id)
            self._clear()
            return found
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        else:  # retry:, or a field the specification says to ignore
            return None
        self._seen = True
        return None
