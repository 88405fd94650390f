"""Signing secrets at rest: AES-GCM under the master key, the tenant id as associated data.

A stored blob is ``version (1 byte) || nonce (12 bytes) || ciphertext+tag``. The
version byte leaves room to change the format (or the key) later without
guessing what an old row holds.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from hookrelay.outbox.errors import ConfigurationError

VERSION = 1
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
KEY_FILE = "master.key"
HOW_TO_GENERATE = (
    'generate one with: python -c "import secrets,base64;'
    'print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"'
)
_DECRYPT_FAILED = "cannot decrypt signing secret: wrong master key or corrupted data"
_TO_STANDARD_ALPHABET = str.maketrans("-_", "+/")


class SecretBox:
    """Encrypts and decrypts signing secrets with one 32-byte master key."""

    __slots__ = ("_aead", "key_id")

    def __init__(self, master_key: bytes) -> None:
        if not isinstance(master_key, bytes) or len(master_key) != KEY_BYTES:
            raise ConfigurationError(f"the master key must be {KEY_BYTES} bytes")
        # Only the AESGCM object keeps the key, so no attribute of ours can leak it.
        self._aead = AESGCM(master_key)
        self.key_id = key_id(master_key)

    def __repr__(self) -> str:
        return f"SecretBox(key_id={self.key_id!r}, <master key hidden>)"

    def encrypt(self, plaintext: str, *, aad: bytes) -> bytes:
        """A versioned blob; ``aad`` (the tenant id) must be given again to decrypt."""
        # Random 96-bit nonces: safe for far more secrets than one key will ever seal.
        nonce = os.urandom(NONCE_BYTES)
        return bytes((VERSION,)) + nonce + self._aead.encrypt(nonce, plaintext.encode(), aad)

    def decrypt(self, blob: bytes, *, aad: bytes) -> str:
        """The plaintext of ``blob``; ConfigurationError if key, aad or data do not match."""
        data = bytes(blob)
        if len(data) < 1 + NONCE_BYTES + TAG_BYTES or data[0] != VERSION:
            raise ConfigurationError(_DECRYPT_FAILED)
        nonce, ciphertext = data[1 : 1 + NONCE_BYTES], data[1 + NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, ciphertext, aad).decode()
        except InvalidTag:
            raise ConfigurationError(_DECRYPT_FAILED) from None


def key_id(master_key: bytes) -> str:
    """A short public name for a key: 8 hex digits of a domain-separated SHA-256.

    Safe to print and store: recovering a random 256-bit key from its hash is
    infeasible, and the prefix only has to tell a handful of keys apart.
    """
    return hashlib.sha256(b"hookrelay master key id\0" + master_key).hexdigest()[:8]


def parse_master_key(value: str) -> bytes:
    """32 key bytes from standard or URL-safe base64, padding optional."""
    text = value.strip().rstrip("=")
    # One strict decode covers both alphabets; strict so stray characters are an
    # error rather than silently dropped.
    padded = text.translate(_TO_STANDARD_ALPHABET) + "=" * (-len(text) % 4)
    try:
        key = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        # The value is a secret: say what is wrong, never echo it.
        raise ConfigurationError(
            f"the master key must be base64 of exactly {KEY_BYTES} bytes; {HOW_TO_GENERATE}"
        )
    return key


def load_or_create_master_key(env_value: str | None, data_dir: Path) -> bytes:
    """The env key if set, else ``data_dir/master.key``, created (mode 0600) on first use."""
    if env_value:
        return parse_master_key(env_value)
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        _publish_new_key(path)
    try:
        return parse_master_key(path.read_text())
    except ConfigurationError as exc:
        raise ConfigurationError(f"{path}: {exc}") from None


def _publish_new_key(path: Path) -> None:
    """Write a fresh key to ``path`` unless another process got there first."""
    text = base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode() + "\n"
    # A random suffix, not the pid: in a container every start may be pid 1, and a
    # temp file left by a crash must not block the next start.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            # link() publishes the complete file atomically and, unlike replace(),
            # refuses to overwrite: the first process wins and the others read its key.
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:
            # Filesystems without hard links: replace() is still atomic, but a
            # simultaneous starter could overwrite ours, so only do it if still absent.
            if not path.exists():
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Losing the key file in a crash would make every stored secret unreadable,
    # so make the new directory entry durable where the platform allows it.
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
