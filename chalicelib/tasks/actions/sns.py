"""The sns action: a message to a (standard) SNS topic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks.actions.checks import Check, message_text, sns_topic_arn
from chalicelib.tasks.actions.registry import Action, Attempt

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class SnsAction(Action):
    """A message to a (standard) SNS topic."""

    type = "sns"
    fields: ClassVar[Mapping[str, Check]] = {"topic_arn": sns_topic_arn, "message": message_text}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        response = deps.clients.sns.publish(TopicArn=spec["topic_arn"], Message=spec["message"])
        return {"type": self.type, "message_id": response.get("MessageId", "")}
