"""The Starlette and FastAPI adapter, in process through httpx's ASGI transport.

That is how the rest of the suite calls the app (tests/conftest.py): Starlette's own
TestClient now wants the httpx2 package, and warns (an error here) with httpx.
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from hookrelay.outbox.keys.signing import generate_secret
from hookrelay.receiver import WebhookEvent
from hookrelay.receiver.starlette import VerifiedWebhook, webhook_endpoint
from tests.test_receiver import BODY, signed

SECRET = generate_secret()
pytestmark = pytest.mark.anyio


def calling(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rx.test")


async def test_the_endpoint_wrapper_answers_400_or_passes_the_event() -> None:
    got: list[WebhookEvent] = []

    async def handle(event: WebhookEvent) -> None:
        got.append(event)

    def answer(event: WebhookEvent) -> JSONResponse:
        return JSONResponse({"seen": event.id}, status_code=200)

    app = Starlette(
        routes=[
            Route("/a", webhook_endpoint(handle, secrets=[SECRET]), methods=["POST"]),
            Route("/b", webhook_endpoint(answer, secrets=SECRET), methods=["POST"]),
        ]
    )
    async with calling(app) as client:
        r = await client.post("/a", content=BODY, headers=signed([SECRET]))
        assert r.status_code == 204 and [e.id for e in got] == ["evt_1"]
        r = await client.post("/b", content=BODY, headers=signed([SECRET]))
        assert r.status_code == 200 and r.json() == {"seen": "evt_1"}
        r = await client.post("/a", content=BODY + " ", headers=signed([SECRET]))
        assert r.status_code == 400
        assert r.json() == {"error": {"code": "invalid_webhook", "message": "no signature matches"}}
        r = await client.post("/a", content=BODY)
        assert r.status_code == 400 and "missing webhook-id" in r.json()["error"]["message"]
    assert len(got) == 1


async def test_the_dependency_in_fastapi() -> None:
    app, got = FastAPI(), []
    verified = VerifiedWebhook(secrets=[SECRET])

    @app.post("/webhooks", status_code=204)
    async def receive(event: WebhookEvent = Depends(verified)) -> None:  # noqa: B008
        got.append(event.task)

    async with calling(app) as client:
        r = await client.post("/webhooks", content=BODY, headers=signed([SECRET]))
        assert r.status_code == 204
        r = await client.post("/webhooks", content=BODY, headers=signed([generate_secret()]))
        assert r.status_code == 400 and r.json() == {"detail": "no signature matches"}
    assert [t.status for t in got if t] == ["succeeded"]
