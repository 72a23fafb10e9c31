"""The checks of an action's fields: each says what is wrong with a value (completing "<field> ..."), or None.

A string field's check is a function (an email address, an SQS queue URL, one line...); the other field kinds
are callable objects: ``JsonObject``, a JSON object within a size limit, and the ``OptionalField``s (``Flag``,
``Choice``, ``HeaderMap``).  They import nothing from the task model (the model imports them), so a check returns
what is wrong, or None, and the model names the field. Pure.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib import ddb
from chalicelib.tasks import webhook

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


def shown(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def any_text(value: str) -> str | None:
    return None


def email_address(value: str) -> str | None:
    return None if EMAIL.fullmatch(value) else f"is not an email address: {shown(value)}"


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
        return f"is a FIFO {kind} target, which needs a MessageGroupId this action does not send: {shown(value)}"
    return None


def sns_topic_arn(value: str) -> str | None:
    return _not_fifo("SNS", value) or (None if SNS_ARN.fullmatch(value) else f"is not an SNS topic ARN: {shown(value)}")


def sqs_queue_url(value: str) -> str | None:
    return _not_fifo("SQS", value) or (None if SQS_URL.fullmatch(value) else f"is not an SQS queue URL: {shown(value)}")


def lambda_function_arn(value: str) -> str | None:
    return None if LAMBDA_ARN.fullmatch(value) else f"is not a Lambda function (or alias) ARN: {shown(value)}"


def event_bus_arn(value: str) -> str | None:
    return None if EVENT_BUS_ARN.fullmatch(value) else f"is not an EventBridge event bus ARN: {shown(value)}"


def state_machine_arn(value: str) -> str | None:
    return None if STATE_MACHINE_ARN.fullmatch(value) else f"is not a Step Functions state machine ARN: {shown(value)}"


def event_text(value: str) -> str | None:
    """An event's source or detail-type: one line of at most EVENT_TEXT_LIMIT bytes."""
    found = LINE_BREAKING.search(value)
    if found:
        return f"must be one line without control characters, and holds {_code_point(found.group())}"
    return f"must be at most {EVENT_TEXT_LIMIT} bytes" if len(value.encode()) > EVENT_TEXT_LIMIT else None


def event_source(value: str) -> str | None:
    if value.startswith("aws."):
        return f"must not start with 'aws.' (EventBridge keeps those sources to AWS services): {shown(value)}"
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
        return f"must be one of {', '.join(self.options)}, got {shown(str(value)) if isinstance(value, str) else type(value).__name__}"


@dataclass(frozen=True)
class HeaderMap(OptionalField):
    """A field kind: an optional JSON object of HTTP header names to values (``webhook.header_problem``)."""

    def __call__(self, value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"must be a JSON object of header names to values, got {type(value).__name__}"
        found = webhook.headers_problem(value)
        return PartProblem(*found) if found and found[0] else found[1] if found else None


# DynamoDB keeps a task's action in its item: at most 32 levels of nesting, numbers of at most 38 digits, no
# empty key in a map.
MAX_NESTING = 32


def _storable(value: Any, depth: int) -> str | None:
    """What keeps a JSON value out of a DynamoDB item (too deep, a number DynamoDB cannot hold, an empty key), or
    None."""
    if depth > MAX_NESTING:
        return f"is nested more than {MAX_NESTING} levels deep (DynamoDB's limit)"
    if isinstance(value, int | float) and not isinstance(value, bool) and not ddb.is_number(repr(value)):
        return f"holds the number {shown(repr(value), 60)}, which DynamoDB cannot hold (38 significant digits)"
    if isinstance(value, dict) and "" in value:
        return "holds an empty key, which a DynamoDB map cannot hold"
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((problem for child in children if (problem := _storable(child, depth + 1))), None)
