"""Signing secrets at rest: AES-GCM round trips, and every way decryption must fail."""

from __future__ import annotations

import base64
import secrets
import stat

import pytest

from outbox.crypto import SecretBox, load_or_create_master_key, parse_master_key
from outbox.errors import ConfigurationError

KEY = secrets.token_bytes(32)


def test_round_trip_and_fresh_nonce() -> None:
    box = SecretBox(KEY)
    a, b = box.encrypt("whsec_x", aad=b"ten_1"), box.encrypt("whsec_x", aad=b"ten_1")
    assert a != b and b"whsec_x" not in a
    assert box.decrypt(a, aad=b"ten_1") == "whsec_x"


def test_other_row_aad_fails() -> None:
    blob = SecretBox(KEY).encrypt("whsec_x", aad=b"ten_1")
    with pytest.raises(ConfigurationError):
        SecretBox(KEY).decrypt(blob, aad=b"ten_2")


def test_wrong_key_fails() -> None:
    blob = SecretBox(KEY).encrypt("whsec_x", aad=b"t")
    with pytest.raises(ConfigurationError, match="wrong master key"):
        SecretBox(secrets.token_bytes(32)).decrypt(blob, aad=b"t")


def test_tampered_blob_fails() -> None:
    blob = bytearray(SecretBox(KEY).encrypt("whsec_x", aad=b"t"))
    blob[-1] ^= 1
    with pytest.raises(ConfigurationError):
        SecretBox(KEY).decrypt(bytes(blob), aad=b"t")


def test_repr_hides_key() -> None:
    assert KEY.hex() not in repr(SecretBox(KEY)) and "***" in repr(SecretBox(KEY))


@pytest.mark.parametrize("encode", [base64.urlsafe_b64encode, base64.b64encode])
def test_parse_master_key(encode) -> None:  # type: ignore[no-untyped-def]
    text = encode(KEY).decode()
    assert parse_master_key(text) == KEY and parse_master_key(text.rstrip("=")) == KEY


@pytest.mark.parametrize("bad", ["", "short", base64.b64encode(b"x" * 16).decode(), "!!!!"])
def test_bad_master_key(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="32 bytes"):
        parse_master_key(bad)


def test_load_or_create(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = load_or_create_master_key(None, tmp_path / "data")
    path = tmp_path / "data" / "master.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_master_key(None, tmp_path / "data") == key
    env = base64.b64encode(KEY).decode()
    assert load_or_create_master_key(env, tmp_path / "data") == KEY
