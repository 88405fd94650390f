"""Every request body, query string and answer of the HTTP API, declared once.

Each shape is a msgspec Struct. The same declaration decodes and validates a request
(`bodies.read_body`, `bodies.read_query`: a refusal names the field's path), encodes
an answer (`bodies.answer`), and is the schema `/openapi.json` publishes
(`openapi.spec`). The task resource and its parts are declared beside the task in
`hookrelay.outbox.models`, since webhooks carry them too.

What a schema cannot say is said in the field's description and checked where it is
declared: the 16 KiB caps on `metadata` and `onTimeout` (`__post_init__`). The
request guard's rules hold for every body (no NUL, no lone surrogate, nesting at most
32 deep), and the callback URL's SSRF and DNS checks (`callback_url`) are not shapes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from hookrelay.outbox.keys import (
    MAX_CALLBACK_HEADER_BYTES,
    RESERVED_HEADER_PREFIXES,
    RESERVED_HEADERS,
    callback_headers_problem,
)
from hookrelay.outbox.models import (
    Attempt,
    AttemptResource,
    CircuitState,
    EventId,
    KeyScheme,
    OnTimeout,
    SignatureScheme,
    TaskResource,
    TaskStatus,
    TerminalStatus,
    TestEventStatus,
    Time,
)
from hookrelay.outbox.ops import NO_REASON
from hookrelay.outbox.ops import DeadLetter as StoredDeadLetter
from hookrelay.outbox.tenants import NewTenant

# -- field types ------------------------------------------------------------------------

# Matched in full: JSON Schema's "$" is the end of the string (ECMA-262); Python's also
# matches before a final newline, which SubmitBody.__post_init__ refuses.
TASK_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$"
TaskType = Annotated[
    str,
    Meta(
        pattern=TASK_TYPE_PATTERN,
        description="1-100 characters: letters, digits and ._:/- (not first)",
    ),
]
# The characters Python's str.strip() and JavaScript's \s both count as blank, written
# out so that the schema's regex and the server's strip agree (\s differs between them).
BLANK = r"\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
NOT_BLANK = f"[^{BLANK}]"
_EDGES = re.compile(f"^[{BLANK}]+|[{BLANK}]+$")


def strip_blank(text: str) -> str:
    """`text` without the blanks :data:`NOT_BLANK` looks past, at either end."""
    return _EDGES.sub("", text)


MAX_NAME = 200
TenantName = Annotated[
    str,
    Meta(min_length=1, max_length=MAX_NAME, pattern=NOT_BLANK, description="not only blanks"),
]
MAX_REASON = 500
Reason = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_REASON,
        pattern=NOT_BLANK,
        description="why: kept in the audit trail (not only blanks)",
    ),
]
MAX_CALLBACK_URL = 2048
CallbackUrl = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_CALLBACK_URL,
        description="https (http where the server allows it). Checked when submitted: its "
        "syntax and every address its host resolves to (private ranges are refused unless "
        "allowed): 422 invalid_callback_url or blocked_callback_url",
    ),
]
MAX_TIMEOUT_S = 30 * 86400
TimeoutSeconds = Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S)]
HeartbeatSeconds = Annotated[float, Meta(ge=1, le=MAX_TIMEOUT_S)]
MAX_JSON_BYTES = 16_384
_CAPPED = f"at most {MAX_JSON_BYTES} bytes as UTF-8 JSON (checked by the server: 422)"
Metadata = Annotated[
    dict[str, Any],
    Meta(description=f"yours, returned as given; {_CAPPED}", extra_json_schema={
        "x-max-json-bytes": MAX_JSON_BYTES
    }),
]  # fmt: skip
CappedOnTimeout = Annotated[
    OnTimeout,
    Meta(description=f"written onto the task if it times out; {_CAPPED}", extra_json_schema={
        "x-max-json-bytes": MAX_JSON_BYTES
    }),
]  # fmt: skip
# What the schema can say of callback headers (keys.callback_headers checks them all,
# naming the header, and what no schema says: names distinct ignoring case, the total).
CALLBACK_HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"


def _any_case(word: str) -> str:
    # ECMA-262 patterns in a schema have no inline (?i): each letter as a class.
    # Reserved names are letters and hyphens, which need no escape outside a class.
    return "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in word)


RESERVED_HEADER_PATTERN = (
    "^("
    + "|".join(_any_case(n) for n in sorted(RESERVED_HEADERS))
    + ")$|^("
    + "|".join(_any_case(p) for p in RESERVED_HEADER_PREFIXES)
    + ")"
)
MAX_ORDERING_KEY = 200
ORDERING_KEY_PATTERN = r"^[^\x00-\x1f\x7f]*$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
OrderingKey = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_ORDERING_KEY,
        description="webhooks of your tasks with the same key are delivered one at a time, "
        "in the order their events commit: the next is sent once the previous one is "
        "delivered or dead; 1 to 200 characters, no ASCII control characters",
        # Checked by SubmitBody, whose message says what is wrong in words.
        extra_json_schema={"pattern": ORDERING_KEY_PATTERN},
    ),
]
CallbackHeaders = Annotated[
    dict[str, str],
    Meta(
        max_length=10,
        description="headers every attempt of the task's webhook sends, e.g. a receiver's "
        "static x-api-key: at most 10, 4 KiB of names and values in all; names are tokens, "
        "values printable ASCII; reserved names (host, content-type, content-length, "
        "connection, transfer-encoding, te, upgrade, proxy-*, webhook-*, traceparent, "
        "tracestate) are refused (422 naming the header). Values are encrypted at rest and "
        "never returned; the signature does not cover them",
        extra_json_schema={
            "x-max-bytes": MAX_CALLBACK_HEADER_BYTES,
            "propertyNames": {
                "pattern": CALLBACK_HEADER_NAME_PATTERN,
                "not": {"pattern": RESERVED_HEADER_PATTERN},
            },
        },
    ),
]
Percent = Annotated[float, Meta(ge=0, le=100)]
MAX_MESSAGE = 1000
# ISO-8601 with a zone: what the server reads (request_guard.timestamp), RFC 3339's
# date-time with a few liberties (no seconds, a space, +hhmm).
TIMESTAMP_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]{1,6})?)?([Zz]|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])$"
)
Timestamp = Annotated[
    str,
    Meta(
        pattern=TIMESTAMP_PATTERN,
        extra_json_schema={"format": "date-time"},
        description="ISO-8601 with a time zone, e.g. 2026-12-02T13:00:00Z",
    ),
]
MAX_CURSOR = 512
Cursor = Annotated[
    str,
    Meta(max_length=MAX_CURSOR, description="a page's nextCursor, passed back unchanged"),
]
MAX_LIMIT = 1000
Limit = Annotated[int, Meta(ge=1, le=MAX_LIMIT)]
MAX_WAIT_S = 30.0
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
IdempotencyKey = Annotated[
    str,
    Meta(pattern=IDEMPOTENCY_KEY_PATTERN, description="1-255 printable ASCII characters"),
]

# -- request bodies -----------------------------------------------------------------------


class Body(msgspec.Struct, forbid_unknown_fields=True, rename="camel", omit_defaults=True):
    """A request body: unknown fields are refused (422)."""


def _json_bytes(value: Any) -> int:
    return len(msgspec.json.encode(value))


class SubmitBody(Body):
    """`POST /v1/tasks`."""

    type: TaskType
    callback_url: CallbackUrl
    input: Any = None
    metadata: Metadata | None = None
    timeout_seconds: TimeoutSeconds | None = None
    heartbeat_timeout_seconds: HeartbeatSeconds | None = None
    on_timeout: CappedOnTimeout | None = None
    callback_headers: CallbackHeaders | None = None
    ordering_key: OrderingKey | None = None

    def __post_init__(self) -> None:
        if self.type.endswith("\n"):  # see TASK_TYPE_PATTERN
            raise ValueError(f"Expected `str` matching regex {TASK_TYPE_PATTERN!r} - at `$.type`")
        for name, value in (("metadata", self.metadata), ("onTimeout", self.on_timeout)):
            if value is not None and _json_bytes(value) > MAX_JSON_BYTES:
                raise ValueError(f"exceeds {MAX_JSON_BYTES} bytes as JSON - at `$.{name}`")
        if self.ordering_key is not None and _CONTROL.search(self.ordering_key):
            raise ValueError(
                "holds an ASCII control character (U+0000 to U+001F, U+007F) - at `$.orderingKey`"
            )
        if self.callback_headers and (wrong := callback_headers_problem(self.callback_headers)):
            raise ValueError(f"{wrong} - at `$.callbackHeaders`")


class CompleteBody(Body):
    """`POST /v1/tasks/{id}/complete`."""

    status: TerminalStatus
    result: Any = None
    error: Any = None


class ProgressBody(Body):
    """`POST /v1/tasks/{id}/progress`."""

    percent: Percent
    message: Annotated[str, Meta(max_length=MAX_MESSAGE)] | None = None


class TenantBody(Body):
    """`POST /v1/admin/tenants`."""

    name: TenantName
    signature_scheme: SignatureScheme = "v1"


class ReplayBody(Body):
    """`POST /v1/admin/dead-letters/{eventId}/replay` (the body is optional)."""

    reason: Reason = NO_REASON


class DeadLetterFilter(Body):
    """Which dead letters: all the given filters at once (in a body or a query string)."""

    tenant: str | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    event_type: str | None = None


class BulkReplayBody(DeadLetterFilter):
    """`POST /v1/admin/dead-letters/replay`: the filters here or in the query string."""

    reason: Reason = NO_REASON


class OwnDeadLetterFilter(Body):
    """Which of the tenant's own dead letters: all the given filters at once (in a body
    or a query string)."""

    since: Timestamp | None = None
    until: Timestamp | None = None
    event_type: str | None = None


class OwnBulkReplayBody(OwnDeadLetterFilter):
    """`POST /v1/dead-letters/replay`: the filters here or in the query string."""

    reason: Reason = NO_REASON


NotificationType = Literal["delivery.dead", "destination.unhealthy", "destination.recovered"]


class NotificationsBody(Body):
    """`PUT /v1/notifications`: where the tenant is told about its own delivery trouble."""

    url: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_CALLBACK_URL,
            description="checked as a callbackUrl is (https, every resolved address): 422 "
            "invalid_notification_url or blocked_notification_url",
        ),
    ]
    events: (
        Annotated[
            list[NotificationType],
            Meta(min_length=1, description="what to be told about; left out: all of them"),
        ]
        | None
    ) = None


class PingBody(Body):
    """`POST /v1/test-events`."""

    callback_url: CallbackUrl


class PortalLinkBody(Body):
    """`POST /v1/portal-links`, `POST /v1/admin/tenants/{id}/portal-links` (optional)."""

    read_only: Annotated[
        bool, Meta(description="view only: no replay, no redelivery, no settings, no keys")
    ] = False


class NoBody(msgspec.Struct):
    """A route that takes no input: a body, if sent, must be JSON and is ignored."""


# Which error code a refusal at a field's path gets, where it is not validation_error.
FIELD_CODES = {"$.callbackUrl": "invalid_callback_url"}

# -- query strings ------------------------------------------------------------------------


class Query(msgspec.Struct, rename="camel"):
    """A query string: parameters it does not name are ignored. A refused value is a 400,
    or a 422 when it is a well-formed value outside an enum (`status=nope`)."""


class WaitQuery(Query):
    wait: Annotated[
        float, Meta(ge=0, le=MAX_WAIT_S, description="long-poll up to this many seconds")
    ] = 0.0


class Paging(Query):
    limit: Limit = 100
    cursor: Cursor | None = None


TASK_FIELDS: tuple[str, ...] = tuple(f.encode_name for f in msgspec.structs.fields(TaskResource))
if TYPE_CHECKING:
    TaskField = str
else:
    TaskField = Literal[TASK_FIELDS]  # every field of the task resource


class TaskListQuery(Paging):
    status: TaskStatus | None = None
    updated_after: Timestamp | None = None
    fields: (
        Annotated[
            list[TaskField],
            Meta(
                min_length=1,
                description="comma-separated: only these fields of each task (id and "
                "updatedAt always come back)",
            ),
        ]
        | None
    ) = None


class DeadLetterQuery(DeadLetterFilter):
    limit: Limit = 100
    cursor: Cursor | None = None


class OwnDeadLetterQuery(OwnDeadLetterFilter):
    limit: Limit = 100
    cursor: Cursor | None = None


class OwnReplayQuery(OwnDeadLetterFilter):
    dry_run: Annotated[
        bool, Meta(description="true: count the letters a replay would take, replay none")
    ] = False


class LimitQuery(Query):
    limit: Limit = 100


# -- answers ----------------------------------------------------------------------------


class Answer(msgspec.Struct, rename="camel"):
    """An answer: every field is always there (null when empty), but those marked
    optional, which are left out when they do not apply."""


class ErrorDetail(Answer):
    code: str
    message: str


class Error(Answer):
    """Every refusal and failure: `{"error": {"code", "message"}}`; a 409 about a task's
    state adds the task as it is now."""

    error: ErrorDetail
    task: TaskResource | UnsetType = UNSET


# A task of a page: every field of the resource, or with fields= those named and the
# ones that always come back (listing.ALWAYS).
_ALWAYS = {"id", "updated_at"}
if TYPE_CHECKING:
    TaskFields = TaskResource
else:
    TaskFields = msgspec.defstruct(
        "TaskFields",
        [
            (f.name, f.type)
            if f.name in _ALWAYS
            else (f.name, f.type | UnsetType, msgspec.field(name=f.encode_name, default=UNSET))
            for f in msgspec.structs.fields(TaskResource)
        ],
        rename="camel",
        kw_only=True,
    )


class TaskPage(Answer):
    """A page of `GET /v1/tasks`; follow `nextCursor` until it is null. Each task has
    every field, or with `fields=` those it names (and id and updatedAt)."""

    data: list[TaskFields]
    next_cursor: str | None


class Deliveries(Answer):
    """The attempt log of a task's terminal event."""

    task_id: str
    event_id: EventId | None
    data: list[AttemptResource]


