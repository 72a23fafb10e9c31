"""Dead-letter records for events that cannot be processed: logged, then kept in a queue."""

from __future__ import annotations

import json
from typing import Any

from chalicelib import metrics
from chalicelib.aws import Deps
from chalicelib.log import logger

# SQS's limit is 256 KiB per message; the rest is room for the envelope's own fields.
MAX_BODY_BYTES = 250_000


def dead_letter(deps: Deps, queue_name: str, source: str, event_id: str, reason: str, payload: Any,
                smaller: Any = None, dedupe_id: str | None = None, strategy: str | None = None) -> None:
    """Log the event with its id and reason, and send it to ``queue_name`` for a human to inspect.

    A payload too large for one message is replaced by ``smaller`` (its keys, say), or by a note that it was
    left out.  ``dedupe_id``, when given, is the same for every copy of one dead letter a retry may send again:
    a reader drops a message whose ``dedupe_id`` it has seen.  One sent to TASK_DLQ counts in the metric
    TasksDeadLettered by ``strategy`` (unknown when the caller cannot tell)."""
    logger.error("dead-lettered", extra={"source": source, "event_id": event_id, "reason": reason})

    def envelope(content: Any) -> str:
        fields = {"source": source, "event_id": event_id, "reason": reason, "at": deps.clock().isoformat()}
        if dedupe_id is not None:
            fields["dedupe_id"] = dedupe_id
        return json.dumps({**fields, "payload": content}, default=str)

    body = envelope(payload)
    if len(body.encode()) > MAX_BODY_BYTES:
        body = envelope(smaller if smaller is not None else {"truncated": True})
        if len(body.encode()) > MAX_BODY_BYTES:
            body = envelope({"truncated": True})
    deps.clients.sqs.send_message(QueueUrl=deps.queue_url(queue_name), MessageBody=body)
    if queue_name == deps.settings.task_dlq:
        deps.metrics.task(metrics.TASKS_DEAD_LETTERED, strategy)
