"""The emulation of Lambda's event sources (tests/functional/lambda_sim.py) keeps SQS's rules where the soak
depends on them."""

from __future__ import annotations

import json
from datetime import timedelta

from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import DueMessage, TaskKey
from deploy.provision import MAX_RECEIVE_COUNT
from tests.faults import Faults
from tests.fixtures import Aws, FakeClock
from tests.functional.lambda_sim import LambdaSim, Message


def test_a_message_the_due_dlq_handler_fails_on_stays_in_the_dlq_and_is_received_again(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, faults: Faults) -> None:
    # The due DLQ has no redrive policy: SQS keeps a message there however often its handler fails, although it
    # arrived with the receive count of its last failed delivery from the due queue.
    sim = LambdaSim(deps, client, clock)
    dlq = sim.queue(deps.settings.due_dlq)
    body = DueMessage(TaskKey.for_id("gone"), clock.now).to_json()  # its task is gone: only forwarded
    dlq.messages.append(Message(body, clock.now, "redriven-1", receives=MAX_RECEIVE_COUNT))
    task_dlq = aws.queue_url(deps.settings.task_dlq)
    faults.inject("sqs.SendMessage", "error", times=3, match=lambda params: params["QueueUrl"] == task_dlq)
    sim.run(until=lambda: not dlq.messages, limit=timedelta(minutes=10))
    assert dlq.dead == [] and dlq.messages == []
    [(forwarded, _)] = aws.sent(deps.settings.task_dlq)
    assert json.loads(forwarded)["source"] == "due_dead_letter"
