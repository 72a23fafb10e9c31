"""Dead-letter records for events that cannot be processed: logged, then kept in a queue."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.aws import Deps
from chalicelib.log import logger


def dead_letter(deps: Deps, queue_name: str, source: str, event_id: str, reason: str, payload: Any) -> None:
    """Log the event with its id and reason, and send it to ``queue_name`` for a human to inspect."""
    logger.error("dead-lettered", extra={"source": source, "event_id": event_id, "reason": reason})
    body = json.dumps(
        {"source": source, "event_id": event_id, "reason": reason,
         "at": deps.clock().isoformat(), "payload": payload},
        default=str,
    )
    deps.clients.sqs.send_message(QueueUrl=deps.queue_url(queue_name), MessageBody=body)
