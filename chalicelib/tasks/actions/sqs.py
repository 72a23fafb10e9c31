"""The sqs action: a message to a (standard) SQS queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks.actions.checks import Check, message_text, sqs_queue_url
from chalicelib.tasks.actions.registry import Action, Attempt

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class SqsAction(Action):
    """A message to a (standard) SQS queue."""

    type = "sqs"
    fields: ClassVar[Mapping[str, Check]] = {"queue_url": sqs_queue_url, "message": message_text}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        response = deps.clients.sqs.send_message(QueueUrl=spec["queue_url"], MessageBody=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}
