"""provision() against moto: every resource with its stream, TTL, GSI, delays and redrive; idempotent."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from moto import mock_aws

from chalicelib.aws import Clients
from chalicelib.settings import STATE_TTL_ATTRIBUTE, Settings
from deploy.provision import (
    MAX_RECEIVE_COUNT,
    SCHEDULER_ROLE_POLICY,
    Provisioned,
    cloudwatch_client,
    dead_letter_queues,
    dlq_alarm,
    ensure_table,
    ensure_warm_writes,
    iam_client,
    provision,
    warm_writes,
)

STAGE_ENV = {"STAGE": "prod", "AWS_REGION": "us-east-1", "STATE_TABLE": "tk-prod-state", "TASKS_TABLE": "tk-prod-tasks",
             "BACKUP_MONITOR_QUEUE": "tk-prod-monitor", "BACKUP_MONITOR_DLQ": "tk-prod-monitor-dlq",
             "DUE_QUEUE": "tk-prod-due", "TASK_DLQ": "tk-prod-task-dlq", "DUE_DLQ": "tk-prod-due-dlq", "SCHEDULE_GROUP": "tk-prod",
             "BACKUP_MONITOR_DELAY_SECONDS": "120", "SENDER_EMAIL": "reminders@example.com",
             "STATE_TABLE_WARM_WRITE_UNITS": "12000"}


@pytest.fixture
def clients() -> Iterator[Clients]:
    with mock_aws():
        yield Clients(Settings.from_env(STAGE_ENV))


def queue(clients: Clients, name: str) -> dict[str, str]:
    url = clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {str(k): v for k, v in attributes.items()}


def test_the_tasks_table_has_a_stream_ttl_and_the_due_bucket_index(clients: Clients) -> None:
    settings = clients.settings
    provision(clients, settings)
    table = clients.dynamodb.describe_table(TableName="tk-prod-tasks")["Table"]
    assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    [index] = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == settings.bucket_index
    assert [k["AttributeName"] for k in index["KeySchema"]] == [settings.bucket_attribute, "due_epoch"]
    ttl = clients.dynamodb.describe_time_to_live(TableName="tk-prod-tasks")["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": settings.ttl_attribute}
    assert clients.dynamodb.describe_table(TableName="tk-prod-state")["Table"]["TableStatus"] == "ACTIVE"
    state_ttl = clients.dynamodb.describe_time_to_live(TableName="tk-prod-state")["TimeToLiveDescription"]
    assert state_ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": STATE_TTL_ATTRIBUTE}
    assert warm_writes(clients.dynamodb.describe_table(TableName="tk-prod-state")["Table"]) == 12_000


def test_queues_have_their_delays_visibility_and_redrive_to_their_dead_letter_queues(clients: Clients) -> None:
    provision(clients, clients.settings)
    monitor, due = queue(clients, "tk-prod-monitor"), queue(clients, "tk-prod-due")
    assert (monitor["DelaySeconds"], monitor["VisibilityTimeout"]) == ("120", "300")
    assert (due["DelaySeconds"], due["VisibilityTimeout"]) == ("0", "120")
    assert json.loads(monitor["RedrivePolicy"]) == {
        "deadLetterTargetArn": queue(clients, "tk-prod-monitor-dlq")["QueueArn"], "maxReceiveCount": MAX_RECEIVE_COUNT}
    assert json.loads(due["RedrivePolicy"]) == {
        "deadLetterTargetArn": queue(clients, "tk-prod-due-dlq")["QueueArn"], "maxReceiveCount": MAX_RECEIVE_COUNT}
    assert "RedrivePolicy" not in queue(clients, "tk-prod-due-dlq")  # its handler sees a message at once
    assert queue(clients, "tk-prod-due-scheduler-dlq")["QueueArn"].endswith(":tk-prod-due-scheduler-dlq")


def test_the_topic_schedule_group_and_scheduler_role_exist_and_are_named_in_the_environment(clients: Clients) -> None:
    env = provision(clients, clients.settings).environment
    assert env["ALERT_TOPIC_ARN"].endswith(":timekeeper-prod-alerts")
    assert clients.scheduler.get_schedule_group(Name="tk-prod")["State"] == "ACTIVE"
    assert env["SCHEDULER_ROLE_ARN"] == "arn:aws:iam::123456789012:role/timekeeper-prod-scheduler"
    assert env["SCHEDULER_DLQ_ARN"] == "arn:aws:sqs:us-east-1:123456789012:tk-prod-due-scheduler-dlq"
    assert env["TASKS_STREAM_ARN"].startswith("arn:aws:dynamodb:us-east-1:123456789012:table/tk-prod-tasks/stream/")


def test_the_scheduler_role_is_trusted_by_scheduler_and_may_only_send_to_the_due_queue_and_its_dlq(
        clients: Clients) -> None:
    provision(clients, clients.settings)
    client = iam_client(clients)
    role = client.get_role(RoleName="timekeeper-prod-scheduler")["Role"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    policy = client.get_role_policy(RoleName="timekeeper-prod-scheduler", PolicyName=SCHEDULER_ROLE_POLICY)
    [statement] = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == ["sqs:SendMessage"]
    assert statement["Resource"] == [queue(clients, "tk-prod-due")["QueueArn"],
                                     queue(clients, "tk-prod-due-scheduler-dlq")["QueueArn"]]
    assert client.list_role_policies(RoleName="timekeeper-prod-scheduler")["PolicyNames"] == [SCHEDULER_ROLE_POLICY]
    assert client.list_attached_role_policies(RoleName="timekeeper-prod-scheduler")["AttachedPolicies"] == []


def test_a_second_run_changes_nothing(clients: Clients) -> None:
    first = provision(clients, clients.settings)
    second = provision(clients, clients.settings)
    assert first.changes
    assert second.changes == []
    assert second.environment == first.environment


def test_drift_is_repaired_and_reported(clients: Clients) -> None:
    provision(clients, clients.settings)
    url = clients.sqs.get_queue_url(QueueName="tk-prod-monitor")["QueueUrl"]
    clients.sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "0"})
    iam_client(clients).delete_role_policy(RoleName="timekeeper-prod-scheduler", PolicyName=SCHEDULER_ROLE_POLICY)
    changes = provision(clients, clients.settings).changes
    assert changes == ["updated queue tk-prod-monitor: DelaySeconds",
                       f"attached policy {SCHEDULER_ROLE_POLICY} of role timekeeper-prod-scheduler"]
    assert queue(clients, "tk-prod-monitor")["DelaySeconds"] == "120"


def alarms(clients: Clients) -> dict[str, dict[str, object]]:
    return {a["AlarmName"]: dict(a) for a in cloudwatch_client(clients).describe_alarms()["MetricAlarms"]}


def test_every_dead_letter_queue_has_an_alarm_to_the_alert_topic_when_it_holds_a_message(clients: Clients) -> None:
    topic = provision(clients, clients.settings).environment["ALERT_TOPIC_ARN"]

    made = alarms(clients)

    dlqs = ["tk-prod-due-dlq", "tk-prod-due-scheduler-dlq", "tk-prod-monitor-dlq", "tk-prod-task-dlq"]
    assert sorted(n for n in made if n.endswith("-not-empty")) == [f"{q}-not-empty" for q in dlqs]
    for dlq in dlqs:
        alarm = made[f"{dlq}-not-empty"]
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
        assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": dlq}]
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0.0)
        assert alarm["AlarmActions"] == [topic] and alarm["ActionsEnabled"] is True


def test_a_changed_alarm_is_put_back_and_reported(clients: Clients) -> None:
    provision(clients, clients.settings)
    cloudwatch_client(clients).put_metric_alarm(**{**dlq_alarm("tk-prod-task-dlq", "arn:aws:sns:us-east-1:1:x"),
                                                   "Threshold": 5.0})

    report = provision(clients, clients.settings)

    assert report.changes == ["updated alarm tk-prod-task-dlq-not-empty"]
    assert alarms(clients)["tk-prod-task-dlq-not-empty"]["Threshold"] == 0.0


@pytest.mark.parametrize(("redrive", "expected"), [
    ({}, ["tk-prod-due-dlq", "tk-prod-due-scheduler-dlq", "tk-prod-monitor-dlq", "tk-prod-task-dlq"]),
    # a queue provisioned later with a redrive policy brings its DLQ, whatever its name
    ({"tk-prod-due": "tk-prod-due-dlq", "tk-prod-monitor": "tk-prod-monitor-dlq"},
     ["tk-prod-due-dlq", "tk-prod-due-scheduler-dlq", "tk-prod-monitor-dlq", "tk-prod-task-dlq"]),
])
def test_the_dead_letter_queues_are_every_redrive_target_and_every_dlq_the_settings_name(
        redrive: dict[str, str], expected: list[str]) -> None:
    assert dead_letter_queues(Settings.from_env(STAGE_ENV), redrive) == expected


def test_a_dlq_setting_added_later_is_picked_up_by_its_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class Later(Settings):
        audit_dlq_arn: str = "arn:aws:sqs:us-east-1:123456789012:tk-prod-audit-dlq"

    later = Later(**{f.name: getattr(Settings.from_env(STAGE_ENV), f.name) for f in dataclasses.fields(Settings)})
    assert "tk-prod-audit-dlq" in dead_letter_queues(later, {})


def test_a_state_table_with_the_status_index_keyed_by_status_alone_gets_the_sharded_one_and_its_records_keyed(
        clients: Clients) -> None:
    from chalicelib.tasks import items

    ddb = clients.dynamodb
    ddb.create_table(  # the state table as an earlier provision made it
        TableName="tk-prod-state", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "status", "listed")],
        GlobalSecondaryIndexes=[{"IndexName": "task-status-index", "Projection": {"ProjectionType": "KEYS_ONLY"},
                                 "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"},
                                               {"AttributeName": "listed", "KeyType": "RANGE"}]}])
    for task_id, status in (("a", "PENDING"), ("b", "DONE"), ("c", "FAILED")):
        ddb.put_item(TableName="tk-prod-state", Item={"PK": {"S": f"TASK#{task_id}"}, "SK": {"S": "RECORD"},
                                                      "status": {"S": status}, "listed": {"S": f"2026#{task_id}"}})
    ddb.put_item(TableName="tk-prod-state", Item={"PK": {"S": "TASK#unlisted"}, "SK": {"S": "RECORD"},
                                                  "status": {"S": "PENDING"}})
    changes = provision(clients, clients.settings).changes
    table = ddb.describe_table(TableName="tk-prod-state")["Table"]
    assert [(i["IndexName"], [k["AttributeName"] for k in i["KeySchema"]]) for i in table["GlobalSecondaryIndexes"]] \
        == [("task-status-shard-index", ["status_key", "listed"])]
    assert {"created index task-status-shard-index on tk-prod-state", "wrote status_key on 1 records of tk-prod-state",
            "deleted index task-status-index on tk-prod-state",
            "raised the warm write throughput of tk-prod-state from 4000 to 12000 write units a second"} <= set(changes)
    assert warm_writes(ddb.describe_table(TableName="tk-prod-state")["Table"]) == 12_000
    found = ddb.query(TableName="tk-prod-state", IndexName="task-status-shard-index",
                      KeyConditionExpression="status_key = :k",
                      ExpressionAttributeValues={":k": {"S": str(items.status_key("c", "FAILED"))}})["Items"]
    assert [i["PK"]["S"] for i in found] == ["TASK#c"]
    for task_id in ("a", "b", "unlisted"):  # PENDING, DONE: not in the index
        record = ddb.get_item(TableName="tk-prod-state", Key={"PK": {"S": f"TASK#{task_id}"}, "SK": {"S": "RECORD"}})
        assert "status_key" not in record["Item"]
    assert not [c for c in provision(clients, clients.settings).changes
                if "index" in c or "status_key" in c or "warm" in c]


def test_a_status_index_that_carried_pending_and_done_is_left_with_the_statuses_it_carries_now(
        clients: Clients) -> None:
    from chalicelib.tasks import items

    provision(clients, clients.settings)
    ddb = clients.dynamodb
    for task_id, status in (("a", "PENDING"), ("b", "DONE"), ("c", "FAILED")):  # as an earlier version keyed them
        ddb.put_item(TableName="tk-prod-state", Item={
            "PK": {"S": f"TASK#{task_id}"}, "SK": {"S": "RECORD"}, "status": {"S": status},
            "listed": {"S": f"2026#{task_id}"}, "status_key": {"S": f"{status}#{items.status_shard(task_id):02d}"}})
    changes = provision(clients, clients.settings).changes
    assert "took 2 PENDING or DONE records of tk-prod-state out of task-status-shard-index" in changes
    keys = {i["PK"]["S"]: i.get("status_key", {}).get("S") for i in ddb.scan(TableName="tk-prod-state")["Items"]}
    assert keys == {"TASK#a": None, "TASK#b": None, "TASK#c": items.status_key("c", "FAILED")}
    assert not [c for c in provision(clients, clients.settings).changes if "status_key" in c or "out of" in c]


def test_a_state_table_made_by_this_run_is_not_searched_for_records_of_an_earlier_layout(clients: Clients) -> None:
    queried: list[str] = []
    clients.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb.Query", lambda params, **_: queried.append(params.get("IndexName", "")))
    provision(clients, clients.settings)
    assert queried == []  # a table of an earlier layout: 64 Queries, one a status shard (the test above)
    provision(clients, clients.settings)
    assert queried and set(queried) == {"task-status-shard-index"}


def test_warm_write_throughput_is_set_at_creation_raised_when_lower_and_never_lowered(clients: Clients) -> None:
    """AWS: warm throughput can be raised, never lowered; a new on-demand table has 4,000 write units a second."""
    def warm(name: str) -> int:
        return warm_writes(clients.dynamodb.describe_table(TableName=name)["Table"])

    made = Provisioned()
    ensure_table(clients, "made-warm", made, warm_write_units=12_000)
    ensure_table(clients, "made-cold", made)
    assert (warm("made-warm"), warm("made-cold")) == (12_000, 4_000)
    for name, units, left in (("made-warm", 12_000, 12_000), ("made-warm", 8_000, 12_000), ("made-cold", 0, 4_000)):
        again = Provisioned()
        ensure_warm_writes(clients, name, units, again)   # reached, lower or off: no call, nothing lowered
        assert (again.changes, warm(name)) == ([], left)
    raised = Provisioned()
    ensure_warm_writes(clients, "made-cold", 12_000, raised)
    assert raised.changes == ["raised the warm write throughput of made-cold from 4000 to 12000 write units a second"]
    assert warm("made-cold") == 12_000
    second = Provisioned()
    ensure_warm_writes(clients, "made-cold", 12_000, second)
    assert second.changes == []
