"""``hookrelay tenants list|rotate-key`` as a user runs them."""

from __future__ import annotations

import json

import pytest

from hookrelay.outbox.tenants import authenticate
from tests.support import cli_env, run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.processes]


async def test_list_then_rotate_key(pool, runtime, dsn) -> None:
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("tenants", "list", env=env)
    assert code == 0, err
    assert "no tenants yet" in out
    made = []
    for name in ("acme", "globex"):
        code, out, err = await run_cli("tenants", "create", name, "--json", env=env)
        assert code == 0, err
        made.append(json.loads(out))
    code, out, err = await run_cli("tenants", "list", "--json", env=env)
    assert code == 0, err
    listed = [json.loads(line) for line in out.splitlines()]
    assert [t["id"] for t in listed] == [t["id"] for t in made]
    assert all(t["secretCount"] == 1 for t in listed)
    code, out, _ = await run_cli("tenants", "list", env=env)
    assert "acme" in out and "globex" in out and made[0]["apiKey"] not in out

    code, out, err = await run_cli("tenants", "rotate-key", made[0]["id"], "--json", env=env)
    assert code == 0, err
    new_key = json.loads(out)["apiKey"]
    async with pool.acquire() as conn:
        assert await authenticate(conn, made[0]["apiKey"]) is None
        assert await authenticate(conn, new_key) == made[0]["id"]
        assert await authenticate(conn, made[1]["apiKey"]) == made[1]["id"]


async def test_rotate_key_of_unknown_tenant_is_one_line(runtime, dsn) -> None:
    code, out, err = await run_cli("tenants", "rotate-key", "ten_nope", env=cli_env(runtime, dsn))
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and "ten_nope" in err


async def test_create_v1a_prints_the_public_key(runtime, dsn) -> None:
    env = cli_env(runtime, dsn)
    code, out, err = await run_cli("tenants", "create", "acme", "--scheme", "v1a", env=env)
    assert code == 0, err
    assert "public key:      whpk_" in out and "signing secret" not in out
    code, out, err = await run_cli("tenants", "create", "b", "--scheme", "both", "--json", env=env)
    assert code == 0, err
    made = json.loads(out)
    assert made["signatureScheme"] == "both"
    assert made["signingSecret"].startswith("whsec_") and made["publicKey"].startswith("whpk_")
    code, _, err = await run_cli("tenants", "create", "c", "--scheme", "v2", env=env)
    assert code != 0 and "--scheme" in err
