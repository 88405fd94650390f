"""One table maps outbox errors to HTTP answers; the most specific class wins."""

from __future__ import annotations

from hookrelay.outbox.errors import (
    AlreadyPending,
    ConfigurationError,
    IdempotencyInFlight,
    InvalidCallbackUrl,
    InvalidTransition,
    NotTerminal,
    OutboxError,
    TaskNotFound,
)
from hookrelay.service.api.errors import answer_for


def test_subclasses_get_their_own_answer() -> None:
    base = answer_for(InvalidTransition("task_1", None))
    pending = answer_for(AlreadyPending("task_1", None))
    not_terminal = answer_for(NotTerminal("task_1", None))
    assert base is not None and pending is not None and not_terminal is not None
    assert (base.status, base.code) == (409, "invalid_transition")
    assert (pending.status, pending.code) == (409, "delivery_pending")
    assert (not_terminal.status, not_terminal.code) == (409, "not_terminal")


def test_answers() -> None:
    found = answer_for(TaskNotFound("task_1"))
    assert found is not None and (found.status, found.code) == (404, "not_found")
    busy = answer_for(IdempotencyInFlight("k"))
    assert busy is not None and busy.headers == {"Retry-After": "1"}


def test_errors_no_request_should_meet_have_no_answer() -> None:
    assert answer_for(ConfigurationError("bad key")) is None


def test_every_outbox_error_is_under_the_root() -> None:
    # URL errors stay ValueErrors too, as they were before the tree.
    assert issubclass(InvalidCallbackUrl, OutboxError) and issubclass(
        InvalidCallbackUrl, ValueError
    )