class TenantCreated(Answer):
    """A new tenant's credentials, shown once: `signingSecret` for v1 and both,
    `publicKey` for v1a and both, null where the scheme has none."""

    id: str
    name: str
    signature_scheme: SignatureScheme
    api_key: str
    signing_secret: str | None
    public_key: str | None

    @classmethod
    def of(cls, t: NewTenant) -> TenantCreated:
        return cls(
            id=t.id,
            name=t.name,
            signature_scheme=t.signature_scheme,
            api_key=t.api_key,
            signing_secret=t.signing_secret,
            public_key=t.public_key,
        )


class TenantSummary(Answer):
    id: str
    name: str
    created_at: Time
    secret_count: Annotated[int, Meta(description="signing secrets that sign now")]


class TenantPage(Answer):
    data: list[TenantSummary]
    next_cursor: str | None


class SecretRotated(Answer):
    """The tenant's new signing material (shown once); the previous keeps signing beside
    it for `previousSecretsExpireInSeconds`."""

    id: str
    signing_secret: str | None
    public_key: str | None
    previous_secrets_expire_in_seconds: float


class KeyRotated(Answer):
    """The tenant's new API key (shown once); the old one stopped working."""

    id: str
    api_key: str


class DeadLetter(Answer):
    event_id: EventId
    tenant_id: str
    task_id: str | None
    event_type: str
    callback_url: str
    created_at: Time
    failed_at: Time
    attempts: int
    last_error: str | None
    last_status_code: int | None
    replay_count: int
    ordering_key: Annotated[
        str | None,
        Meta(
            description="its task's orderingKey: the key's later webhooks were not held "
            "behind it (a replay sends it after those waiting then)"
        ),
    ]
    skipped_over: Annotated[
        bool,
        Meta(
            description="true when it had an orderingKey: the key's next webhooks went "
            "on without it"
        ),
    ]

    @classmethod
    def of(cls, letter: StoredDeadLetter) -> DeadLetter:
        return cls(
            event_id=letter.event_id,
            tenant_id=letter.tenant_id,
            task_id=letter.task_id,
            event_type=letter.event_type,
            callback_url=letter.callback_url,
            created_at=letter.created_at,
            failed_at=letter.failed_at,
            attempts=letter.attempts,
            last_error=letter.last_error,
            last_status_code=letter.last_status_code,
            replay_count=letter.replay_count,
            ordering_key=letter.ordering_key,
            skipped_over=letter.ordering_key is not None,
        )


