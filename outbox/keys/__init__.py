"""Secrets and signatures: signing secrets kept encrypted under the master key, and the
signatures every webhook carries.

- :mod:`.at_rest`       AES-GCM under the master key, the key file and its format
- :mod:`.master_key`    the key check the database records, and re-encryption on rotation
- :mod:`.signing_keys`  a tenant's keys: issue, rotate (with an overlap), read
- :mod:`.keyring`       the dispatcher's decrypted keys, cached per (tenant, version)
- :mod:`.signing`       Standard Webhooks ``v1`` (HMAC-SHA256) signing
- :mod:`.ed25519`       ``v1a`` (Ed25519) signing keys and signatures
- :mod:`.callback_headers` a task's callback headers: their rules, sealed under the master key

Verifying a webhook is the receiver's side: :mod:`hookrelay.receiver`.

May import (pyproject.toml's layers) the store, destinations and the shared errors, ids,
metrics and models; never ops or egress, its neighbours. It uses the store (the rows
keys live in), errors and models.

Its surface, ``__all__``, is what the service imports (never its modules).
"""

from hookrelay.outbox.keys.at_rest import (
    HOW_TO_GENERATE,
    KEY_FILE,
    SecretBox,
    key_id,
    load_or_create_master_key,
    parse_master_key,
)
from hookrelay.outbox.keys.callback_headers import MAX_BYTES as MAX_CALLBACK_HEADER_BYTES
from hookrelay.outbox.keys.callback_headers import RESERVED as RESERVED_HEADERS
from hookrelay.outbox.keys.callback_headers import RESERVED_PREFIXES as RESERVED_HEADER_PREFIXES
from hookrelay.outbox.keys.callback_headers import problem as callback_headers_problem
from hookrelay.outbox.keys.master_key import MasterKeyMismatch, rotate_master_key, verify_or_record
from hookrelay.outbox.keys.signing_keys import SigningKeyRow, list_signing_keys, rotate_secret

__all__ = [
    "MAX_CALLBACK_HEADER_BYTES",
    "RESERVED_HEADERS",
    "RESERVED_HEADER_PREFIXES",
    "callback_headers_problem",
    "HOW_TO_GENERATE",
    "KEY_FILE",
    "MasterKeyMismatch",
    "SecretBox",
    "SigningKeyRow",
    "key_id",
    "list_signing_keys",
    "load_or_create_master_key",
    "parse_master_key",
    "rotate_master_key",
    "rotate_secret",
    "verify_or_record",
]
