"""The signing-key cache: rotations seen at once, the TTL, the overlap, undecryptable tenants."""

from __future__ import annotations

import logging

import asyncpg
import pytest

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.keys.keyring import Keyring
from hookrelay.outbox.keys.signing import Signer
from hookrelay.outbox.tenants import NewTenant, create_tenant, rotate_secret
from hookrelay.receiver import BadSignature, verify
from tests.support import backlog, dispatcher, eventually, v1_secret

pytestmark = pytest.mark.anyio


async def test_rotation_takes_effect_at_once(pool, runtime, receiver) -> None:
    tenant, _ = await backlog(pool, runtime, receiver.url, 1)
    secrets = [v1_secret(tenant)]
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)  # the first key is cached now
        for n in range(2, 6):
            async with pool.acquire() as conn:
                # No overlap: from the commit on, only the new key may sign.
                new = await rotate_secret(conn, tenant.id, runtime.secret_box, 0)
                secrets.append(v1_secret(new))
            await backlog(pool, runtime, receiver.url, 1, tenant)  # no sleep in between
            await receiver.wait_for(n)
    for got, secret, previous in zip(receiver.received[1:], secrets[1:], secrets[:-1], strict=True):
        assert len(got.headers["webhook-signature"].split()) == 1
        verify(got.headers, got.body, secrets=[secret])
        with pytest.raises(BadSignature):
            verify(got.headers, got.body, secrets=[previous])


async def test_rotation_with_overlap_signs_with_new_key_at_once(pool, runtime, receiver) -> None:
    tenant, _ = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        async with pool.acquire() as conn:
            new = v1_secret(await rotate_secret(conn, tenant.id, runtime.secret_box, 3600))
        await backlog(pool, runtime, receiver.url, 1, tenant)
        await receiver.wait_for(2)
    after = receiver.received[1]
    assert len(after.headers["webhook-signature"].split()) == 2
    verify(after.headers, after.body, secrets=[new])
    verify(after.headers, after.body, secrets=[v1_secret(tenant)])


async def test_same_version_is_served_from_cache(pool, runtime) -> None:
    ring = Keyring(runtime.secret_box, ttl_s=3600)
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "acme", runtime.secret_box)
        first = (await ring.signers(conn, {t.id: 1}))[t.id]
        new = v1_secret(await rotate_secret(conn, t.id, runtime.secret_box, 0))
        # Same version asked: the cached signer, though the database moved on.
        assert (await ring.signers(conn, {t.id: 1}))[t.id] is first
        # The version the claim read after the rotation: loaded afresh.
        fresh = (await ring.signers(conn, {t.id: 2}))[t.id]
    assert fresh is not first
    body = b'{"type": "ping", "timestamp": "2023-11-14T22:13:20Z", "data": {}}'
    headers = fresh.headers("msg_1", 1_700_000_000, body)
    verify(headers, body, secrets=[new], now=1_700_000_000)


def secret_count(signer: Signer) -> int:
    return len(signer.digests("evt_x", 0, b"{}"))


def signs_with(signer: Signer, secret: str) -> bool:
    return Signer([secret]).digests("evt_x", 0, b"{}")[0] in signer.digests("evt_x", 0, b"{}")


async def corrupt_secret(pool: asyncpg.Pool, tenant_id: str) -> None:
    """Flip one ciphertext byte: AES-GCM refuses the secret."""
    await pool.execute(
        "UPDATE signing_secrets SET secret_enc = set_byte(secret_enc, 20,"
        " get_byte(secret_enc, 20) # 255) WHERE tenant_id = $1",
        tenant_id,
    )


@pytest.fixture
async def acme(pool, runtime) -> NewTenant:
    async with pool.acquire() as conn:
        return await create_tenant(conn, "acme", runtime.secret_box)


async def test_an_expired_entry_is_loaded_again(pool, runtime, acme) -> None:
    keyring = Keyring(runtime.secret_box, ttl_s=0)
    async with pool.acquire() as conn:
        first = (await keyring.signers(conn, {acme.id: 1}))[acme.id]
        new = v1_secret(await rotate_secret(conn, acme.id, runtime.secret_box, overlap_s=3600))
        again = (await keyring.signers(conn, {acme.id: 1}))[acme.id]
    assert again is not first and secret_count(again) == 2
    assert signs_with(again, new) and signs_with(again, v1_secret(acme))


async def test_an_entry_never_outlives_the_overlap_of_its_secrets(pool, runtime, acme) -> None:
    keyring = Keyring(runtime.secret_box, ttl_s=3600)
    async with pool.acquire() as conn:
        new = v1_secret(await rotate_secret(conn, acme.id, runtime.secret_box, overlap_s=0.5))
        during = (await keyring.signers(conn, {acme.id: 2}))[acme.id]
        assert secret_count(during) == 2

        async def only_the_new_secret() -> bool:
            signer = (await keyring.signers(conn, {acme.id: 2}))[acme.id]
            return secret_count(signer) == 1 and signs_with(signer, new)

        # Same version, a TTL of an hour: still the old secret stops signing once its
        # overlap ends.
        await eventually(only_the_new_secret, 10)


async def test_many_tenants_in_one_call(pool, runtime, acme) -> None:
    async with pool.acquire() as conn:
        globex = await create_tenant(conn, "globex", runtime.secret_box)
        signers = await Keyring(runtime.secret_box).signers(conn, {acme.id: 1, globex.id: 1})
    assert signs_with(signers[acme.id], v1_secret(acme))
    assert signs_with(signers[globex.id], v1_secret(globex))
    assert not signs_with(signers[acme.id], v1_secret(globex))


async def test_an_undecryptable_tenant_is_left_out_and_not_cached(
    pool, runtime, acme, caplog
) -> None:
    keyring = Keyring(runtime.secret_box, ttl_s=3600)
    async with pool.acquire() as conn:
        bad = await create_tenant(conn, "globex", runtime.secret_box)
        stored = await conn.fetchval(
            "SELECT secret_enc FROM signing_secrets WHERE tenant_id = $1", bad.id
        )
        await corrupt_secret(pool, bad.id)
        with caplog.at_level(logging.ERROR, logger="hookrelay.keyring"):
            signers = await keyring.signers(conn, {acme.id: 1, bad.id: 1})
        assert set(signers) == {acme.id}, "the other tenant is still signed"
        assert f"cannot decrypt signing secret of tenant {bad.id}" in caplog.text
        assert v1_secret(bad) not in caplog.text

        # Repaired, it is used at once: the failure was not cached.
        await conn.execute(
            "UPDATE signing_secrets SET secret_enc = $2 WHERE tenant_id = $1", bad.id, stored
        )
        signers = await keyring.signers(conn, {acme.id: 1, bad.id: 1})
    assert signs_with(signers[bad.id], v1_secret(bad))


async def test_no_tenants_no_query(runtime) -> None:
    class NoConnection:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"the keyring touched the connection ({name})")

    assert await Keyring(runtime.secret_box).signers(NoConnection(), {}) == {}
