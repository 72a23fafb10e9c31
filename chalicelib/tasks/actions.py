"""What a due task does: one class per action type, and the one place that says so.

A class declares everything about its type: the ``type`` name, its ``fields``
(each a required non-empty string, with a check of its own: an email address,
an SQS queue URL...) and ``run``, which performs the action.  ``@register``
makes it known by its type: ``model.parse_action`` validates an action spec
with the class's fields and the executor runs it with the class's ``run``.
Adding an action type is one registered class here, nothing else.

``run`` takes the validated spec and the injected ``Deps``, performs one AWS
call and returns a small JSON-able result that is recorded on the task.  A
failure is any exception; the executor retries it, but for a
``PermanentActionError`` (a refused target, an unknown type), which fails the
task at once.

This module imports nothing from the task model (the model imports it), so a
field check returns what is wrong, or None, and the model names the field.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from chalicelib.aws import Deps
    from chalicelib.settings import Settings

# A field check: what is wrong with a value (completing "<field> ..."), or None when it is fine.
Check = Callable[[str], str | None]

# Always re.fullmatch: "$" would also match before a final newline. ASCII digits only ("\\d" takes any script's).
# SES takes 7-bit ASCII addresses only (a Unicode domain goes as Punycode): printable ASCII but "@", no space
# and no control character (NUL, U+007F, U+009B...).
EMAIL = re.compile(r"[!-?A-~]{1,64}@[!-?A-~]{1,255}\.[A-Za-z]{2,63}")
# What breaks a header line: C0 and C1 controls, DEL, and Unicode's line and paragraph separators.
LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# What SQS carries (XML 1.0's characters): tab, newline, carriage return, U+0020-U+D7FF, U+E000-U+FFFD and
# U+10000-U+10FFFF.  SQS replaces (or refuses) any other; SNS, which delivers to SQS subscriptions, takes no more.
NOT_MESSAGE_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
SNS_ARN = re.compile(r"arn:aws[a-zA-Z-]{0,20}:sns:[a-z0-9-]{1,30}:[0-9]{12}:[A-Za-z0-9_-]{1,256}")
SQS_URL = re.compile(r"https?://[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?/[0-9]{12}/[A-Za-z0-9_-]{1,80}")
# FIFO queues and topics are not accepted: they need a MessageGroupId, which the actions do not send.
FIFO_SUFFIX = ".fifo"


# --- field checks -----------------------------------------------------------------

def _shown(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def any_text(value: str) -> str | None:
    return None


def email_address(value: str) -> str | None:
    return None if EMAIL.fullmatch(value) else f"is not an email address: {_shown(value)}"


def _code_point(character: str) -> str:
    return f"U+{ord(character):04X}"


def one_line(value: str) -> str | None:
    found = LINE_BREAKING.search(value)
    if found:
        return f"must be one line without control characters, and holds {_code_point(found.group())}"
    return "must be one line of at most 998 characters" if len(value) > 998 else None


def message_text(value: str) -> str | None:
    found = NOT_MESSAGE_TEXT.search(value)
    if found:
        return (f"holds {_code_point(found.group())}, which SQS and SNS do not carry (tab, newline, carriage "
                "return, U+0020-U+D7FF, U+E000-U+FFFD, U+10000-U+10FFFF only)")
    return None


def _not_fifo(kind: str, value: str) -> str | None:
    if value.endswith(FIFO_SUFFIX):
        return f"is a FIFO {kind} target, which needs a MessageGroupId this action does not send: {_shown(value)}"
    return None


def sns_topic_arn(value: str) -> str | None:
    return _not_fifo("SNS", value) or (None if SNS_ARN.fullmatch(value) else f"is not an SNS topic ARN: {_shown(value)}")


def sqs_queue_url(value: str) -> str | None:
    return _not_fifo("SQS", value) or (None if SQS_URL.fullmatch(value) else f"is not an SQS queue URL: {_shown(value)}")


# --- which queues and topics a stage allows ---------------------------------------------

class PermanentActionError(ValueError):
    """An action that can never succeed as it is: the executor fails the task at once, without retrying it."""


class ActionRetryHint(Exception):
    """A failure that says when to try again (a webhook's ``Retry-After``, a throttled target): the executor waits
    at least ``retry_after_seconds`` before the next attempt, within the task's retry budget (``retry``:
    ``max_attempts`` and ``max_age_seconds``); None is no hint (the backoff alone decides)."""

    def __init__(self, message: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class TargetNotAllowed(PermanentActionError):
    """An action's queue or topic is not in the stage's TASK_ACTION_TARGET_ARNS: permanent, never retried."""


class UnknownActionType(PermanentActionError):
    """An action whose type no class is registered for (on this version of the app): permanent."""


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


def target_refusal(spec: Mapping[str, Any], allowed: Sequence[str], region: str,
                   own: Sequence[str] = ()) -> tuple[str, str] | None:
    """(field, what is wrong) when a validated action ``spec`` sends to a queue or topic that is not
    ``allowed`` (the stage's TASK_ACTION_TARGET_ARNS, IAM wildcards) or is one of the app's ``own``
    (``own_targets``: a task must not feed the due queue, forge a dead letter or raise alerts); None when
    it may. Pure."""
    if spec.get("type") == "sqs":
        field, target = "queue_url", str(spec.get("queue_url", ""))
        arn = queue_arn_of(target, region)
    elif spec.get("type") == "sns":
        field, target = "topic_arn", str(spec.get("topic_arn", ""))
        arn = target
    else:
        return None
    if any(_arn_matches(arn, pattern) for pattern in own):
        return field, f"is one of this app's own queues and topics, which actions may not send to: {_shown(target)}"
    if not any(_arn_matches(arn, pattern) for pattern in allowed):
        return field, (f"is not among the queues and topics this stage allows actions to send to "
                       f"(TASK_ACTION_TARGET_ARNS): {_shown(target)}")
    return None


def refuse_disallowed_target(deps: Deps, spec: Mapping[str, Any]) -> None:
    """Raise TargetNotAllowed when ``spec`` sends where the stage does not allow (the executor's last check)."""
    settings = deps.settings
    refusal = target_refusal(spec, settings.task_action_target_arns, settings.region, own_targets(settings))
    if refusal is not None:
        field, problem = refusal
        raise TargetNotAllowed(f"action.{field} {problem}")


def own_targets(settings: Settings) -> tuple[str, ...]:
    """The app's own queues and topics, which no action may send to, as ARN patterns: every queue and topic
    the stage provisions (settings.OWN_QUEUES, OWN_TOPICS), by name, in any partition, region and account."""
    return (*(f"arn:*:sqs:*:*:{name}" for name in settings.own_queues()),
            *(f"arn:*:sns:*:*:{name}" for name in settings.own_topics()))


# --- the registry -----------------------------------------------------------------

class Action(ABC):
    """One action type: its name, its fields and how it runs."""

    type: ClassVar[str]
    fields: ClassVar[Mapping[str, Check]]  # every one required, in this order

    @abstractmethod
    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        """Perform the action; return what to record (ids of what was sent)."""


ACTIONS: dict[str, Action] = {}

A = TypeVar("A", bound=type[Action])


def register(cls: A) -> A:
    """Make an action class known by its ``type`` (use as a class decorator)."""
    if cls.type in ACTIONS:
        raise ValueError(f"action type {cls.type!r} is already registered")
    ACTIONS[cls.type] = cls()
    return cls


def run_action(deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
    """Run the action ``spec`` describes; without any call, UnknownActionType for a type without a class and
    TargetNotAllowed for a queue or topic the stage does not allow (the API and the stream refuse those first)."""
    action = ACTIONS.get(str(spec.get("type")))
    if action is None:
        raise UnknownActionType(f"action.type {spec.get('type')!r} is not one of {', '.join(ACTIONS)}")
    refuse_disallowed_target(deps, spec)
    return action.run(deps, spec)


# --- the action types ---------------------------------------------------------------

@register
class EmailAction(Action):
    """An email through SES v2 from SENDER_EMAIL."""

    type = "email"
    fields: ClassVar[Mapping[str, Check]] = {"to": email_address, "subject": one_line, "body": any_text}

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.ses.send_email(
            FromEmailAddress=deps.settings.sender_email,
            Destination={"ToAddresses": [spec["to"]]},
            Content={"Simple": {
                "Subject": {"Data": spec["subject"], "Charset": "UTF-8"},
                "Body": {"Text": {"Data": spec["body"], "Charset": "UTF-8"}},
            }},
        )
        return {"type": self.type, "message_id": response.get("MessageId", "")}


@register
class SqsAction(Action):
    """A message to a (standard) SQS queue."""

    type = "sqs"
    fields: ClassVar[Mapping[str, Check]] = {"queue_url": sqs_queue_url, "message": message_text}

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sqs.send_message(QueueUrl=spec["queue_url"], MessageBody=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}


@register
class SnsAction(Action):
    """A message to a (standard) SNS topic."""

    type = "sns"
    fields: ClassVar[Mapping[str, Check]] = {"topic_arn": sns_topic_arn, "message": message_text}

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sns.publish(TopicArn=spec["topic_arn"], Message=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}
