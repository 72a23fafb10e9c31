"""Every AWS call the app made during this test run is allowed by the policy of the function that made it.

Each recorded call carries the Lambda function it is attributed to
(tests/policy_recorder.py ``attribute``: the app.py handler on the stack, else
the chalicelib entry module, else any function) and is checked against that
function's policy from deploy/iam.py. It runs last (marker ``last``), after the recorder in tests/policy_recorder.py
has seen the whole suite, so a permission the code needs but the policy
template lacks fails here, not in a deployed Lambda. So that it never passes
with nothing to check (``pytest tests/deploy`` runs no functional test), it
first drives a representative workload through every entry point of app.py
itself (API routes, stream, executor, interval processor, backup trigger and
monitor) and requires each to have made calls, and the calls to reach every
service the policy grants.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from deploy import iam
from tests import events
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.policy_recorder import RECORDER, REGION, Recorder, report, suite_problems

# The services app code calls (deploy/iam.py grants these, plus iam:PassRole checked with CreateSchedule).
SERVICES = {"dynamodb", "sqs", "sns", "ses", "scheduler"}
JSON = {"Content-Type": "application/json"}


class Workload:
    """Drives app.py's entry points against moto; remembers which of them made no recorded call."""

    def __init__(self, aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
        self.aws, self.deps, self.clock, self.client = aws, deps, clock, client
        self.silent: list[str] = []
        self._stream_position: str | None = None

    def step(self, name: str, action: Any) -> Any:
        """Run ``action``; note ``name`` when app code made no AWS call in it (RECORDER's set may
        already hold an identical call, so a probe of its own counts them)."""
        probe = Recorder()
        clients = [getattr(self.deps.clients, service) for service in ("dynamodb", "sqs", "sns", "ses", "scheduler")]
        for aws_client in clients:
            aws_client.meta.events.register("before-parameter-build", probe._record)
        try:
            result = action()
        finally:
            for aws_client in clients:
                aws_client.meta.events.unregister("before-parameter-build", probe._record)
        if not probe.calls:
            self.silent.append(name)
        return result

    def post(self, **body: Any) -> str:
        response = self.client.http.post("/tasks", body=json.dumps(body), headers=JSON)
        assert response.status_code == 201, response.body
        return str(response.json_body["id"])

    def stream_batch(self) -> dict[str, Any]:
        """The tasks table's new stream records since the last batch, delivered to task_stream."""
        streams = self.aws.clients.session.client("dynamodbstreams", region_name=REGION)
        arn = self.deps.settings.tasks_stream_arn
        [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        if self._stream_position:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                SequenceNumber=self._stream_position)["ShardIterator"]
        else:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        records = streams.get_records(ShardIterator=iterator)["Records"]
        if records:
            self._stream_position = records[-1]["dynamodb"]["SequenceNumber"]
        response = self.client.lambda_.invoke(
            "task_stream", events.stream_event(*[events.stream_record_from_api(r, arn) for r in records])).payload
        assert isinstance(response, dict) and response.get("batchItemFailures") == [], response
        return response

    def due_messages(self) -> list[str]:
        return [body for body, _ in self.aws.sent(self.deps.settings.due_queue)]

    def run(self) -> None:
        now = self.clock.now
        email = {"type": "email", "to": "ada@example.com", "subject": "Standup", "body": "Now."}
        failing = {"type": "sqs", "message": "x",
                   "queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/no-such-queue"}
        exact_later = self.step("POST /tasks", lambda: self.post(
            run_at=(now + timedelta(hours=3)).isoformat(), action=email))
        self.post(run_at=(now + timedelta(hours=2)).isoformat(), action=email, strategy="interval")
        self.post(run_at=(now + timedelta(hours=2)).isoformat(), action=email, strategy="lazy")
        self.post(run_at=(now + timedelta(minutes=2)).isoformat(), action=email)
        self.post(run_at=(now + timedelta(minutes=2)).isoformat(), action=failing)
        self.step("GET /tasks", lambda: self.client.http.get("/tasks"))
        self.step("GET /tasks/{id}", lambda: self.client.http.get(f"/tasks/{exact_later}"))
        self.step("PATCH /tasks/{id}", lambda: self.client.http.request(
            "PATCH", f"/tasks/{exact_later}", headers=JSON,
            body=json.dumps({"run_at": (now + timedelta(hours=4)).isoformat()}).encode()))
        self.step("task_stream", self.stream_batch)
        self.step("DELETE /tasks/{id}", lambda: self.client.http.delete(f"/tasks/{exact_later}"))
        self.stream_batch()  # the cancel's REMOVE deletes the schedule

        due = self.due_messages()
        assert len(due) == 2, due
        self.clock.advance(minutes=3)
        records = [events.sqs_record(body, self.deps.settings.due_queue) for body in due]
        self.step("task_executor", lambda: self.client.lambda_.invoke("task_executor", events.sqs_event(*records)))
        self.stream_batch()  # the outcomes' MODIFY records
        # SQS gave up on a due message (here one already run: the handler reads its state and forwards it).
        self.step("due_dead_letter", lambda: self.client.lambda_.invoke("due_dead_letter", events.sqs_event(
            events.sqs_record(due[0], self.deps.settings.due_dlq, "dlq-1", receive_count=6))))

        self.clock.advance(hours=2)
        self.step("interval_processor", lambda: self.client.lambda_.invoke(
            "interval_processor", events.scheduled_event(self.clock.now)))

        self.deps.clients.dynamodb.create_table(
            TableName="orders", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        use_settings(self.deps, backup_tables=("orders",))
        self.step("backup_trigger", lambda: self.client.lambda_.invoke(
            "backup_trigger", events.scheduled_event(self.clock.now)))
        sent = self.aws.sent(self.deps.settings.backup_monitor_queue)
        [(body, _delay)] = [(b, d) for b, d in sent if not json.loads(b).get("watch")]  # poll 0, not the start watch
        self.clock.advance(minutes=5)
        self.step("backup_monitor", lambda: self.client.lambda_.invoke("backup_monitor", events.sqs_event(
            events.sqs_record(body, self.deps.settings.backup_monitor_queue))))
        self.step("GET /backups/runs", lambda: self.client.http.get("/backups/runs"))


@pytest.mark.last
def test_every_aws_call_the_app_made_is_allowed_by_its_policy(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    workload = Workload(aws, deps, clock, client)
    workload.run()
    assert workload.silent == [], f"entry points that made no recorded AWS call: {workload.silent}"
    services = {c.service for c in RECORDER.calls}
    assert services >= SERVICES, f"no recorded call to {sorted(SERVICES - services)}"

    attributed = {c.function for c in RECORDER.calls if c.via.startswith("app.py:")}
    assert attributed >= set(iam.FUNCTIONS), f"no call attributed to {sorted(set(iam.FUNCTIONS) - attributed)}"

    problems = suite_problems(RECORDER.calls)
    assert not problems, report(problems)
