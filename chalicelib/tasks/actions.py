"""What a due task does: one class per action type, and the one place that says so.

A class declares everything about its type: the ``type`` name, its ``fields``
(each a required non-empty string, with a check of its own: an email address,
an SQS queue URL...) and ``run``, which performs the action.  ``@register``
makes it known by its type: ``model.parse_action`` validates an action spec
with the class's fields and the executor runs it with the class's ``run``.
Adding an action type is one registered class here, nothing else.

``run`` takes the validated spec and the injected ``Deps``, performs one AWS
call and returns a small JSON-able result that is recorded on the task.  A
failure is any exception; the executor retries it.

This module imports nothing from the task model (the model imports it), so a
field check returns what is wrong, or None, and the model names the field.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from chalicelib.aws import Deps

# A field check: what is wrong with a value (completing "<field> ..."), or None when it is fine.
Check = Callable[[str], str | None]

# Always re.fullmatch: "$" would also match before a final newline. ASCII digits only ("\\d" takes any script's).
EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s]{1,255}\.[A-Za-z]{2,63}")
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


def one_line(value: str) -> str | None:
    return "must be one line" if "\n" in value or "\r" in value or len(value) > 998 else None


def _not_fifo(kind: str, value: str) -> str | None:
    if value.endswith(FIFO_SUFFIX):
        return f"is a FIFO {kind} target, which needs a MessageGroupId this action does not send: {_shown(value)}"
    return None


def sns_topic_arn(value: str) -> str | None:
    return _not_fifo("SNS", value) or (None if SNS_ARN.fullmatch(value) else f"is not an SNS topic ARN: {_shown(value)}")


def sqs_queue_url(value: str) -> str | None:
    return _not_fifo("SQS", value) or (None if SQS_URL.fullmatch(value) else f"is not an SQS queue URL: {_shown(value)}")


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
    """Run the action ``spec`` describes (KeyError for a type without a class)."""
    return ACTIONS[spec["type"]].run(deps, spec)


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
    fields: ClassVar[Mapping[str, Check]] = {"queue_url": sqs_queue_url, "message": any_text}

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sqs.send_message(QueueUrl=spec["queue_url"], MessageBody=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}


@register
class SnsAction(Action):
    """A message to a (standard) SNS topic."""

    type = "sns"
    fields: ClassVar[Mapping[str, Check]] = {"topic_arn": sns_topic_arn, "message": any_text}

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sns.publish(TopicArn=spec["topic_arn"], Message=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}
