"""Alerts and summaries published to the SNS alert topic (and always logged)."""

from __future__ import annotations

import json
import re
from typing import Any

from chalicelib.aws import Deps
from chalicelib.log import logger

# SNS: a subject is ASCII, starts with a letter, digit or punctuation, has no line
# breaks or control characters, and is *less than* 100 characters long.
SUBJECT_MAX = 99
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def sns_subject(text: str) -> str:
    """``text`` made a valid SNS subject (the full text always goes in the message too)."""
    ascii_text = text.encode("ascii", "replace").decode("ascii")
    clean = _CONTROL.sub(" ", ascii_text).strip() or "timekeeper alert"
    return clean if len(clean) <= SUBJECT_MAX else clean[: SUBJECT_MAX - 3] + "..."


def publish(deps: Deps, subject: str, detail: dict[str, Any], kind: str = "alert") -> None:
    """Publish one alert (or summary); without ALERT_TOPIC_ARN it is only logged."""
    extra = {"subject": subject, "detail": detail}
    if kind == "alert":
        logger.warning("alert", extra=extra)
    else:
        logger.info(kind, extra=extra)
    topic = deps.settings.alert_topic_arn
    if not topic:
        return
    deps.clients.sns.publish(
        TopicArn=topic,
        Subject=sns_subject(subject),
        Message=json.dumps({"subject": subject, **detail}, default=str, sort_keys=True),
    )
