"""What a due task does: one class per action type, and the one place that says so.

A class declares everything about its type: the ``type`` name, its ``fields``
(each required: a non-empty string with a check of its own, an email address,
an SQS queue URL...; or a ``JsonObject``, a JSON object within a size limit; or
a ``Flag``, an optional true or false) and ``run``, which performs the action.  ``@register``
makes it known by its type: ``model.parse_action`` validates an action spec
with the class's fields and the executor runs it with the class's ``run``.
Adding an action type is one registered class here, nothing else.

``run`` takes the validated spec, the injected ``Deps`` and the ``Attempt`` it
runs for (task, due time, attempt number: the same task and due time for every
attempt and redelivery of one execution), performs one call and returns a small
JSON-able result that is recorded on the task.  A failure is any exception; the
executor retries it, but for a ``PermanentActionError`` (a refused target, an
unknown type, an error code that retrying cannot change), which fails the task
at once; an ``ActionRetryHint`` may say when to retry (``retry_after_seconds``).

This module imports nothing from the task model (the model imports it), so a
field check returns what is wrong, or None, and the model names the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.names import APP_NAME
from chalicelib.tasks import webhook
from chalicelib.tasks.task_fields import iso

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps
    from chalicelib.tasks.action_deps import ActionSettings as Settings

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
# A function, its version or its alias (``$LATEST``, a version number, an alias name).
LAMBDA_ARN = re.compile(r"arn:aws[a-zA-Z-]{0,20}:lambda:[a-z0-9-]{1,30}:[0-9]{12}:function:[A-Za-z0-9_-]{1,64}"
                        r"(?::(?:\$LATEST|[A-Za-z0-9_-]{1,128}))?")
EVENT_BUS_ARN = re.compile(r"arn:aws[a-zA-Z-]{0,20}:events:[a-z0-9-]{1,30}:[0-9]{12}:event-bus/[A-Za-z0-9_./-]{1,256}")
STATE_MACHINE_ARN = re.compile(r"arn:aws[a-zA-Z-]{0,20}:states:[a-z0-9-]{1,30}:[0-9]{12}:stateMachine:[A-Za-z0-9_-]{1,80}")
# AWS takes 256 KB (262,144 bytes) in a Lambda asynchronous invocation's payload, a PutEvents entry and a
# StartExecution input.  A JSON field of an action holds at most 240 KiB, leaving room for what goes with it (the
# payload's envelope, an event's source and detail-type, each at most EVENT_TEXT_LIMIT) in the one request, and
# for the rest of the task in its 400 KB DynamoDB item.  (A request AWS still finds too large fails the task at
# once: RequestTooLargeException is among the errors no retry changes.)
JSON_FIELD_LIMIT = 240 * 1024
EVENT_TEXT_LIMIT = 256


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


def json_body_text(value: str) -> str | None:
    try:
        json.loads(value)
    except ValueError as exc:
        return f"must be JSON text (the body to send): {exc}"
    return None


def _not_fifo(kind: str, value: str) -> str | None:
    if value.endswith(FIFO_SUFFIX):
        return f"is a FIFO {kind} target, which needs a MessageGroupId this action does not send: {_shown(value)}"
    return None


def sns_topic_arn(value: str) -> str | None:
    return _not_fifo("SNS", value) or (None if SNS_ARN.fullmatch(value) else f"is not an SNS topic ARN: {_shown(value)}")


def sqs_queue_url(value: str) -> str | None:
    return _not_fifo("SQS", value) or (None if SQS_URL.fullmatch(value) else f"is not an SQS queue URL: {_shown(value)}")


def lambda_function_arn(value: str) -> str | None:
    return None if LAMBDA_ARN.fullmatch(value) else f"is not a Lambda function (or alias) ARN: {_shown(value)}"


def event_bus_arn(value: str) -> str | None:
    return None if EVENT_BUS_ARN.fullmatch(value) else f"is not an EventBridge event bus ARN: {_shown(value)}"


def state_machine_arn(value: str) -> str | None:
    return None if STATE_MACHINE_ARN.fullmatch(value) else f"is not a Step Functions state machine ARN: {_shown(value)}"


def event_text(value: str) -> str | None:
    """An event's source or detail-type: one line of at most EVENT_TEXT_LIMIT bytes."""
    found = LINE_BREAKING.search(value)
    if found:
        return f"must be one line without control characters, and holds {_code_point(found.group())}"
    return f"must be at most {EVENT_TEXT_LIMIT} bytes" if len(value.encode()) > EVENT_TEXT_LIMIT else None


