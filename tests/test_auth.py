"""API-key cache: successes only, bounded, expiring; a wrong key always reaches the database."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.auth import KeyCache
from tests.conftest import bearer

pytestmark = pytest.mark.anyio


def test_cache_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("service.auth.time.monotonic", lambda: now[0])
    cache = KeyCache(ttl_s=30)
    cache.put(b"d", "ten_a")
    assert cache.get(b"d") == "ten_a"
    now[0] += 31
    assert cache.get(b"d") is None


def test_cache_is_bounded() -> None:
    cache = KeyCache(size=3)
    for i in range(5):
        cache.put(bytes([i]), f"ten_{i}")
    assert [cache.get(bytes([i])) for i in range(5)] == [None, None, "ten_2", "ten_3", "ten_4"]


async def test_only_successes_are_cached(
    client: httpx.AsyncClient, tenant: dict[str, Any]
) -> None:
    cache: KeyCache = client._transport.app.state.key_cache  # type: ignore[attr-defined]
    for _ in range(2):
        r = await client.get("/v1/tasks", headers=bearer(tenant["apiKey"] + "x"))
        assert r.status_code == 401
    assert len(cache._entries) == 0
    r = await client.get("/v1/tasks", headers=bearer(tenant["apiKey"]))
    assert r.status_code == 200 and len(cache._entries) == 1
    # What is kept is the digest, never the key.
    assert all(tenant["apiKey"].encode() not in k for k in cache._entries)
