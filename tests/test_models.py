"""The status Literals against the schema's CHECK constraints, read from pg_catalog."""

from __future__ import annotations

import re
from typing import Any, get_args

import asyncpg
import pytest

from hookrelay.outbox.models import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    AuditAction,
    CircuitState,
    DeliveryStatus,
    KeyScheme,
    Outcome,
    SignatureScheme,
    TaskStatus,
)

pytestmark = pytest.mark.anyio

# (table, column) -> the Literal its CHECK must list, exactly.
CHECKED: dict[tuple[str, str], Any] = {
    ("tasks", "status"): TaskStatus,
    ("tasks", "delivery_status"): DeliveryStatus,
    ("delivery_attempts", "outcome"): Outcome,
    ("destinations", "state"): CircuitState,
    ("ops_audit", "action"): AuditAction,
    ("tenants", "signature_scheme"): SignatureScheme,
    ("signing_secrets", "scheme"): KeyScheme,
}


async def test_check_constraints_list_exactly_the_literals(pool: asyncpg.Pool) -> None:
    rows = await pool.fetch("""
        SELECT c.conrelid::regclass::text AS tbl, a.attname AS col,
               pg_get_constraintdef(c.oid) AS def
          FROM pg_constraint c
          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
         WHERE c.contype = 'c' AND cardinality(c.conkey) = 1
    """)
    found = {(r["tbl"], r["col"]): set(re.findall(r"'([^']*)'::text", r["def"])) for r in rows}
    for (table, column), literal in CHECKED.items():
        assert (table, column) in found, f"no CHECK on {table}.{column}"
        assert found[(table, column)] == set(get_args(literal)), f"{table}.{column}"


def test_live_and_terminal_statuses_partition_the_task_statuses() -> None:
    assert set(LIVE_STATUSES) | set(TERMINAL_STATUSES) == set(get_args(TaskStatus))
    assert not set(LIVE_STATUSES) & set(TERMINAL_STATUSES)
