"""What a due task does: one small class per action type, found by type in ``ACTIONS``.

Every action takes the validated spec (``model.parse_action``) and the injected
``Deps``, performs one AWS call and returns a small JSON-able result that is
recorded on the task.  A failure is any exception; the executor retries it.
Adding an action type is one class here plus its fields in
``model.ACTION_FIELDS``.
"""

from __future__ import annotations

from typing import Any, Protocol

from chalicelib.aws import Deps


class Action(Protocol):
    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        """Perform the action; return what to record (ids of what was sent)."""
        ...


class EmailAction:
    """An email through SES v2 from SENDER_EMAIL: {to, subject, body}."""

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.ses.send_email(
            FromEmailAddress=deps.settings.sender_email,
            Destination={"ToAddresses": [spec["to"]]},
            Content={"Simple": {
                "Subject": {"Data": spec["subject"], "Charset": "UTF-8"},
                "Body": {"Text": {"Data": spec["body"], "Charset": "UTF-8"}},
            }},
        )
        return {"type": "email", "message_id": response.get("MessageId", "")}


class SqsAction:
    """A message to an SQS queue: {queue_url, message}."""

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sqs.send_message(QueueUrl=spec["queue_url"], MessageBody=spec["message"])
        return {"type": "sqs", "message_id": response.get("MessageId", "")}


class SnsAction:
    """A message to an SNS topic: {topic_arn, message}."""

    def run(self, deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
        response = deps.clients.sns.publish(TopicArn=spec["topic_arn"], Message=spec["message"])
        return {"type": "sns", "message_id": response.get("MessageId", "")}


ACTIONS: dict[str, Action] = {
    "email": EmailAction(),
    "sqs": SqsAction(),
    "sns": SnsAction(),
}


def run_action(deps: Deps, spec: dict[str, Any]) -> dict[str, Any]:
    """Run the action ``spec`` describes (KeyError for a type without a class)."""
    return ACTIONS[spec["type"]].run(deps, spec)
