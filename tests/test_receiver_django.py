"""The Django adapter, inside Django's test clients (sync and async views, CSRF on)."""

from __future__ import annotations

import django
import pytest
from django.conf import settings
from django.http import HttpResponse
from django.urls import path

from hookrelay.outbox.keys.signing import generate_secret
from hookrelay.receiver import WebhookEvent
from hookrelay.receiver.django import webhook
from tests.test_receiver import BODY, signed

SECRET = generate_secret()
got: list[str] = []


@webhook(secrets=[SECRET])
def receive(request, event: WebhookEvent):
    got.append(event.id)


@webhook(secrets=[SECRET])
async def receive_async(request, event: WebhookEvent, name: str):
    return HttpResponse(f"{name}:{event.type}", status=202)


urlpatterns = [
    path("webhooks", receive),
    path("async/<str:name>", receive_async),
]


@pytest.fixture(scope="module")
def django_client():
    if not settings.configured:
        settings.configure(
            ROOT_URLCONF=__name__,
            SECRET_KEY="test-only",
            ALLOWED_HOSTS=["testserver"],
            # CSRF checks are on, as in a real project: the decorator exempts the view.
            MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"],
            USE_TZ=True,
        )
        django.setup()
    from django.test import AsyncClient, Client

    return Client(enforce_csrf_checks=True), AsyncClient(enforce_csrf_checks=True)


def headers(h: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in h.items() if k.lower() != "content-type"}


def test_verified_webhooks_reach_the_view(django_client) -> None:
    client, _ = django_client
    r = client.post(
        "/webhooks", BODY, content_type="application/json", headers=headers(signed([SECRET]))
    )
    assert r.status_code == 204 and got == ["evt_1"]
    r = client.post("/webhooks", BODY, content_type="application/json")
    assert r.status_code == 400 and r.json()["error"]["message"] == "missing webhook-id header"
    assert client.get("/webhooks").status_code == 405
    assert got == ["evt_1"]


@pytest.mark.anyio
async def test_async_views_too(django_client) -> None:
    _, client = django_client
    good = headers(signed([SECRET]))
    r = await client.post("/async/x", BODY, content_type="application/json", headers=good)
    assert r.status_code == 202 and r.content == b"x:task.succeeded"
    bad = headers(signed([generate_secret()]))
    r = await client.post("/async/x", BODY, content_type="application/json", headers=bad)
    assert r.status_code == 400
