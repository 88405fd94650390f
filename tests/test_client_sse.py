"""The Server-Sent Events parser of hookrelay.client, line by line as the specification reads."""

from __future__ import annotations

from hookrelay.client.sse import Parser, ServerEvent


def parse(text: str) -> list[ServerEvent]:
    parser, out = Parser(), []
    for line in text.split("\n"):
        if (event := parser.feed(line)) is not None:
            out.append(event)
    return out


def test_events_ids_and_comments() -> None:
    text = 'id: 2\n\n: ping\n\nevent: task\nid: 3\ndata: {"a":1}\n\nevent: reset\ndata: {}\n\n'
    assert parse(text) == [
        ServerEvent("message", "", "2"),  # the position alone
        ServerEvent("task", '{"a":1}', "3"),
        ServerEvent("reset", "{}", None),
    ]


def test_multi_line_data_and_field_spacing() -> None:
    assert parse("data:a\ndata:  b\nretry: 10\nfoo: x\n\n") == [
        ServerEvent("message", "a\n b", None)
    ]


def test_an_unfinished_event_is_not_dispatched_and_nul_ids_are_ignored() -> None:
    assert parse("event: task\ndata: x") == []
    assert parse("id: a\0b\ndata: x\n\n") == [ServerEvent("message", "x", None)]
    assert parse("retry: 5\n\n") == []
