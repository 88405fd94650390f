"""Deliveries' TLS (outbox/egress/tls.py): extra CAs, a client certificate for mutual TLS.

Real TLS receivers on loopback, with certificates the test makes (tests/certs.py).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from hookrelay.outbox.dispatch.dispatcher import running
from hookrelay.outbox.egress.tls import tls_context
from hookrelay.outbox.errors import ConfigurationError
from hookrelay.service.server.prerequisites import Runtime
from tests.certs import Issued, issue, server_context
from tests.fakedns import FakeDns
from tests.receiver import Receiver
from tests.support import backlog, cli_env, dispatcher, run_cli, wait_drained

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_ca() -> Issued:
    """The receivers' private CA: what HOOKRELAY_CA_BUNDLE adds."""
    return issue("receivers' private CA", ca=True)


@pytest.fixture
def client_ca() -> Issued:
    """The CA the receiver trusts for client certificates."""
    return issue("partners' client CA", ca=True)


@pytest.fixture
def files(tmp_path: Path, server_ca: Issued, client_ca: Issued) -> dict[str, Path]:
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(server_ca.cert_pem)
    cert, key = issue("hookrelay", by=client_ca, client=True).write(tmp_path, "client")
    return {"ca_bundle": bundle, "client_cert": cert, "client_key": key}


@pytest.fixture
async def dns() -> AsyncIterator[FakeDns]:
    server = await FakeDns(records={"hooks.test": (["127.0.0.1"], 60)}).start()
    yield server
    server.stop()


async def peer_cert(request: web.Request, rx: Receiver) -> web.StreamResponse:
    assert request.transport is not None
    rx.state.setdefault("peers", []).append(request.transport.get_extra_info("peercert"))
    return web.Response(status=204)


@pytest.fixture
async def mtls_receiver(
    tmp_path: Path, server_ca: Issued, client_ca: Issued
) -> AsyncIterator[Receiver]:
    """https://hooks.test, its certificate signed by the private CA; it requires a client
    certificate signed by the client CA."""
    server = issue("hooks.test", by=server_ca, hosts=("hooks.test",))
    context = server_context(tmp_path, server, client_ca=client_ca)
    rx = await Receiver(peer_cert, tls=context).start()
    yield rx
    await rx.stop()


def with_settings(runtime: Runtime, dns: FakeDns, **changes: Any) -> Runtime:
    return replace(runtime, settings=replace(runtime.settings, dns_servers=dns.server, **changes))


async def logged(pool: Any) -> list[tuple[int, str, str | None]]:
    rows = await pool.fetch("SELECT number, outcome, error FROM delivery_attempts ORDER BY id")
    return [(r["number"], r["outcome"], r["error"]) for r in rows]


# -- mutual TLS, end to end --------------------------------------------------------------


async def test_the_client_certificate_is_accepted(pool, runtime, dns, files, mtls_receiver) -> None:
    rt = with_settings(runtime, dns, **files)
    _, events = await backlog(pool, rt, mtls_receiver.url_for("hooks.test"), 2)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert sorted(mtls_receiver.event_ids()) == sorted(events)
    [subject] = {p["subject"] for p in mtls_receiver.state["peers"]}
    assert subject == ((("commonName", "hookrelay"),),)
    assert [a[1] for a in await logged(pool)] == ["delivered", "delivered"]


