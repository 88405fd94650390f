"""The master key belongs to the database: a key check recorded once, verified at every start.

``master_key_check`` holds the key's public id and a known value sealed with
it. A process whose key cannot open that value is refused before it serves
anything: with the wrong key every signing secret is unreadable and the
dispatcher could deliver nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys.at_rest import SecretBox
from hookrelay.outbox.keys.callback_headers import reseal
from hookrelay.outbox.store import masterkey as store

# The sealed known value, and its associated data so no signing-secret blob
# (sealed with a tenant id as AAD) can pass for it.
_CHECK_VALUE = "hookrelay master key check v1"
_CHECK_AAD = b"hookrelay:master_key_check"
ENV_VAR = "HOOKRELAY_MASTER_KEY"


class MasterKeyMismatch(ConfigurationError):
    """The key given is not the one this database's secrets are encrypted under."""

    def __init__(self, expected: str, given: str, *, generated: bool = False) -> None:
        self.expected, self.given = expected, given
        if generated:
            what = f"none was set (a new key {given} would have been generated)"
        else:
            what = f"this process has key id {given}"
        super().__init__(
            f"{ENV_VAR} does not match this database: it expects master key id {expected}, "
            f"{what}; set {ENV_VAR} to the key shared by every hookrelay process"
        )


@dataclass(frozen=True, slots=True)
class KeyCheck:
    key_id: str
    recorded: bool  # True if this call recorded it (the database had none)


def _matches(box: SecretBox, check_enc: bytes) -> bool:
    try:
        return box.decrypt(check_enc, aad=_CHECK_AAD) == _CHECK_VALUE
    except ConfigurationError:
        return False


def seal_check(box: SecretBox) -> bytes:
    return box.encrypt(_CHECK_VALUE, aad=_CHECK_AAD)


async def recorded_key_id(conn: asyncpg.Connection) -> str | None:
    """The id of the key the database expects, or None if none is recorded yet."""
    row = await store.key_check(conn)
    return None if row is None else row.key_id


async def key_matches(conn: asyncpg.Connection, box: SecretBox) -> bool:
    """Whether ``box`` still opens the database's key check (True if none is recorded)."""
    row = await store.key_check(conn)
    return row is None or _matches(box, row.check_enc)


async def verify_or_record(
    conn: asyncpg.Connection, box: SecretBox, *, generated: bool = False
) -> KeyCheck:
    """Check ``box`` against the database's key check, recording it if there is none.

    ``generated``: the key was just created by this process rather than given;
    it may only become the database's key if the database has none yet.
    Raises :class:`MasterKeyMismatch` otherwise.
    """
    row = await store.key_check(conn)
    if row is None:
        async with conn.transaction():
            await store.lock_key_check(conn)
            row = await store.key_check(conn)
            if row is None:
                await store.record_key_check(conn, key_id=box.key_id, check_enc=seal_check(box))
                return KeyCheck(box.key_id, recorded=True)
    if not _matches(box, row.check_enc):
        raise MasterKeyMismatch(row.key_id, box.key_id, generated=generated)
    return KeyCheck(row.key_id, recorded=False)


async def rotate_master_key(conn: asyncpg.Connection, old: SecretBox, new: SecretBox) -> int:
    """Re-encrypt every signing secret and the key check under ``new``, in one transaction.

    Returns how many secrets were re-encrypted. Nothing changes unless every
    secret decrypts with ``old`` (a corrupted one is reported, not dropped).
    """
    async with conn.transaction():
        await store.lock_key_check(conn)
        row = await store.key_check(conn)
        if row is not None and not _matches(old, row.check_enc):
            raise MasterKeyMismatch(row.key_id, old.key_id)
        ids, blobs = [], []
        for secret in await store.secrets_for_update(conn):
            aad = secret.tenant_id.encode()
            try:
                plain = old.decrypt(secret.secret_enc, aad=aad)
            except ConfigurationError:
                raise ConfigurationError(
                    f"signing secret {secret.id} of tenant {secret.tenant_id} does not "
                    "decrypt with the current key; nothing was changed "
                    "(repair or delete that row first)"
                ) from None
            ids.append(secret.id)
            blobs.append(new.encrypt(plain, aad=aad))
        await store.reencrypt_secrets(conn, ids=ids, blobs=blobs)
        # Tasks' callback headers are sealed under the same key (keys.callback_headers).
        task_ids, sealed = [], []
        for task_id, blob in await store.callback_headers_for_update(conn):
            try:
                sealed.append(reseal(old, new, task_id, blob))
            except ConfigurationError:
                raise ConfigurationError(
                    f"the callback headers of task {task_id} do not decrypt with the "
                    "current key; nothing was changed (repair or delete that row first)"
                ) from None
            task_ids.append(task_id)
        await store.reencrypt_callback_headers(conn, task_ids=task_ids, blobs=sealed)
        await store.record_key_check(conn, key_id=new.key_id, check_enc=seal_check(new))
    return len(ids)
