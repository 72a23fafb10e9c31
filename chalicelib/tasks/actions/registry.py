"""An action type's contract (``Action``, the ``Attempt`` it runs for, the errors it raises) and the registry
of the types (``ACTIONS``, filled by ``register``), with the rules that read a spec by its type's fields.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from botocore.exceptions import ClientError

from chalicelib.tasks.actions.checks import Check, Flag, JsonObject, json_text
from chalicelib.tasks.task_fields import iso

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class PermanentActionError(ValueError):
    """An action that can never succeed as it is: the executor fails the task at once, without retrying it."""


class ActionRetryHint(Exception):
    """A failure that says when to try again (a webhook's ``Retry-After``, a throttled target): the executor waits
    at least ``retry_after_seconds`` before the next attempt, within the task's retry budget (``retry``:
    ``max_attempts`` and ``max_age_seconds``); None is no hint (the backoff alone decides)."""

    def __init__(self, message: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class UnknownActionType(PermanentActionError):
    """An action whose type no class is registered for (on this version of the app): permanent."""


class ActionRefused(PermanentActionError):
    """The target's service refused the call with an error no retry can change (no such function, bus or
    state machine; access denied; a request it will never take)."""


@contextmanager
def permanent_on(codes: frozenset[str]) -> Iterator[None]:
    """A ClientError whose code is one of ``codes`` becomes ActionRefused (not retried); others pass as they
    are (retried)."""
    try:
        yield
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in codes:
            raise ActionRefused(f"{exc.response['Error']['Code']}: {exc}") from exc
        raise


# Errors of each service that no retry can change (the executor fails the task at once); any other is retried.
REFUSED = frozenset({"AccessDeniedException", "AccessDenied", "ValidationException", "InvalidParameterValueException"})


@dataclass(frozen=True)
class Attempt:
    """What an action runs for: the task (its id), the due time of the execution and the attempt (from 1);
    ``seconds_left``: the invocation's time left (Lambda's ``context.get_remaining_time_in_millis``), when
    known, which bounds a webhook's call."""

    task_id: str
    due: datetime
    number: int = 1
    seconds_left: Callable[[], float] | None = field(default=None, compare=False, repr=False)
    callback: str = ""  # a task's callback (on_success, on_failure) runs as its own execution: ``key_id``

    @property
    def key_id(self) -> str:
        """The id an idempotency key or execution name is made of: the task's, or ``<task id>#<callback>``, so
        a callback's call is never dropped by its target as a repeat of the task's own."""
        return f"{self.task_id}#{self.callback}" if self.callback else self.task_id

    @property
    def due_text(self) -> str:
        return iso(self.due)


class Action(ABC):
    """One action type: its name, its fields and how it runs."""

    type: ClassVar[str]
    fields: ClassVar[Mapping[str, Check]]  # every one required (but an ``OptionalField``), in this order
    optional: ClassVar[frozenset[str]] = frozenset()  # string fields a spec may leave out (``spec_problem`` says when)

    def spec_problem(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """(field, what is wrong) with a spec whose fields each passed their check, taken together; None. Pure."""
        return None

    @abstractmethod
    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        """Perform the action; return what to record (ids of what was sent)."""


ACTIONS: dict[str, Action] = {}

A = TypeVar("A", bound=type[Action])


def register(cls: A) -> A:
    """Make an action class known by its ``type`` (a call, or a class decorator)."""
    if cls.type in ACTIONS:
        raise ValueError(f"action type {cls.type!r} is already registered")
    ACTIONS[cls.type] = cls()
    return cls


def with_outcome(spec: Mapping[str, Any], outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A callback's action ``spec`` carrying the ``outcome`` of the execution it follows, as an ``"outcome"`` key
    of its JSON: of each JSON object field (a payload, detail or input), and of a text field holding a JSON
    object (a webhook's body, a queue's or topic's message).  Any other text (an email, a plain message) goes
    as written. Pure."""
    action = ACTIONS.get(str(spec.get("type")))
    carried = dict(spec)
    for name, check in (action.fields.items() if action is not None else ()):
        value = carried.get(name)
        if isinstance(check, JsonObject) and isinstance(value, dict):
            carried[name] = {**value, "outcome": dict(outcome)}
        elif name in ("body", "message") and isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                carried[name] = json_text({**parsed, "outcome": dict(outcome)})
    return carried


# The optional field by which a task says its action's target drops a repeat of one execution (task, due time):
# a Standard state machine (a second StartExecution of the same name starts nothing) or a webhook receiver that
# honours the webhook-id.  Such a task runs with one write and no claim (docs/executor.md, "One write").
TARGET_DEDUPLICATES = "target_deduplicates"


def deduplicated_by_target(spec: Mapping[str, Any]) -> bool:
    """True when the validated action ``spec`` declares that its target drops a repeat of one execution: its type
    has the ``target_deduplicates`` flag (stepfunctions, webhook) and the task set it true. Pure."""
    action = ACTIONS.get(str(spec.get("type")))
    return (action is not None and isinstance(action.fields.get(TARGET_DEDUPLICATES), Flag)
            and spec.get(TARGET_DEDUPLICATES) is True)
