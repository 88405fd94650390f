"""The /v1/ws message parser: every message a client may send, and each way one is wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hookrelay.service.api.errors import ApiError
from hookrelay.service.live import ws_messages as msg


@pytest.mark.parametrize(
    ("sent", "parsed"),
    [
        ({"type": "auth", "token": "hr_x"}, msg.Auth("hr_x")),
        ({"type": "subscribe", "all": True}, msg.Subscribe((), True)),
        ({"type": "subscribe", "taskIds": ["a", "b", "a"]}, msg.Subscribe(("a", "b"), False)),
        ({"type": "subscribe", "taskIds": ["a"], "all": False}, msg.Subscribe(("a",), False)),
        ({"type": "unsubscribe", "taskIds": ["a"]}, msg.Unsubscribe(("a",))),
        ({"type": "resume", "after": 0}, msg.Resume(0)),
        ({"type": "resume", "after": 2**62}, msg.Resume(2**62)),
        ({"type": "ping"}, msg.Ping()),
        ({"type": "pong"}, None),
    ],
)
def test_valid_messages(sent: dict[str, Any], parsed: msg.Message | None) -> None:
    assert msg.parse(json.dumps(sent)) == parsed


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{", "invalid_json"),
        ('{"type": "resume", "after": NaN}', "invalid_json"),
        ('{"type": "resume", "after": 1e400}', "invalid_json"),
        ("[" * 5000 + "]" * 5000, "invalid_json"),
        (json.dumps([1]), "invalid_message"),
        (json.dumps({"kind": "auth"}), "invalid_message"),
        (json.dumps({"type": "dance"}), "invalid_message"),
        (json.dumps({"type": "ping", "extra": 1}), "invalid_message"),
        (json.dumps({"type": "auth", "token": ""}), "invalid_message"),
        (json.dumps({"type": "auth", "token": 5}), "invalid_message"),
        (json.dumps({"type": "subscribe"}), "invalid_message"),
        (json.dumps({"type": "subscribe", "all": True, "taskIds": ["a"]}), "invalid_message"),
        (json.dumps({"type": "subscribe", "all": "yes"}), "invalid_message"),
        (json.dumps({"type": "subscribe", "taskIds": []}), "invalid_message"),
        (json.dumps({"type": "subscribe", "taskIds": "a"}), "invalid_message"),
        (json.dumps({"type": "subscribe", "taskIds": [5]}), "invalid_message"),
        (json.dumps({"type": "subscribe", "taskIds": ["x" * 65]}), "invalid_message"),
        (json.dumps({"type": "unsubscribe", "all": True}), "invalid_message"),
        (json.dumps({"type": "resume", "after": -1}), "invalid_message"),
        (json.dumps({"type": "resume", "after": True}), "invalid_message"),
        (json.dumps({"type": "resume", "after": "5"}), "invalid_message"),
        (json.dumps({"type": "resume", "after": 2**63}), "invalid_message"),
        (json.dumps({"type": "auth", "token": "a\u0000b"}), "unsupported_value"),
    ],
)
def test_invalid_messages_name_what_is_wrong(text: str, code: str) -> None:
    with pytest.raises(ApiError) as info:
        msg.parse(text)
    assert info.value.code == code and info.value.message


def test_server_messages_are_compact_json() -> None:
    assert msg.encode("ping") == '{"type":"ping"}'
    error = json.loads(msg.error("unknown_tasks", "no such task(s): a", taskIds=["a"]))
    assert error == {
        "type": "error",
        "code": "unknown_tasks",
        "message": "no such task(s): a",
        "taskIds": ["a"],
    }
