-- 0008: asymmetric signatures (Standard Webhooks v1a, Ed25519). A tenant signs
-- with HMAC secrets (v1), Ed25519 keys (v1a) or both; signing_secrets holds
-- both kinds, each row encrypted the same way, and a v1a row also keeps its
-- public key (public, so in the clear) for GET /v1/signing-keys.
ALTER TABLE tenants ADD COLUMN signature_scheme text NOT NULL DEFAULT 'v1'
    CHECK (signature_scheme IN ('v1', 'v1a', 'both'));
ALTER TABLE signing_secrets ADD COLUMN scheme text NOT NULL DEFAULT 'v1'
    CHECK (scheme IN ('v1', 'v1a'));
ALTER TABLE signing_secrets ADD COLUMN public_key text;
