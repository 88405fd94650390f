"""Submit's shapes: msgspec Structs against pydantic v2 models, per request, one process.

What ``POST /v1/tasks`` does with shapes: decode and validate the body (type pattern,
bounds, unknown fields refused, camelCase names) and encode the task it answers with
(the resource and its delivery summary, times as ISO-8601). Each library does both
from the same declarations, written out below for the two of them alike; the
baseline is plain ``json.loads`` of the same bytes and ``json.dumps`` of the same
answer as a dict, with no validation at all, measured in the same run. Prints µs per
request and each one's ratio to the baseline.

    python -m bench shapes [--seconds 2] [--input-bytes 200]

pydantic comes with the test extra (FastAPI depends on it); hookrelay does not use it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec

from bench.common import record

TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$"
MAX_TIMEOUT_S = 30 * 86400
NOW = datetime(2026, 12, 2, 13, 0, 0, 123456, tzinfo=UTC)
Status = Literal["queued", "running", "succeeded", "failed", "cancelled", "timed_out"]
DeliveryStatus = Literal["none", "pending", "delivered", "dead"]


def body(input_bytes: int) -> bytes:
    return json.dumps(
        {
            "type": "render.pdf/v2",
            "callbackUrl": "https://hooks.example.com/hookrelay",
            "input": {"document": "d-1", "pages": [1, 2, 3], "note": "x" * input_bytes},
            "metadata": {"order": "o-1", "customer": "c-77"},
            "timeoutSeconds": 3600,
        }
    ).encode()


def row(new: dict[str, Any]) -> dict[str, Any]:
    """The columns the answer is built from, as the store returns them."""
    return {
        "id": "task_01JE5Q4W9Z6X8C2V7B3N1M0K5H",
        "type": new["type"],
        "status": "queued",
        "input": new["input"],
        "callback_url": new["callbackUrl"],
        "metadata": new["metadata"],
        "created_at": NOW,
        "updated_at": NOW,
        "timeout_at": NOW,
        "version": 1,
    }


# -- msgspec ----------------------------------------------------------------------


class MSubmit(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    type: Annotated[str, msgspec.Meta(pattern=TYPE_PATTERN)]
    callback_url: Annotated[str, msgspec.Meta(max_length=2048)]
    input: Any = None
    metadata: dict[str, Any] | None = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_S)] | None = None


class MDelivery(msgspec.Struct, rename="camel"):
    event_id: str | None
    status: DeliveryStatus
    attempts: int
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class MTask(msgspec.Struct, rename="camel"):
    id: str
    type: str
    status: Status
    input: Any
    result: Any
    error: Any
    callback_url: str
    metadata: Any
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    timeout_at: datetime | None
    version: int
    delivery: MDelivery


def with_msgspec() -> Callable[[bytes], bytes]:
    decoder, encoder = msgspec.json.Decoder(MSubmit), msgspec.json.Encoder()

    def submit(raw: bytes) -> bytes:
        new = decoder.decode(raw)
        return encoder.encode(
            MTask(
                id="task_01JE5Q4W9Z6X8C2V7B3N1M0K5H",
                type=new.type,
                status="queued",
                input=new.input,
                result=None,
                error=None,
                callback_url=new.callback_url,
                metadata=new.metadata,
                created_at=NOW,
                updated_at=NOW,
                completed_at=None,
                timeout_at=NOW,
                version=1,
                delivery=MDelivery(None, "none", 0, None, None, None, None, None),
            )
        )

    return submit


# -- pydantic v2 --------------------------------------------------------------------


def with_pydantic() -> Callable[[bytes], bytes]:
    from pydantic import BaseModel, ConfigDict, Field
    from pydantic.alias_generators import to_camel

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", alias_generator=to_camel, strict=True)

    class PSubmit(Strict):
        type: Annotated[str, Field(pattern=TYPE_PATTERN)]
        callback_url: Annotated[str, Field(max_length=2048)]
        input: Any = None
        metadata: dict[str, Any] | None = None
        timeout_seconds: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] | None = None

    class Out(BaseModel):
        model_config = ConfigDict(alias_generator=to_camel)

    class PDelivery(Out):
        event_id: str | None
        status: DeliveryStatus
        attempts: int
        last_attempt_at: datetime | None
        last_status_code: int | None
        last_error: str | None
        next_attempt_at: datetime | None
        delivered_at: datetime | None

    class PTask(Out):
        id: str
        type: str
        status: Status
        input: Any
        result: Any
        error: Any
        callback_url: str
        metadata: Any
        created_at: datetime
        updated_at: datetime
        completed_at: datetime | None
        timeout_at: datetime | None
        version: int
        delivery: PDelivery

    def submit(raw: bytes) -> bytes:
        new = PSubmit.model_validate_json(raw)
        # model_construct: the answer is built from trusted columns, unvalidated, as
        # msgspec's Struct constructor does.
        delivery = PDelivery.model_construct(
            event_id=None,
            status="none",
            attempts=0,
            last_attempt_at=None,
            last_status_code=None,
            last_error=None,
            next_attempt_at=None,
            delivered_at=None,
        )
        task = PTask.model_construct(
            id="task_01JE5Q4W9Z6X8C2V7B3N1M0K5H",
            type=new.type,
            status="queued",
            input=new.input,
            result=None,
            error=None,
            callback_url=new.callback_url,
            metadata=new.metadata,
            created_at=NOW,
            updated_at=NOW,
            completed_at=None,
            timeout_at=NOW,
            version=1,
            delivery=delivery,
        )
        return task.model_dump_json(by_alias=True).encode()

    return submit


# -- baseline: the stdlib, nothing checked -----------------------------------------------


def with_json() -> Callable[[bytes], bytes]:
    def iso(ts: datetime) -> str:
        return ts.isoformat().replace("+00:00", "Z")

    def submit(raw: bytes) -> bytes:
        new = json.loads(raw)
        r = row(new)
        resource = {
            "id": r["id"],
            "type": r["type"],
            "status": r["status"],
            "input": r["input"],
            "result": None,
            "error": None,
            "callbackUrl": r["callback_url"],
            "metadata": r["metadata"],
            "createdAt": iso(r["created_at"]),
            "updatedAt": iso(r["updated_at"]),
            "completedAt": None,
            "timeoutAt": iso(r["timeout_at"]),
            "version": r["version"],
            "delivery": dict.fromkeys(
                [
                    "eventId",
                    "status",
                    "attempts",
                    "lastAttemptAt",
                    "lastStatusCode",
                    "lastError",
                    "nextAttemptAt",
                    "deliveredAt",
                ]  # fmt: skip
            ),
        }
        return json.dumps(resource, ensure_ascii=False, separators=(",", ":")).encode()

    return submit


def per_request_us(fn: Callable[[bytes], bytes], raw: bytes, seconds: float) -> float:
    """µs of CPU per call, the best of three rounds of ``seconds / 3`` each."""
    best = float("inf")
    for _ in range(3):
        n, start = 0, time.process_time()
        deadline = start + seconds / 3
        while time.process_time() < deadline:
            for _ in range(200):
                fn(raw)
            n += 200
        best = min(best, (time.process_time() - start) / n * 1e6)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--input-bytes", type=int, default=200)
    args = p.parse_args()
    raw = body(args.input_bytes)
    candidates = {
        "json.loads + json.dumps (no checks)": with_json(),
        "msgspec Structs": with_msgspec(),
        "pydantic v2 models": with_pydantic(),
    }
    answers = {name: json.loads(fn(raw)) for name, fn in candidates.items()}
    first = next(iter(answers.values()))
    assert all(a.keys() == first.keys() for a in answers.values()), "the answers differ in shape"
    us = {name: per_request_us(fn, raw, args.seconds) for name, fn in candidates.items()}
    base = us["json.loads + json.dumps (no checks)"]
    rows = [
        f"submit body of {len(raw)} bytes: decode + validate, then encode the task answer",
        "",
        "| shapes | µs per submit | × the baseline |",
        "|---|---|---|",
    ]
    for name, value in us.items():
        rows.append(f"| {name} | {value:.2f} | {value / base:.2f} |")
    table = "\n".join(rows)
    print(table)
    cmd = f"python -m bench shapes --seconds {args.seconds:g} --input-bytes {args.input_bytes}"
    record("shapes: msgspec against pydantic on submit", cmd, table)


if __name__ == "__main__":
    main()
