"""The email action: an email through SES v2."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks.actions.checks import Check, any_text, email_address, one_line
from chalicelib.tasks.actions.registry import Action, Attempt

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


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
