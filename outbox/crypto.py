"""Signing secrets at rest: AES-GCM under the master key, the tenant id as associated data."""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import ConfigurationError

VERSION = b"\x01"
NONCE_BYTES = 12
KEY_FILE = "master.key"
HOW_TO = ('generate one with: python -c "import secrets,base64;'
          'print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"')


class SecretBox:
    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise ConfigurationError("the master key must be 32 bytes")
        self._aead = AESGCM(master_key)

    def __repr__(self) -> str:
        return "SecretBox(***)"

    def encrypt(self, plaintext: str, *, aad: bytes) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, plaintext.encode(), aad)

    def decrypt(self, blob: bytes, *, aad: bytes) -> str:
        if blob[:1] != VERSION:
            raise ConfigurationError("cannot decrypt signing secret: unknown format")
        nonce, ciphertext = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, ciphertext, aad).decode()
        except InvalidTag as exc:
            raise ConfigurationError(
                "cannot decrypt signing secret: wrong master key or corrupted data"
            ) from exc


def parse_master_key(value: str) -> bytes:
    """A 32-byte key from standard or URL-safe base64, padding optional."""
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    for decode in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            key = decode(padded)
        except (binascii.Error, ValueError):
            continue
        if len(key) == 32:
            return key
    raise ConfigurationError(f"the master key must be base64 of 32 bytes; {HOW_TO}")


def load_or_create_master_key(env_value: str | None, data_dir: Path) -> bytes:
    """The env key, else ``data_dir/master.key``, created (0600) on first use."""
    if env_value:
        return parse_master_key(env_value)
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / f".{KEY_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode() + "\n")
        try:
            os.link(tmp, path)  # fails if another process won the race: use theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return parse_master_key(path.read_text())
