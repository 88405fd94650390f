"""The Flask adapter, inside Flask's test client."""

from __future__ import annotations

from flask import Flask

from hookrelay.outbox.keys import ed25519
from hookrelay.receiver import WebhookEvent
from hookrelay.receiver.flask import webhook
from tests.test_receiver import BODY, signed

PAIR = ed25519.generate_keypair()


def test_verified_webhooks_reach_the_view_and_others_get_400() -> None:
    app, got = Flask(__name__), []

    @app.post("/webhooks/<source>")
    @webhook(public_keys=[PAIR.public_key])
    def receive(event: WebhookEvent, source: str):
        got.append((source, event.id))

    @app.post("/echo")
    @webhook(public_keys=PAIR.public_key)
    def echo(event: WebhookEvent):
        return {"type": event.type}, 200

    client = app.test_client()
    r = client.post("/webhooks/partner", data=BODY, headers=signed(keys=[PAIR.private_key]))
    assert r.status_code == 204 and got == [("partner", "evt_1")]
    r = client.post("/echo", data=BODY, headers=signed(keys=[PAIR.private_key]))
    assert r.status_code == 200 and r.get_json() == {"type": "task.succeeded"}
    stale = signed(keys=[PAIR.private_key], ts=1)
    r = client.post("/webhooks/partner", data=BODY, headers=stale)
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "invalid_webhook"
    assert "webhook-timestamp" in r.get_json()["error"]["message"] and len(got) == 1