def event_source(value: str) -> str | None:
    if value.startswith("aws."):
        return f"must not start with 'aws.' (EventBridge keeps those sources to AWS services): {_shown(value)}"
    return event_text(value)


def json_text(value: Any) -> str:
    """``value`` as compact JSON, as the actions send it (UTF-8, no NaN or Infinity)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class JsonObject:
    """A field kind: a JSON object (not a string) of at most ``limit`` bytes as compact JSON.  Called as a check
    with the value, it says what is wrong, like a string field's check (``model.parse_action`` tells the kinds
    apart); a task source's template of one is an object whose strings are templates (chalicelib/sources.py)."""

    limit: int = JSON_FIELD_LIMIT

    def __call__(self, value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"must be a JSON object, got {type(value).__name__}"
        try:
            size = len(json_text(value).encode())
        except (TypeError, ValueError, RecursionError) as exc:
            return f"must hold JSON values only: {str(exc)[:120]}"
        if size > self.limit:
            return f"is {size} bytes as JSON, more than {self.limit}"
        return _storable(value, 1)


class OptionalField(ABC):
    """A field kind a spec may leave out (kept only when given) and a task source never templates (``Flag``,
    ``Choice``, ``HeaderMap``).  Called as a check with the value, it says what is wrong, like a string field's
    check."""

    @abstractmethod
    def __call__(self, value: Any) -> str | None:
        """What is wrong with ``value``, or None."""


class PartProblem(str):
    """A check's problem that names the part of the value at fault (``part``: a key of an object), so the field
    named is ``<field>.<part>`` (``action.headers.Host``)."""

    part: str

    def __new__(cls, part: str, problem: str) -> PartProblem:
        made = super().__new__(cls, problem)
        made.part = part
        return made


@dataclass(frozen=True)
class Flag(OptionalField):
    """A field kind: an optional JSON boolean (absent: false)."""

    def __call__(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else f"must be true or false, got {type(value).__name__}"


@dataclass(frozen=True)
class Choice(OptionalField):
    """A field kind: an optional string among ``options`` (absent: the first)."""

    options: tuple[str, ...]

    def __call__(self, value: Any) -> str | None:
        if isinstance(value, str) and value in self.options:
            return None
        return f"must be one of {', '.join(self.options)}, got {_shown(str(value)) if isinstance(value, str) else type(value).__name__}"


@dataclass(frozen=True)
class HeaderMap(OptionalField):
    """A field kind: an optional JSON object of HTTP header names to values (``webhook.header_problem``)."""

    def __call__(self, value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"must be a JSON object of header names to values, got {type(value).__name__}"
        found = webhook.headers_problem(value)
        return PartProblem(*found) if found and found[0] else found[1] if found else None


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


# DynamoDB keeps a task's action in its item: at most 32 levels of nesting, numbers of at most 38 digits, no
# empty key in a map.
MAX_NESTING = 32


def _storable(value: Any, depth: int) -> str | None:
    """What keeps a JSON value out of a DynamoDB item (too deep, a number DynamoDB cannot hold, an empty key), or
    None."""
    if depth > MAX_NESTING:
        return f"is nested more than {MAX_NESTING} levels deep (DynamoDB's limit)"
    if isinstance(value, int | float) and not isinstance(value, bool) and not ddb.is_number(repr(value)):
        return f"holds the number {_shown(repr(value), 60)}, which DynamoDB cannot hold (38 significant digits)"
    if isinstance(value, dict) and "" in value:
        return "holds an empty key, which a DynamoDB map cannot hold"
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((problem for child in children if (problem := _storable(child, depth + 1))), None)


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
                       f"{_shown(target)}")
    if arn not in allowed and any(_arn_matches(arn, pattern) for pattern in app):
        return field, (f"is named as this app's queues, topics and functions of every stage are ({APP_NAME}-*): "
                       f"another stage's, which actions may call only when TASK_ACTION_TARGET_ARNS names it "
                       f"exactly, without a wildcard: {_shown(target)}")
    if not any(_arn_matches(arn, pattern) for pattern in allowed):
        return field, (f"is not among the targets this stage allows actions to call "
                       f"(TASK_ACTION_TARGET_ARNS): {_shown(target)}")
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


# --- the registry -----------------------------------------------------------------

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
    """Make an action class known by its ``type`` (use as a class decorator)."""
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


def run_action(deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    """Run the action ``spec`` describes for ``attempt``; without any call, UnknownActionType for a type
    without a class and TargetNotAllowed for a target the stage does not allow (the API and the stream refuse
    those first)."""
    action = ACTIONS.get(str(spec.get("type")))
    if action is None:
        raise UnknownActionType(f"action.type {spec.get('type')!r} is not one of {', '.join(ACTIONS)}")
    refuse_disallowed_target(deps, spec)
    return action.run(deps, spec, attempt)


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


# --- the action types ---------------------------------------------------------------

@register
class EmailAction(Action):
    """An email through SES v2 from SENDER_EMAIL."""

    type = "email"
    fields: ClassVar[Mapping[str, Check]] = {"to": email_address, "subject": one_line, "body": any_text}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
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

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        response = deps.clients.sqs.send_message(QueueUrl=spec["queue_url"], MessageBody=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}


@register
class SnsAction(Action):
    """A message to a (standard) SNS topic."""

    type = "sns"
    fields: ClassVar[Mapping[str, Check]] = {"topic_arn": sns_topic_arn, "message": message_text}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        response = deps.clients.sns.publish(TopicArn=spec["topic_arn"], Message=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}


# Errors of each service that no retry can change (the executor fails the task at once); any other is retried.
_REFUSED = frozenset({"AccessDeniedException", "AccessDenied", "ValidationException", "InvalidParameterValueException"})


@register
class LambdaAction(Action):
    """An asynchronous invocation (``InvocationType=Event``) of a Lambda function, version or alias.  Lambda
    queues the event and answers 202; the function receives the envelope ``{"task_id", "due", "attempt",
    "payload"}``.  At least once: a redelivery or a lost answer may invoke it again with the same task_id and
    due (docs/tasks.md)."""

    type = "lambda"
    fields: ClassVar[Mapping[str, Check]] = {"function_arn": lambda_function_arn, "payload": JsonObject()}
    refused: ClassVar[frozenset[str]] = _REFUSED | {
        "ResourceNotFoundException", "RequestTooLargeException", "InvalidRequestContentException",
        "KMSAccessDeniedException", "KMSDisabledException", "KMSNotFoundException", "EFSMountFailureException"}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        envelope = {"task_id": attempt.task_id, "due": attempt.due_text, "attempt": attempt.number,
                    "payload": spec["payload"]}
        with permanent_on(self.refused):
            response = deps.clients.lambda_.invoke(FunctionName=spec["function_arn"], InvocationType="Event",
                                                   Payload=json_text(envelope).encode())
        if response.get("StatusCode") != 202:
            raise RuntimeError(f"Lambda answered {response.get('StatusCode')} to an asynchronous invocation, not 202")
        return {"type": self.type, "request_id": response.get("ResponseMetadata", {}).get("RequestId", "")}


class EventRefused(PermanentActionError):
    """PutEvents took the call but refused the entry with an error code no retry can change."""


@register
class EventBridgeAction(Action):
    """An event put on an EventBridge bus: ``source``, ``detail_type`` and the JSON object ``detail``.  The
    call succeeds even when its entry fails: an entry with an ErrorCode is a failure, retried when the code is
    transient (throttling, an internal failure), else permanent."""

    type = "eventbridge"
    fields: ClassVar[Mapping[str, Check]] = {"event_bus_arn": event_bus_arn, "source": event_source,
                                             "detail_type": event_text, "detail": JsonObject()}
    refused: ClassVar[frozenset[str]] = _REFUSED | {"ResourceNotFoundException"}
    transient_entry_errors: ClassVar[frozenset[str]] = frozenset({
        "InternalFailure", "InternalException", "ThrottlingException", "ServiceUnavailable"})

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        entry = {"EventBusName": spec["event_bus_arn"], "Source": spec["source"], "DetailType": spec["detail_type"],
                 "Detail": json_text(spec["detail"])}
        with permanent_on(self.refused):
            response = deps.clients.events.put_events(Entries=[entry])  # type: ignore[list-item]
        [result] = response.get("Entries") or [{}]
        code = result.get("ErrorCode")
        if response.get("FailedEntryCount", 0) or code or not result.get("EventId"):
            problem = f"PutEvents refused the entry: {code or 'no EventId'}: {result.get('ErrorMessage', '')}"
            if code in self.transient_entry_errors:
                raise RuntimeError(problem)
            raise EventRefused(problem)
        return {"type": self.type, "event_id": result["EventId"]}


# Step Functions' execution names: 1-80 characters, and only these keep CloudWatch Logs happy.
EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")


def execution_name(task_id: str, due: datetime) -> str:
    """The one name of the execution of ``task_id`` due at ``due``: ``<task id>-<due, UTC, compact>`` when that
    is a valid name of at most 80 characters, else ``<task id made safe, cut>-<due>-<hash of both>``.  Two
    executions never share a name (the readable form ends in the due time, the hashed one in 32 hex digits), so
    Step Functions refuses a second start of the same one. Pure."""
    at = due.astimezone(UTC)
    stamp = at.strftime("%Y%m%dT%H%M%S") + (f"{at.microsecond // 1000:03d}" if at.microsecond else "") + "Z"
    readable = f"{task_id}-{stamp}"
    if EXECUTION_NAME.fullmatch(readable):
        return readable
    digest = hashlib.sha256(f"{task_id}\n{stamp}".encode()).hexdigest()[:32]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:80 - len(stamp) - len(digest) - 2]
    return f"{prefix}-{stamp}-{digest}" if prefix else f"{stamp}-{digest}"


@register
class StepFunctionsAction(Action):
    """A StartExecution of a state machine with the JSON object ``input``, named by ``execution_name`` from the
    task and its due time: a second start of the same execution (a redelivery, a lost answer) is refused by
    Step Functions with ExecutionAlreadyExists, which means done.  (Express state machines do not check names:
    for them it is at least once.)  ``target_deduplicates``: true says the state machine is a Standard workflow,
    which starts a name once (an open execution started again with the same input answers success, a closed one
    ExecutionAlreadyExists), so the executor may run it with one write; never set it for an Express one."""

    type = "stepfunctions"
    fields: ClassVar[Mapping[str, Check]] = {"state_machine_arn": state_machine_arn, "input": JsonObject(),
                                             TARGET_DEDUPLICATES: Flag()}
    refused: ClassVar[frozenset[str]] = _REFUSED | {
        "StateMachineDoesNotExist", "StateMachineDeleting", "InvalidArn", "InvalidName", "InvalidExecutionInput",
        "KmsAccessDeniedException", "KmsInvalidStateException"}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        name = execution_name(attempt.key_id, attempt.due)
        arn = spec["state_machine_arn"]
        try:
            with permanent_on(self.refused):
                response = deps.clients.stepfunctions.start_execution(
                    stateMachineArn=arn, name=name, input=json_text(spec["input"]))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise
            execution = arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
            return {"type": self.type, "execution_arn": execution, "already_started": True}
        return {"type": self.type, "execution_arn": response["executionArn"]}


@register
class WebhookAction(Action):
    """A signed HTTPS request (POST by default; ``method``, extra ``headers``) of a JSON body to an allow-listed
    origin (chalicelib/tasks/webhook.py).  ``target_deduplicates``: true says the receiver drops a repeat of a
    ``webhook-id`` it has seen."""

    type = "webhook"
    fields: ClassVar[Mapping[str, Check]] = {"url": webhook.url_problem, "secret": webhook.secret_problem,
                                             "body": json_body_text, "method": Choice(webhook.METHODS),
                                             "headers": HeaderMap(), TARGET_DEDUPLICATES: Flag()}
    optional: ClassVar[frozenset[str]] = frozenset({"body"})

    def spec_problem(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """``body`` is required but for a GET, which sends none and refuses one."""
        method = str(spec.get("method", webhook.METHODS[0]))
        if method in webhook.BODILESS and "body" in spec:
            return "body", f"must be left out: a {method} sends no body"
        if method not in webhook.BODILESS and "body" not in spec:
            return "body", f"is required for a {method}: the JSON text to send"
        return None

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        try:
            return webhook.post(deps, spec, attempt.key_id, attempt.due, attempt.seconds_left)
        except webhook.WebhookRefused as exc:
            raise PermanentActionError(str(exc)) from exc
        except webhook.WebhookFailed as exc:
            raise ActionRetryHint(str(exc), exc.retry_after) from exc
