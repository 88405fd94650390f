"""The queries.sql loader: blocks, fragments, and no statement without its store function."""

from __future__ import annotations

import pathlib
import re

import pytest

from hookrelay.outbox import sql as _queries

STORE = pathlib.Path(_queries.__file__).parent / "store"


def test_blocks_drop_their_comment_and_splice_fragments() -> None:
    text = """-- header
-- name: _where
-- a fragment
x = $1;

-- name: pick
-- why it exists
SELECT * FROM t WHERE {{_where}};
"""
    assert _queries._parse(text) == {"pick": "SELECT * FROM t WHERE x = $1"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        _queries._parse("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")


def test_every_statement_has_a_store_function_and_every_lookup_a_statement() -> None:
    used = set()
    for path in STORE.glob("*.py"):
        used |= set(re.findall(r'sql\("(\w+)"\)', path.read_text()))
    assert used == set(_queries.load())


def test_no_fragment_is_left_unspliced() -> None:
    for name, sql in _queries.load().items():
        assert "{{" not in sql, name
