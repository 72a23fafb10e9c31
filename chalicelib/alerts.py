"""Alerts and summaries published to the SNS alert topic (and always logged).

SNS standard topics deliver at least once and the app may publish one alert again (a retried
publish whose answer was lost, a delivery redone after a crash): each publish carries the message
attribute ``dedup_id``, the same for every copy of one alert and another for another alert, by
which a consumer drops the duplicates (docs/operations-runbook.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
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


def dedup_id(subject: str, detail: Mapping[str, Any], kind: str = "alert") -> str:
    """The alert's deduplication id: a digest of what it is about, the detail's ``dedupe_id`` when the
    caller names the event (a task's failure at a due time) or else its kind, subject and detail (a run's
    table and outcome, a run's summary), which a re-sent alert repeats. Pure."""
    named = detail.get("dedupe_id")
    about = [kind, named] if named else [kind, subject, detail]
    return hashlib.sha256(json.dumps(about, default=str, sort_keys=True).encode()).hexdigest()[:32]


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
        MessageAttributes={"dedup_id": {"DataType": "String", "StringValue": dedup_id(subject, detail, kind)}},
    )
