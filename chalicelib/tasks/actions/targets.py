"""Which targets a stage allows an action to call: its queues, topics, functions, buses and state machines
(TASK_ACTION_TARGET_ARNS, never the app's own) and its webhooks' origins and secrets (chalicelib/tasks/webhook.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chalicelib.names import APP_NAME
from chalicelib.tasks import webhook
from chalicelib.tasks.actions.checks import shown
from chalicelib.tasks.actions.registry import PermanentActionError
from chalicelib.tasks.actions.webhook import WebhookAction

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps
    from chalicelib.tasks.action_deps import ActionSettings as Settings


class TargetNotAllowed(PermanentActionError):
    """An action's queue or topic is not in the stage's TASK_ACTION_TARGET_ARNS: permanent, never retried."""


_SQS_HOST = re.compile(r"(?:sqs\.([a-z0-9-]+)|([a-z0-9-]+)\.queue)\.amazonaws\.com(\.cn)?")


def queue_arn_of(url: str, default_region: str) -> str:
    """The ARN of an SQS queue URL (``https://sqs.<region>.amazonaws.com/<account>/<name>``); a URL of another
    endpoint (moto's, offline) is in the stage's region."""
    rest = url.split("://", 1)[-1]
    host, _, path = rest.partition("/")
    host = host.split(":", 1)[0]
    account, _, name = path.partition("/")
    match = _SQS_HOST.fullmatch(host)
    region = (match.group(1) or match.group(2)) if match else default_region
    if host == "queue.amazonaws.com":
        region = "us-east-1"
    partition = "aws-cn" if host.endswith(".cn") else "aws-us-gov" if region.startswith("us-gov-") else "aws"
    return f"arn:{partition}:sqs:{region}:{account}:{name}"


def _arn_matches(arn: str, pattern: str) -> bool:
    """IAM's wildcard match of a resource ARN: ``*`` any characters, ``?`` one, case-sensitive."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn, re.DOTALL) is not None


# The field naming the target of each action type that has one (an ARN, or sqs's queue URL).
TARGET_FIELDS = {"sqs": "queue_url", "sns": "topic_arn", "lambda": "function_arn", "eventbridge": "event_bus_arn",
                 "stepfunctions": "state_machine_arn"}


def target_refusal(spec: Mapping[str, Any], allowed: Sequence[str], region: str,
                   own: Sequence[str] = (), app: Sequence[str] = ()) -> tuple[str, str] | None:
    """(field, what is wrong) when a validated action ``spec`` calls a queue, topic, function, bus or state
    machine that is not ``allowed`` (the stage's TASK_ACTION_TARGET_ARNS, IAM wildcards), is one of the app's
    ``own`` (``own_targets``: a task must not feed the due queue, forge a dead letter, raise alerts or invoke
    the app's functions), or is named as any stage's are (``app``: ``app_targets``, another stage's) and
    ``allowed`` does not name it exactly, without a wildcard; None when it may. Pure."""
    field = TARGET_FIELDS.get(str(spec.get("type")))
    if field is None:
        return None
    target = str(spec.get(field, ""))
    arn = queue_arn_of(target, region) if field == "queue_url" else target
    if any(_arn_matches(arn, pattern) for pattern in own):
        return field, ("is one of this app's own queues and topics, functions and buses, which actions may not call: "
                       f"{shown(target)}")
    if arn not in allowed and any(_arn_matches(arn, pattern) for pattern in app):
        return field, (f"is named as this app's queues, topics and functions of every stage are ({APP_NAME}-*): "
                       f"another stage's, which actions may call only when TASK_ACTION_TARGET_ARNS names it "
                       f"exactly, without a wildcard: {shown(target)}")
    if not any(_arn_matches(arn, pattern) for pattern in allowed):
        return field, (f"is not among the targets this stage allows actions to call "
                       f"(TASK_ACTION_TARGET_ARNS): {shown(target)}")
    return None


def action_refusal(spec: Mapping[str, Any], settings: Settings) -> tuple[str, str] | None:
    """(field, what is wrong) when a validated action ``spec`` goes where the stage does not allow: a queue or
    topic (``target_refusal``), a webhook's origin or secret (TASK_WEBHOOK_ORIGINS, TASK_WEBHOOK_SECRETS). Pure."""
    if spec.get("type") == WebhookAction.type:
        return webhook.refusal(dict(spec), settings.task_webhook_origins, settings.task_webhook_secrets)
    if str(spec.get("type")) not in TARGET_FIELDS:  # an email: no target to check (nor own_targets to build)
        return None
    return target_refusal(spec, settings.task_action_target_arns, settings.region, own_targets(settings),
                          app_targets())


def refuse_disallowed_target(deps: Deps, spec: Mapping[str, Any]) -> None:
    """Raise TargetNotAllowed when ``spec`` sends where the stage does not allow (the executor's last check)."""
    refusal = action_refusal(spec, deps.settings)
    if refusal is not None:
        field, problem = refusal
        raise TargetNotAllowed(f"action.{field} {problem}")


def own_targets(settings: Settings) -> tuple[str, ...]:
    """The app's own queues, topics, functions and buses, which no action may call, as ARN patterns: every
    queue, topic and bus the stage provisions and every function it deploys (settings.OWN_QUEUES, OWN_TOPICS,
    OWN_BUSES, APP_NAME), by name, in any partition, region and account."""
    return (*(f"arn:*:sqs:*:*:{name}" for name in settings.own_queues()),
            *(f"arn:*:sns:*:*:{name}" for name in settings.own_topics()),
            *(f"arn:*:lambda:*:*:function:{name}" for name in settings.own_functions()),
            *(f"arn:*:events:*:*:event-bus/{name}" for name in settings.own_buses()))


def app_targets() -> tuple[str, ...]:
    """Every stage's queues, topics and functions, as ARN patterns: a stage's Lambda functions are named
    ``<APP_NAME>-<stage>...`` by Chalice, and its queues and alert topic ``<APP_NAME>-...`` (the defaults and
    .chalice/config.json's stages), in any partition, region and account.  A wildcard in TASK_ACTION_TARGET_ARNS
    does not reach them: dev's tasks must not invoke prod's executor or feed its due queue."""
    return (f"arn:*:sqs:*:*:{APP_NAME}-*", f"arn:*:sns:*:*:{APP_NAME}-*", f"arn:*:lambda:*:*:function:{APP_NAME}-*")
