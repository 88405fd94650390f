"""The client's error tree from the server's answers, the field a refusal names, and
what a message may show."""

from __future__ import annotations

import httpx
import pytest

from hookrelay.client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
    WaitTimeout,
    from_response,
)
from tests.clientfakes import task_json


def answer(status: int, message: str = "m", code: str = "c", **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message}}
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, InvalidRequest),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, InvalidRequest),
        (415, InvalidRequest),
        (422, InvalidRequest),
        (429, RateLimited),
        (500, ServerError),
        (503, ServerError),
        (418, ApiError),
    ],
)
def test_each_status_has_its_class(status, cls) -> None:
    err = from_response(answer(status, code="x_y", **{"Retry-After": "7"}))
    assert type(err) is cls and (err.status, err.code, err.retry_after) == (status, "x_y", 7.0)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("callbackUrl refused: 127.0.0.1 is a loopback address", "callbackUrl"),
        ("type is required: 1-100 chars", "type"),
        ("limit must be an integer in [1, 1000]", "limit"),
        ("Idempotency-Key must be 1-255 printable ASCII characters", "Idempotency-Key"),
        ("body.input.name contains a NUL character", "input.name"),
        ("unknown field(s): colour, size", "colour"),
        ("the request body must be a JSON object", None),
        ("a JSON request body is required", None),
        ("malformed JSON: Expecting value", None),
        ("", None),
    ],
)
def test_the_field_a_refusal_names(message, field) -> None:
    err = from_response(answer(422, message))
    assert isinstance(err, InvalidRequest) and err.field == field


def test_a_conflict_carries_the_task_as_it_is() -> None:
    body = {"error": {"code": "invalid_transition", "message": "m"}, "task": task_json("failed", 3)}
    err = from_response(httpx.Response(409, json=body))
    assert isinstance(err, Conflict) and err.task is not None and err.task.version == 3
    assert from_response(answer(409)).task is None  # type: ignore[attr-defined]


def test_an_answer_not_in_the_servers_shape() -> None:
    err = from_response(httpx.Response(502, text="<html>Bad Gateway</html>"))
    assert type(err) is ServerError and err.code == "http_error" and "Bad Gateway" in str(err)
    assert from_response(httpx.Response(503, headers={"Retry-After": "soon"})).retry_after is None


def test_wait_timeout_says_what_it_last_saw() -> None:
    from hookrelay.models import Task

    task = Task.from_json(task_json("running", 2))
    assert "running" in str(WaitTimeout(task, 5)) and WaitTimeout(task, 5).task is task
