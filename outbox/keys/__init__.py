"""Secrets and signatures: signing secrets kept encrypted under the master key, and the
signatures every webhook carries.

- :mod:`.at_rest`       AES-GCM under the master key, the key file and its format
- :mod:`.master_key`    the key check the database records, and re-encryption on rotation
- :mod:`.signing_keys`  a tenant's keys: issue, rotate (with an overlap), read
- :mod:`.keyring`       the dispatcher's decrypted keys, cached per (tenant, version)
- :mod:`.signing`       Standard Webhooks ``v1`` (HMAC-SHA256) signing
- :mod:`.ed25519`       ``v1a`` (Ed25519) signing keys and signatures

Verifying a webhook is the receiver's side: :mod:`hookrelay.receiver`.

May import: the store (the rows keys live in), errors and models.
"""
