"""What a due task does: one class per action type, each in its own module, and the one place that registers them.

A class declares everything about its type: the ``type`` name, its ``fields``
(each required: a non-empty string with a check of its own, an email address,
an SQS queue URL...; or a ``JsonObject``, a JSON object within a size limit; or
a ``Flag``, an optional true or false; checks.py) and ``run``, which performs the action.
``register`` makes it known by its type (below): ``model.parse_action`` validates an action spec
with the class's fields and the executor runs it with the class's ``run``.
Adding an action type is one module with its class, registered here, nothing else.

``run`` takes the validated spec, the injected ``Deps`` and the ``Attempt`` it
runs for (task, due time, attempt number: the same task and due time for every
attempt and redelivery of one execution), performs one call and returns a small
JSON-able result that is recorded on the task.  A failure is any exception; the
executor retries it, but for a ``PermanentActionError`` (a refused target, an
unknown type, an error code that retrying cannot change), which fails the task
at once; an ``ActionRetryHint`` may say when to retry (``retry_after_seconds``).
Which targets a stage allows: targets.py.

This package imports nothing from the task model (the model imports it), so a
field check returns what is wrong, or None, and the model names the field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chalicelib.tasks.actions.checks import (
    EMAIL,
    JSON_FIELD_LIMIT,
    Check,
    JsonObject,
    OptionalField,
    PartProblem,
    any_text,
)
from chalicelib.tasks.actions.email import EmailAction
from chalicelib.tasks.actions.eventbridge import EventBridgeAction, EventRefused
from chalicelib.tasks.actions.lambda_ import LambdaAction
from chalicelib.tasks.actions.registry import (
    ACTIONS,
    Action,
    ActionRefused,
    ActionRetryHint,
    Attempt,
    PermanentActionError,
    UnknownActionType,
    deduplicated_by_target,
    register,
    with_outcome,
)
from chalicelib.tasks.actions.sns import SnsAction
from chalicelib.tasks.actions.sqs import SqsAction
from chalicelib.tasks.actions.stepfunctions import EXECUTION_NAME, StepFunctionsAction, execution_name
from chalicelib.tasks.actions.targets import (
    TARGET_FIELDS,
    TargetNotAllowed,
    action_refusal,
    own_targets,
    queue_arn_of,
    refuse_disallowed_target,
    target_refusal,
)
from chalicelib.tasks.actions.webhook import WebhookAction

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps

__all__ = [
    "ACTIONS", "EMAIL", "EXECUTION_NAME", "JSON_FIELD_LIMIT", "TARGET_FIELDS", "Action", "ActionRefused",
    "ActionRetryHint", "Attempt", "Check", "EmailAction", "EventBridgeAction", "EventRefused", "JsonObject",
    "LambdaAction", "OptionalField", "PartProblem", "PermanentActionError", "SnsAction", "SqsAction",
    "StepFunctionsAction", "TargetNotAllowed", "UnknownActionType", "WebhookAction", "action_refusal", "any_text",
    "deduplicated_by_target", "execution_name", "own_targets", "queue_arn_of", "register", "run_action",
    "target_refusal", "with_outcome",
]

# The action types, in the order the API's errors list them.
register(EmailAction)
register(SqsAction)
register(SnsAction)
register(LambdaAction)
register(EventBridgeAction)
register(StepFunctionsAction)
register(WebhookAction)


def run_action(deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    """Run the action ``spec`` describes for ``attempt``; without any call, UnknownActionType for a type
    without a class and TargetNotAllowed for a target the stage does not allow (the API and the stream refuse
    those first)."""
    action = ACTIONS.get(str(spec.get("type")))
    if action is None:
        raise UnknownActionType(f"action.type {spec.get('type')!r} is not one of {', '.join(ACTIONS)}")
    refuse_disallowed_target(deps, spec)
    return action.run(deps, spec, attempt)
