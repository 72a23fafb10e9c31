"""Alerts and summaries published to the SNS alert topic (and always logged)."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.aws import Deps
from chalicelib.log import logger

SUBJECT_LIMIT = 100  # SNS rejects longer subjects


def publish(deps: Deps, subject: str, detail: dict[str, Any]) -> None:
    """Publish one alert; without ALERT_TOPIC_ARN it is only logged."""
    subject = subject if len(subject) <= SUBJECT_LIMIT else subject[: SUBJECT_LIMIT - 3] + "..."
    logger.warning("alert", extra={"subject": subject, "detail": detail})
    topic = deps.settings.alert_topic_arn
    if not topic:
        return
    deps.clients.sns.publish(
        TopicArn=topic,
        Subject=subject,
        Message=json.dumps({"subject": subject, **detail}, default=str, sort_keys=True),
    )
