"""Statements as values, and operations written once as plans over them.

An operation that executors call from their own transaction (complete a task,
report progress) is written as a *plan*: a generator that yields the
:class:`Step` it needs next and is sent back that step's decoded result. The
plan holds the logic and never touches a connection, so the same plan runs on
asyncpg, psycopg 3 or SQLAlchemy, sync or async (``hookrelay.outbox.store.drivers``).
Steps are built by the store modules that own their statements.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")
Row = Mapping[str, Any]


class Step(NamedTuple):
    """One statement of ``queries.sql`` with its arguments.

    ``decode`` turns the one row it returns into a dataclass (None: the
    statement returns nothing worth reading, and is only executed). Arguments
    and columns are values every driver binds and reads alike, with no codec
    of the connection's: JSON goes both ways as text, cast in the SQL.

    Immutable like the store's dataclasses, but a tuple: a completion builds three
    on the API's path, and a frozen dataclass takes over twice as long to build.
    """

    sql: str
    args: tuple[Any, ...]
    decode: Callable[[Row], Any] | None = None


# Sent the previous step's result: the decoded row, or None (no row, or not read).
Plan = Generator[Step, Any, T]
