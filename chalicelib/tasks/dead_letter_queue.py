"""``GET /dead-letters``: how many dead letters TASK_DLQ holds for a human, as SQS counts them.

Every dead letter of the task path (a due message SQS gave up on: ``chalicelib.tasks.dead_letters``; an item or
record the stream could not schedule: ``chalicelib.tasks.stream``) ends in TASK_DLQ.  The tasks it concerns are
listed by ``GET /tasks?status=DEAD_LETTERED`` with their reason; this answers the queue's own counts
(``ApproximateNumberOfMessages`` and the messages a reader holds), which include dead letters of items that are
not tasks and of tasks retried or cancelled since.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.aws import Deps
from chalicelib.web import bad_request

if TYPE_CHECKING:
    from mypy_boto3_sqs.literals import QueueAttributeFilterType

COUNTS: dict[str, QueueAttributeFilterType] = {  # the answer's field -> the SQS attribute it reads
    "messages": "ApproximateNumberOfMessages",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}


def counts_of(attributes: Mapping[str, str]) -> dict[str, int]:
    """The answer's counts of GetQueueAttributes' ``Attributes`` (an attribute SQS left out counts 0). Pure."""
    return {field: int(attributes.get(name, "0") or 0) for field, name in COUNTS.items()}


def show(deps: Deps, query: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    """``GET /dead-letters``: TASK_DLQ's name and counts; a query parameter is refused (400 naming it)."""
    for name in sorted(query or {}):
        raise bad_request(name, f"unknown query parameter {name[:100]!r}: GET /dead-letters takes none")
    queue = deps.settings.task_dlq
    found = deps.clients.sqs.get_queue_attributes(QueueUrl=deps.queue_url(queue), AttributeNames=list(COUNTS.values()))
    return 200, {"queue": queue, **counts_of({str(k): v for k, v in found.get("Attributes", {}).items()})}
