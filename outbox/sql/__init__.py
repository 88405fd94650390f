"""The statements of ``queries.sql``, parsed once at import; private to ``hookrelay.outbox.store``.

A block starts at a ``-- name: <name>`` line; its leading comment lines are
documentation and stay in the file, not in the statement. Blocks named
``_something`` are fragments: they are spliced into other blocks wherever
``{{_something}}`` appears, and are not statements of their own.

asyncpg prepares and caches each statement per connection by its text, so
handing out the same string object every time keeps them prepared.

Also here: ``schema.sql`` and ``migrations/``, read as package data. Imports nothing
of hookrelay.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_SPLICE = re.compile(r"\{\{(_\w+)\}\}")


def _parse(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    marks = list(_NAME.finditer(text))
    for mark, nxt in zip(marks, [*marks[1:], None], strict=True):
        body = text[mark.end() : nxt.start() if nxt else len(text)]
        lines = body.strip("\n").splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        sql = "\n".join(lines).strip().removesuffix(";").rstrip()
        if mark.group(1) in blocks:
            raise ValueError(f"queries.sql: {mark.group(1)!r} is defined twice")
        blocks[mark.group(1)] = sql
    fragments = {k: v for k, v in blocks.items() if k.startswith("_")}

    def splice(match: re.Match[str]) -> str:
        # Fragments may use fragments themselves (``_dead_filter`` uses ``_error_class``).
        return _SPLICE.sub(splice, fragments[match.group(1)])

    return {k: _SPLICE.sub(splice, v) for k, v in blocks.items() if not k.startswith("_")}


def load() -> dict[str, str]:
    """Every statement of the packaged ``queries.sql`` by name."""
    text = (
        resources.files("hookrelay.outbox.sql").joinpath("queries.sql").read_text(encoding="utf-8")
    )
    return _parse(text)


_ALL = load()


def sql(name: str) -> str:
    """The statement called ``name``; a KeyError at import of the store if it is missing."""
    return _ALL[name]
