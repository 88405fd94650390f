"""Signing secrets at rest: AES-GCM round trips, every way decryption must fail, key files."""

from __future__ import annotations

import base64
import secrets
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hookrelay.outbox.errors import ConfigurationError
from hookrelay.outbox.keys.at_rest import (
    NONCE_BYTES,
    SecretBox,
    load_or_create_master_key,
    parse_master_key,
)

KEY = secrets.token_bytes(32)
AAD = b"ten_01HZX"
SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()


def test_round_trip() -> None:
    box = SecretBox(KEY)
    blob = box.encrypt(SECRET, aad=AAD)
    assert box.decrypt(blob, aad=AAD) == SECRET
    assert SECRET.encode() not in blob
    assert blob[0] == 1 and len(blob) == 1 + NONCE_BYTES + len(SECRET) + 16


def test_nonce_differs_each_time() -> None:
    box = SecretBox(KEY)
    blobs = [box.encrypt(SECRET, aad=AAD) for _ in range(50)]
    assert len({b[1 : 1 + NONCE_BYTES] for b in blobs}) == 50


def test_different_aad_fails() -> None:
    blob = SecretBox(KEY).encrypt(SECRET, aad=b"ten_1")
    with pytest.raises(ConfigurationError, match="cannot decrypt signing secret"):
        SecretBox(KEY).decrypt(blob, aad=b"ten_2")


def test_wrong_key_fails() -> None:
    blob = SecretBox(KEY).encrypt(SECRET, aad=AAD)
    with pytest.raises(ConfigurationError, match="wrong master key or corrupted data"):
        SecretBox(secrets.token_bytes(32)).decrypt(blob, aad=AAD)


@pytest.mark.parametrize("where", [1, 1 + NONCE_BYTES, -1])
def test_tampered_blob_fails(where: int) -> None:
    blob = bytearray(SecretBox(KEY).encrypt(SECRET, aad=AAD))
    blob[where] ^= 0x01
    with pytest.raises(ConfigurationError, match="cannot decrypt"):
        SecretBox(KEY).decrypt(bytes(blob), aad=AAD)


@pytest.mark.parametrize("blob", [b"", b"\x01", b"\x01" + b"\x00" * 20])
def test_truncated_blob_fails(blob: bytes) -> None:
    with pytest.raises(ConfigurationError, match="cannot decrypt"):
        SecretBox(KEY).decrypt(blob, aad=AAD)


def test_unknown_version_fails() -> None:
    blob = SecretBox(KEY).encrypt(SECRET, aad=AAD)
    with pytest.raises(ConfigurationError, match="cannot decrypt"):
        SecretBox(KEY).decrypt(b"\x02" + blob[1:], aad=AAD)


@pytest.mark.parametrize("key", [b"", b"k" * 16, b"k" * 31, b"k" * 33])
def test_master_key_must_be_32_bytes(key: bytes) -> None:
    with pytest.raises(ConfigurationError, match="32 bytes"):
        SecretBox(key)


def test_repr_hides_key() -> None:
    text = repr(SecretBox(KEY))
    for form in (KEY.hex(), repr(KEY), base64.b64encode(KEY).decode()):
        assert form not in text


@pytest.mark.parametrize("encode", [base64.urlsafe_b64encode, base64.b64encode])
@pytest.mark.parametrize("strip_padding", [False, True])
def test_parse_master_key_good(encode: Callable[[bytes], bytes], strip_padding: bool) -> None:
    # Bytes with 0xfb/0xff give '+' and '/' (or '-' and '_') in the encoding.
    key = b"\xfb\xff" * 16
    text = encode(key).decode()
    if strip_padding:
        text = text.rstrip("=")
    assert parse_master_key(text) == key
    assert parse_master_key(f"  {text}\n") == key


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "short",
        base64.b64encode(b"x" * 16).decode(),
        base64.b64encode(b"x" * 33).decode(),
        "!" * 44,
        base64.b64encode(b"x" * 32).decode()[:-2] + "*=",
    ],
)
def test_parse_master_key_bad(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="32 bytes") as info:
        parse_master_key(bad)
    assert "secrets.token_bytes(32)" in str(info.value)


def test_load_or_create_creates_0600_and_is_stable(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    key = load_or_create_master_key(None, data_dir)
    path = data_dir / "master.key"
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert parse_master_key(path.read_text()) == key
    assert load_or_create_master_key(None, data_dir) == key
    assert [p.name for p in data_dir.iterdir()] == ["master.key"]


def test_existing_key_file_is_used(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text(base64.urlsafe_b64encode(KEY).decode() + "\n")
    assert load_or_create_master_key(None, tmp_path) == KEY


def test_corrupt_key_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("garbage\n")
    with pytest.raises(ConfigurationError, match="master.key"):
        load_or_create_master_key(None, tmp_path)


def test_env_value_wins(tmp_path: Path) -> None:
    load_or_create_master_key(None, tmp_path)
    env = base64.b64encode(KEY).decode()
    assert load_or_create_master_key(env, tmp_path) == KEY
    assert load_or_create_master_key(env, tmp_path / "never-created") == KEY
    assert not (tmp_path / "never-created").exists()


def test_concurrent_creators_agree(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: load_or_create_master_key(None, tmp_path), range(32)))
    assert len(keys) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["master.key"]
