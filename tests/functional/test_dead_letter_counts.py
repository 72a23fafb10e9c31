"""GET /dead-letters: what TASK_DLQ holds for a human, as SQS counts it (the console's dead-letter view)."""

from __future__ import annotations

from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.deadletter import dead_letter
from chalicelib.tasks.dead_letter_queue import counts_of
from tests.fixtures import Aws


def test_the_count_is_what_the_task_dlq_holds_waiting_and_held_by_a_reader(client: Client, aws: Aws,
                                                                          deps: Deps) -> None:
    assert client.http.get("/dead-letters").json_body == {
        "queue": aws.settings.task_dlq, "messages": 0, "in_flight": 0, "delayed": 0}
    for n in range(3):
        dead_letter(deps, aws.settings.task_dlq, "task_stream", f"event-{n}", "not a task", {"n": n})
    assert client.http.get("/dead-letters").json_body["messages"] == 3
    aws.clients.sqs.receive_message(QueueUrl=aws.queue_url(aws.settings.task_dlq), MaxNumberOfMessages=1,
                                    VisibilityTimeout=60)  # a human reading one: in flight until deleted
    shown = client.http.get("/dead-letters").json_body
    assert (shown["messages"], shown["in_flight"]) == (2, 1), shown


def test_a_query_parameter_is_refused_naming_it(client: Client) -> None:
    response = client.http.get("/dead-letters?limit=5")
    assert response.status_code == 400
    assert response.json_body["field"] == "limit" and "takes none" in response.json_body["error"]


def test_an_attribute_sqs_leaves_out_counts_zero() -> None:
    assert counts_of({"ApproximateNumberOfMessages": "44"}) == {"messages": 44, "in_flight": 0, "delayed": 0}