class DeadLetterDetail(DeadLetter):
    replayed_at: Time | None
    replayed_by: str | None
    attempt_history: list[AttemptResource]

    @classmethod
    def with_history(cls, letter: StoredDeadLetter, history: list[Attempt]) -> DeadLetterDetail:
        summary = DeadLetter.of(letter)
        return cls(
            **{name: getattr(summary, name) for name in DeadLetter.__struct_fields__},
            replayed_at=letter.replayed_at,
            replayed_by=letter.replayed_by,
            attempt_history=[a.resource() for a in history],
        )


class DeadLetterPage(Answer):
    data: list[DeadLetter]
    next_cursor: str | None


class Replayed(Answer):
    replayed: int
    event_id: EventId | UnsetType = UNSET


class Notifications(Answer):
    """Where the tenant is told about its own delivery trouble, and about what."""

    url: str
    events: list[NotificationType]
    updated_at: Time


class Destination(Answer):
    host: str
    state: CircuitState
    consecutive_failures: int
    last_error: str | None
    last_failure_at: Time | None
    opened_at: Time | None
    next_probe_at: Time | None
    held_deliveries: int


class Destinations(Answer):
    data: list[Destination]


class SigningKey(Answer, kw_only=True):
    """One key that signs now: HMAC secrets are never shown here, v1a public keys are."""

    scheme: KeyScheme
    public_key: Annotated[str, Meta(pattern="^whpk_")] | UnsetType = UNSET
    created_at: Time
    expires_at: Time | None


class SigningKeys(Answer):
    signature_scheme: SignatureScheme
    data: list[SigningKey]


class TestEvent(Answer):
    """A test event (a signed `{"type":"ping"}` webhook): where it is, and its attempts."""

    __test__ = False  # not a pytest test class, whatever its name

    event_id: Annotated[EventId, Meta(pattern="^evt_")]
    type: Literal["ping"]
    status: TestEventStatus
    attempts: list[AttemptResource] | UnsetType = UNSET


class PortalLink(Answer):
    """A single-use link into the partner portal (`/portal`): open it once, before
    `expiresAt`; the session it opens lasts at most 12 hours."""

    url: Annotated[str, Meta(description="absolute, carries the link's secret token")]
    expires_at: Time


class Liveness(Answer):
    status: Literal["ok"]
    version: Annotated[str, Meta(description="the release this process runs")]


class Health(Answer):
    """Readiness: the database answers, and takes writes."""

    status: Literal["ok", "unavailable"]
    error: ErrorDetail | UnsetType = UNSET
