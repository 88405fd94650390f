"""Ids: a prefix and 130 random bits in lowercase base32, as they always were spelled."""

from __future__ import annotations

import base64
import re
import secrets

import pytest

from hookrelay.outbox import ids


def test_ids_are_prefix_and_26_lowercase_base32_characters() -> None:
    made = {ids.task_id() for _ in range(1000)}
    assert len(made) == 1000
    assert all(re.fullmatch(r"task_[a-z2-7]{26}", i) for i in made)
    assert re.fullmatch(r"evt_[a-z2-7]{26}", ids.event_id())
    assert re.fullmatch(r"ten_[a-z2-7]{26}", ids.tenant_id())


@pytest.mark.parametrize("raw", [bytes(17), b"\xff" * 17, bytes(range(17)), b"\x80" + bytes(16)])
def test_token_is_base32_of_its_random_bytes(raw: bytes, monkeypatch) -> None:
    """The first 26 characters of base64.b32encode, lowercased: the spelling of every id
    stored before the encoding was made faster."""
    monkeypatch.setattr(secrets, "token_bytes", lambda n: raw[:n])
    assert ids.task_id() == "task_" + base64.b32encode(raw).decode()[:26].lower()