async def test_without_a_client_certificate_the_receiver_refuses(
    pool, runtime, dns, files, mtls_receiver
) -> None:
    rt = with_settings(runtime, dns, ca_bundle=files["ca_bundle"], max_attempts=2)
    await backlog(pool, rt, mtls_receiver.url_for("hooks.test"), 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    assert mtls_receiver.received == []
    attempts = await logged(pool)
    assert [a[:2] for a in attempts] == [(1, "retry"), (2, "dead")]
    assert all(a[2] for a in attempts)  # the TLS failure, in the attempt log


async def test_a_self_signed_receiver_is_refused_retried_and_logged(
    pool, runtime, dns, files, tmp_path
) -> None:
    alone = issue("hooks.test", hosts=("hooks.test",))  # signed by no CA anyone trusts
    rx = await Receiver(tls=server_context(tmp_path, alone)).start()
    try:
        rt = with_settings(runtime, dns, **files, max_attempts=3)
        await backlog(pool, rt, rx.url_for("hooks.test"), 1)
        async with running(dispatcher(rt, pool)):
            await wait_drained(pool)
        assert rx.received == []
        attempts = await logged(pool)
        assert [a[:2] for a in attempts] == [(1, "retry"), (2, "retry"), (3, "dead")]
        assert all("certificate verify failed" in (a[2] or "") for a in attempts)
        assert all("self-signed certificate" in (a[2] or "") for a in attempts)
    finally:
        await rx.stop()


async def test_the_private_ca_is_trusted_only_when_configured(
    pool, runtime, dns, files, mtls_receiver
) -> None:
    rt = with_settings(
        runtime,
        dns,
        client_cert=files["client_cert"],
        client_key=files["client_key"],
        max_attempts=1,
    )
    await backlog(pool, rt, mtls_receiver.url_for("hooks.test"), 1)
    async with running(dispatcher(rt, pool)):
        await wait_drained(pool)
    [(_, outcome, error)] = await logged(pool)
    assert outcome == "dead" and "unable to get local issuer certificate" in (error or "")


# -- checked at start --------------------------------------------------------------------


def test_nothing_configured_is_no_context() -> None:
    assert tls_context() is None


def test_the_bundle_adds_to_the_system_cas(files) -> None:
    context = tls_context(files["ca_bundle"])
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    system = ssl.create_default_context().cert_store_stats()["x509_ca"]
    assert context.cert_store_stats()["x509_ca"] == system + 1


def test_the_key_may_share_the_certificates_file(files, tmp_path) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(files["client_cert"].read_bytes() + files["client_key"].read_bytes())
    assert tls_context(client_cert=both) is not None


def _encrypted(key_file: Path, tmp_path: Path) -> Path:
    key = serialization.load_pem_private_key(key_file.read_bytes(), None)
    out = tmp_path / "encrypted.key"
    out.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return out


@pytest.mark.parametrize(
    ("case", "var", "words"),
    [
        ("missing bundle", "HOOKRELAY_CA_BUNDLE", "cannot read it"),
        ("junk bundle", "HOOKRELAY_CA_BUNDLE", "not a PEM file of CA certificates"),
        ("missing cert", "HOOKRELAY_CLIENT_CERT", "cannot read it"),
        ("junk cert", "HOOKRELAY_CLIENT_CERT", "not a PEM certificate"),
        ("missing key", "HOOKRELAY_CLIENT_KEY", "cannot read it"),
        ("mismatched key", "HOOKRELAY_CLIENT_KEY", "cannot be used together"),
        ("encrypted key", "HOOKRELAY_CLIENT_KEY", "cannot be used together"),
        ("cert without key", "HOOKRELAY_CLIENT_CERT", "cannot be used together"),
        ("key without cert", "HOOKRELAY_CLIENT_KEY", "without HOOKRELAY_CLIENT_CERT"),
    ],
)
def test_a_file_that_cannot_be_used_names_its_variable(
    case: str, var: str, words: str, files: dict[str, Path], tmp_path: Path
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    missing = tmp_path / "missing.pem"
    other_key = issue("other").write(tmp_path, "other")[1]
    cert, key = files["client_cert"], files["client_key"]
    args: dict[str, Path | None] = {
        "missing bundle": {"ca_bundle": missing},
        "junk bundle": {"ca_bundle": junk},
        "missing cert": {"client_cert": missing, "client_key": key},
        "junk cert": {"client_cert": junk, "client_key": key},
        "missing key": {"client_cert": cert, "client_key": missing},
        "mismatched key": {"client_cert": cert, "client_key": other_key},
        "encrypted key": {"client_cert": cert, "client_key": _encrypted(key, tmp_path)},
        "cert without key": {"client_cert": cert},
        "key without cert": {"client_key": key},
    }[case]  # type: ignore[assignment]
    with pytest.raises(ConfigurationError) as caught:
        tls_context(**args)
    assert str(caught.value).startswith(var) and words in str(caught.value)


async def test_dispatch_refuses_to_start_naming_the_variable(runtime, dsn, files, tmp_path) -> None:
    other_key = issue("other").write(tmp_path, "other")[1]
    env = {
        **cli_env(runtime, dsn),
        "HOOKRELAY_CLIENT_CERT": str(files["client_cert"]),
        "HOOKRELAY_CLIENT_KEY": str(other_key),
        "HOOKRELAY_METRICS_PORT": "off",
    }
    code, _, err = await run_cli("dispatch", env=env)
    assert code != 0
    assert "HOOKRELAY_CLIENT_KEY" in err and "cannot be used together" in err
