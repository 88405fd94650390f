"""The signing-key cache: a rotation is used from the first event claimed after it commits."""

from __future__ import annotations

import pytest

from outbox.dispatcher import running
from outbox.errors import SignatureError
from outbox.keyring import Keyring
from outbox.signing import verify
from outbox.tenants import create_tenant, rotate_secret

from .support import backlog, dispatcher

pytestmark = pytest.mark.anyio


async def test_rotation_takes_effect_at_once(pool, runtime, receiver) -> None:
    tenant, _ = await backlog(pool, runtime, receiver.url, 1)
    secrets = [tenant.signing_secret]
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)  # the first key is cached now
        for n in range(2, 6):
            async with pool.acquire() as conn:
                # No overlap: from the commit on, only the new key may sign.
                secrets.append(await rotate_secret(conn, tenant.id, runtime.secret_box, 0))
            await backlog(pool, runtime, receiver.url, 1, tenant)  # no sleep in between
            await receiver.wait_for(n)
    for got, secret, previous in zip(receiver.received[1:], secrets[1:], secrets[:-1], strict=True):
        assert len(got.headers["webhook-signature"].split()) == 1
        verify([secret], got.headers, got.body)
        with pytest.raises(SignatureError):
            verify([previous], got.headers, got.body)


async def test_rotation_with_overlap_signs_with_new_key_at_once(pool, runtime, receiver) -> None:
    tenant, _ = await backlog(pool, runtime, receiver.url, 1)
    async with running(dispatcher(runtime, pool)):
        await receiver.wait_for(1)
        async with pool.acquire() as conn:
            new = await rotate_secret(conn, tenant.id, runtime.secret_box, 3600)
        await backlog(pool, runtime, receiver.url, 1, tenant)
        await receiver.wait_for(2)
    after = receiver.received[1]
    assert len(after.headers["webhook-signature"].split()) == 2
    verify([new], after.headers, after.body)
    verify([tenant.signing_secret], after.headers, after.body)


async def test_same_version_is_served_from_cache(pool, runtime) -> None:
    ring = Keyring(runtime.secret_box, ttl_s=3600)
    async with pool.acquire() as conn:
        t = await create_tenant(conn, "acme", runtime.secret_box)
        first = (await ring.signers(conn, {t.id: 1}))[t.id]
        new = await rotate_secret(conn, t.id, runtime.secret_box, 0)
        # Same version asked: the cached signer, though the database moved on.
        assert (await ring.signers(conn, {t.id: 1}))[t.id] is first
        # The version the claim read after the rotation: loaded afresh.
        fresh = (await ring.signers(conn, {t.id: 2}))[t.id]
    assert fresh is not first
    headers = fresh.headers("msg_1", 1_700_000_000, b"{}")
    verify([new], headers, b"{}", now=1_700_000_000)
