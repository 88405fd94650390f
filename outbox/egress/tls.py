"""The TLS context of deliveries: extra CAs for receivers, a client certificate for mTLS.

``HOOKRELAY_CA_BUNDLE`` adds CAs trusted for receivers' certificates to the system's;
``HOOKRELAY_CLIENT_CERT`` (and ``HOOKRELAY_CLIENT_KEY``, unless the key is in the
certificate's file) is presented to every receiver that asks for a client certificate.
Read once, at start: a file that cannot be read or a key that does not match its
certificate is a :class:`ConfigurationError` naming the variable, and the process
refuses to start. With none of them set there is no context of ours: aiohttp's default
(the system's CAs) is used, as before.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509

from hookrelay.outbox.errors import ConfigurationError

__all__ = ["tls_context"]


def _reason(exc: OSError) -> str:
    reason = exc.reason if isinstance(exc, ssl.SSLError) else exc.strerror
    return str(reason or exc)


def _read(var: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{var}={str(path)!r}: cannot read it ({_reason(exc)})") from None


def tls_context(
    ca_bundle: Path | None = None,
    client_cert: Path | None = None,
    client_key: Path | None = None,
) -> ssl.SSLContext | None:
    """The context deliveries use, or None when nothing is configured."""
    if ca_bundle is None and client_cert is None and client_key is None:
        return None
    if client_key is not None and client_cert is None:
        raise ConfigurationError(
            "HOOKRELAY_CLIENT_KEY is set without HOOKRELAY_CLIENT_CERT: set both"
        )
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # the system's CAs
    if ca_bundle is not None:
        _read("HOOKRELAY_CA_BUNDLE", ca_bundle)
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"HOOKRELAY_CA_BUNDLE={str(ca_bundle)!r}: not a PEM file of CA certificates "
                f"({_reason(exc)})"
            ) from None
    if client_cert is not None:
        try:
            x509.load_pem_x509_certificates(_read("HOOKRELAY_CLIENT_CERT", client_cert))
        except ValueError as exc:
            raise ConfigurationError(
                f"HOOKRELAY_CLIENT_CERT={str(client_cert)!r}: not a PEM certificate ({exc})"
            ) from None
        if client_key is not None:
            _read("HOOKRELAY_CLIENT_KEY", client_key)
        try:
            # An empty password: an encrypted key fails here instead of prompting.
            context.load_cert_chain(client_cert, client_key, password=b"")
        except ssl.SSLError as exc:
            var = "HOOKRELAY_CLIENT_KEY" if client_key is not None else "HOOKRELAY_CLIENT_CERT"
            raise ConfigurationError(
                f"{var}: the client certificate and key cannot be used together "
                f"({_reason(exc)}); expected an unencrypted PEM key matching the certificate "
                "in HOOKRELAY_CLIENT_CERT"
            ) from None
    return context
