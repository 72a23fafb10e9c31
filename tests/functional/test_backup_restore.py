"""Restore on demand on moto: POST /backups/restores, the monitor's polls to ACTIVE, the refusals, and faults at
every call of a restore (with SQS's redeliveries and a client's retries, as AWS and callers make them).

One moto account for the file (provisioning costs more than a restore): "orders" (3 items, a TTL attribute,
point-in-time recovery, a tag, a stream, deletion protection), backed up once by this stage; BACKUP_TABLES=orders;
the stage's settings otherwise. Each test restores into its own targets, on its own clock (an hour after the
previous test's), with the queues emptied and no fault armed.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import boto3
import pytest
from chalice.test import Client
from moto import mock_aws
from moto.sqs.models import sqs_backends

import app as app_module
from chalicelib.aws import Clients, Deps
from chalicelib.backups import monitor, restore
from chalicelib.backups.restore_store import RestoreStore
from chalicelib.backups.retry import ATTEMPTS
from chalicelib.backups.rules import backup_name
from chalicelib.settings import Settings
from chalicelib.web import ApiError
from deploy.provision import provision
from local import moto_corrections, moto_speed
from tests.aws_limits import AwsLimits
from tests.faults import Faults, Kind, WorkerCrash
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.backup_support import make_backup, our_backup
from tests.policy_recorder import RECORDER

JSON = {"Content-Type": "application/json"}
ALL_SETTINGS = ["ttl", "pitr", "tags", "stream", "deletion_protection"]
TESTS = itertools.count(1)


@dataclass
class Lab:
    aws: Aws
    faults: Faults
    backup_arn: str = ""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    moto_corrections.install()
    moto_speed.uninstall()
    with mock_aws():
        settings = Settings.from_env()
        clients = Clients(settings)
        RECORDER.attach(clients.session)
        limits = AwsLimits(clients)
        provisioned = provision(clients, settings)
        settings = replace(settings, alert_topic_arn=provisioned.environment["ALERT_TOPIC_ARN"],
                           backup_tables=("orders",))
        capture = clients.sqs.create_queue(QueueName="alert-capture")["QueueUrl"]
        capture_arn = clients.sqs.get_queue_attributes(
            QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        clients.sns.subscribe(TopicArn=settings.alert_topic_arn, Protocol="sqs", Endpoint=capture_arn)
        out = Lab(Aws(clients, settings, capture, limits), Faults(clients))
        client = clients.dynamodb
        client.create_table(TableName="orders", BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
                            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
                            Tags=[{"Key": "team", "Value": "core"}], DeletionProtectionEnabled=True)
        for i in range(3):
            client.put_item(TableName="orders", Item={"PK": {"S": f"p{i}"}})
        client.update_time_to_live(TableName="orders", TimeToLiveSpecification={
            "Enabled": True, "AttributeName": "expires_at"})
        client.update_continuous_backups(TableName="orders", PointInTimeRecoverySpecification={
            "PointInTimeRecoveryEnabled": True})
        clock = FakeClock()
        out.backup_arn = our_backup(Deps(settings=settings, clients=clients), "orders", clock() - timedelta(hours=1))
        yield out
        assert not limits.violations, limits.violations
    app_module.container.use(None)


@dataclass
class World:
    aws: Aws
    deps: Deps
    clock: FakeClock
    faults: Faults
    backup_arn: str
    target: str  # this test's first target; "<target>-2"... for more


@pytest.fixture
def world(lab: Lab) -> Iterator[World]:
    n = next(TESTS)
    lab.faults.calm()
    lab.faults.calls.clear()
    for queue in sqs_backends[ACCOUNT][lab.aws.settings.region].queues.values():
        queue._messages.clear()
    clock = FakeClock()
    clock.advance(hours=n)
    deps = Deps(settings=lab.aws.settings, clients=lab.aws.clients, clock=clock, sleep=clock.sleep)
    app_module.container.use(deps)
    yield World(lab.aws, deps, clock, lab.faults, lab.backup_arn, f"orders-restored-{n}")
    lab.faults.calm()


@pytest.fixture
def client(world: World) -> Iterator[Client]:
    with Client(app_module.app) as test_client:
        yield test_client


def post(client: Client, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = client.http.post("/backups/restores", body=json.dumps(body), headers=JSON)
    return response.status_code, json.loads(response.body)


def shown(client: Client, restore_id: str) -> dict[str, Any]:
    response = client.http.get(f"/backups/restores/{restore_id}")
    assert response.status_code == 200, response.body
    return dict(json.loads(response.body))


def deliver(w: World, rounds: int = 60) -> list[str]:
    """Deliver the monitor queue's messages as SQS would: after their delay, again (same message id) after the
    visibility timeout when the handler failed or its worker died; what each delivery answered."""
    queue: list[tuple[str, int, str]] = []
    outcomes: list[str] = []
    for _ in range(rounds):
        queue += [(body, delay, uuid.uuid4().hex) for body, delay in w.aws.sent(w.deps.settings.backup_monitor_queue)]
        if not queue:
            return outcomes
        body, delay, message_id = queue.pop(0)
        w.clock.advance(seconds=delay)
        try:
            outcomes.append(monitor.check_run(w.deps, body, message_id))
        except (Exception, WorkerCrash) as exc:
            outcomes.append(f"raised {type(exc).__name__}")
            queue.append((body, 30, message_id))
    raise AssertionError(f"the monitor queue never emptied: {outcomes}")


def target_settings(w: World, target: str) -> dict[str, Any]:
    client = w.deps.clients.dynamodb
    table = client.describe_table(TableName=target)["Table"]
    return {
        "ttl": client.describe_time_to_live(TableName=target)["TimeToLiveDescription"].get("AttributeName"),
        "pitr": client.describe_continuous_backups(TableName=target)["ContinuousBackupsDescription"][
            "PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"],
        "tags": client.list_tags_of_resource(ResourceArn=table["TableArn"])["Tags"],
        "stream": table.get("StreamSpecification", {}).get("StreamViewType"),
        "deletion_protection": table.get("DeletionProtectionEnabled", False),
    }


def test_a_restore_of_the_latest_backup_becomes_active_compared_and_with_the_sources_settings(
        world: World, client: Client) -> None:
    status, started = post(client, {"table": "orders", "latest": True, "target": world.target})
    assert status == 202 and started["status"] == "RESTORING"
    assert started["restored_from"]["backup_arn"] == world.backup_arn
    assert started["restored_from"]["recorded_items"] == 3
    assert deliver(world) == ["active"]
    done = shown(client, started["restore_id"])
    assert done["status"] == "ACTIVE" and done["finished_at"] and done["error"] is None
    assert done["comparison"] == {"compared_with": "backup", "recorded_items": 3, "restored_items": 3,
                                  "scan_complete": True, "problems": []}
    assert done["settings_applied"] == ALL_SETTINGS
    assert target_settings(world, world.target) == {
        "ttl": "expires_at", "pitr": "ENABLED", "tags": [{"Key": "team", "Value": "core"}],
        "stream": "NEW_AND_OLD_IMAGES", "deletion_protection": True}
    assert world.aws.alerts() == []


def test_without_copy_settings_nothing_is_applied_and_restores_list_newest_first(world: World, client: Client) -> None:
    status, first = post(client, {"table": "orders", "backup_arn": world.backup_arn, "target": world.target,
                                  "copy_settings": False, "billing_mode": "PAY_PER_REQUEST"})
    assert status == 202
    world.clock.advance(seconds=1)
    status, second = post(client, {"table": "orders", "latest": True, "target": f"{world.target}-2"})
    assert status == 202
    deliver(world)
    assert shown(client, first["restore_id"])["settings_applied"] == []
    assert target_settings(world, world.target)["ttl"] is None
    assert target_settings(world, world.target)["deletion_protection"] is False
    listed = json.loads(client.http.get("/backups/restores?limit=2").body)["restores"]
    assert [r["restore_id"] for r in listed] == [second["restore_id"], first["restore_id"]]
    assert [r["status"] for r in listed] == ["ACTIVE", "ACTIVE"]


def test_a_point_in_time_restore_inside_the_window_and_the_latest_restorable_one(world: World, client: Client) -> None:
    window = world.deps.clients.dynamodb.describe_continuous_backups(TableName="orders")[
        "ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]
    at = window["EarliestRestorableDateTime"].isoformat()
    status, started = post(client, {"table": "orders", "point_in_time": at, "target": world.target})
    assert status == 202 and started["restored_from"]["point_in_time"] == at, started
    status, latest = post(client, {"table": "orders", "point_in_time": "latest_restorable",
                                   "target": f"{world.target}-2", "copy_settings": False})
    assert status == 202 and latest["restored_from"]["latest_restorable"] is True
    deliver(world)
    done = shown(client, started["restore_id"])
    assert done["status"] == "ACTIVE" and done["comparison"]["compared_with"] == "source table", done
    assert done["comparison"]["restored_items"] == 3 and done["settings_applied"] == ALL_SETTINGS
    assert shown(client, latest["restore_id"])["status"] == "ACTIVE"


def test_refusals_name_the_field_and_change_nothing(world: World, client: Client) -> None:
    deps, clock, ddb = world.deps, world.clock, world.deps.clients.dynamodb
    taken, users_table = f"{world.target}-taken", f"users{world.target[6:]}"
    for name in (taken, users_table):
        ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
    theirs = make_backup(deps, "orders", "timekeeper-prod-orders-20261122T100000", clock())
    users = our_backup(deps, users_table, clock())
    use_settings(deps, backup_tables=("orders", users_table))
    earliest = ddb.describe_continuous_backups(TableName="orders")["ContinuousBackupsDescription"][
        "PointInTimeRecoveryDescription"]["EarliestRestorableDateTime"]
    user_target = f"{users_table}-restored-1"
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"target": taken, "latest": True}, 409, "target", "exists"),
        ({"table": "secrets", "target": "secrets-restored-1", "latest": True}, 400, "table", "not one this stage backs up"),
        ({"target": deps.settings.state_table, "latest": True}, 400, "target", "one of the app's own tables"),
        ({"target": "orders-copy", "latest": True}, 400, "target", "RESTORE_TARGET_PATTERN"),
        ({"point_in_time": (earliest - timedelta(days=1)).isoformat()}, 400, "point_in_time",
         f"outside the source's restorable window {earliest.isoformat()} to"),
        ({"table": users_table, "target": user_target, "point_in_time": "latest_restorable"}, 400, "point_in_time",
         "point-in-time recovery is off"),
        ({"backup_arn": theirs}, 400, "backup_arn", "not this stage's"),
        ({"backup_arn": users}, 400, "backup_arn", f"is of table {users_table!r}"),
        ({"table": users_table, "target": user_target, "backup_arn": theirs}, 400, "backup_arn", "is of table 'orders'"),
        ({"backup_arn": world.backup_arn + "0"}, 400, "backup_arn", "no backup"),  # 9 hex digits: no backup has
    ]
    tables = ddb.list_tables()["TableNames"]
    for changes, status, field, words in cases:
        got, answer = post(client, {"table": "orders", "target": world.target, **changes})
        assert (got, answer["field"]) == (status, field) and words in answer["error"], (changes, answer)
    assert ddb.list_tables()["TableNames"] == tables
    assert json.loads(client.http.get("/backups/restores?limit=1").body)["restores"] == [] or \
        json.loads(client.http.get("/backups/restores?limit=1").body)["restores"][0]["target"] != world.target
    use_settings(deps, backup_restore_foreign=True)  # another stage's backup, by ARN, when allowed
    assert post(client, {"table": "orders", "target": world.target, "backup_arn": theirs})[0] == 202
    ddb.delete_backup(BackupArn=users)  # latest: only this stage's own backups
    ddb.delete_backup(BackupArn=theirs)
    status, answer = post(client, {"table": users_table, "target": user_target, "latest": True})
    assert (status, answer["field"]) == (400, "latest")


def test_a_retried_request_with_its_restore_id_never_starts_a_second_restore(world: World, client: Client) -> None:
    restore_id = f"incident-{world.target}"
    body = {"table": "orders", "latest": True, "target": world.target, "restore_id": restore_id}
    assert post(client, body)[0] == 202
    assert post(client, body) == (202, shown(client, restore_id))  # the same restore
    status, answer = post(client, {**body, "copy_settings": False})
    assert (status, answer["field"]) == (409, "restore_id")
    assert world.faults.calls["dynamodb.RestoreTableFromBackup"] == 1
    assert deliver(world).count("active") == 1
    assert shown(client, restore_id)["status"] == "ACTIVE"


def test_a_duplicate_poll_message_is_dropped(world: World, client: Client) -> None:
    post(client, {"table": "orders", "latest": True, "target": world.target, "restore_id": f"dup-{world.target}"})
    [(body, _)] = world.aws.sent(world.deps.settings.backup_monitor_queue)
    assert monitor.check_run(world.deps, body, "m-1") == "active"
    assert monitor.check_run(world.deps, body, "m-2") == "duplicate"   # another delivery of the message
    assert monitor.check_run(world.deps, body, "m-1") == "duplicate"   # the same one, redelivered
    assert monitor.check_run(world.deps, json.dumps({"restore_id": "nope", "poll": 0}), "m-3") == "dead-lettered"


def test_a_restore_that_does_not_finish_by_the_deadline_fails_with_one_alert(world: World, client: Client) -> None:
    deps = world.deps
    world.faults.inject("dynamodb.RestoreTableFromBackup", "error", times=10_000)  # never starts
    use_settings(deps, backup_monitor_delay_seconds=900, backup_deadline_minutes=60)
    status, started = post(client, {"table": "orders", "latest": True, "target": world.target})
    assert status == 202 and started["status"] == "RESTORING"
    world.aws.alerts()
    polls = 0
    while (sent := world.aws.sent(deps.settings.backup_monitor_queue)) and polls < 20:
        [(body, delay)] = sent  # each poll starts the restore again (refused each time), until the deadline
        world.clock.advance(seconds=delay)
        polls += 1
        if monitor.check_run(deps, body, uuid.uuid4().hex) == "failed":
            assert monitor.check_run(deps, body, uuid.uuid4().hex) == "duplicate"  # a duplicate of the last poll
    assert 2 <= polls <= 5  # 900 s apart (and the retries' backoff): past the hour by the fifth
    done = shown(client, started["restore_id"])
    assert done["status"] == "FAILED" and "no restored table 60 minutes after" in done["error"]
    [alert] = world.aws.alerts()
    assert alert["message"]["restore_id"] == started["restore_id"] and "restore of orders" in alert["subject"]


def test_a_restored_table_that_differs_from_its_backup_fails_with_one_alert(world: World, client: Client) -> None:
    own = boto3.client("dynamodb", region_name=world.deps.settings.region)  # the test's, not the app's

    def delete_an_item(parsed: Any = None, **_: Any) -> None:
        if parsed and "TableDescription" in parsed:
            own.delete_item(TableName=parsed["TableDescription"]["TableName"], Key={"PK": {"S": "p0"}})

    events = world.deps.clients.dynamodb.meta.events
    events.register("after-call.dynamodb.RestoreTableFromBackup", delete_an_item)
    try:
        status, started = post(client, {"table": "orders", "latest": True, "target": world.target})
    finally:
        events.unregister("after-call.dynamodb.RestoreTableFromBackup", delete_an_item)
    assert status == 202
    assert deliver(world) == ["failed"]
    done = shown(client, started["restore_id"])
    assert done["status"] == "FAILED" and done["comparison"]["problems"] == ["restored 2 items, the backup recorded 3"]
    assert done["settings_applied"] == []
    [alert] = world.aws.alerts()
    assert alert["message"]["reason"] == "restored 2 items, the backup recorded 3"


def test_a_restore_dynamodb_refuses_fails_at_once_with_one_alert(world: World, client: Client) -> None:
    deps, own = world.deps, boto3.client("dynamodb", region_name=world.deps.settings.region)
    arn = make_backup(deps, "orders", backup_name(deps.settings.backup_name_prefix, "orders", world.clock()),
                      world.clock())

    def retention_deletes_it(**_: Any) -> None:  # the backup deleted between the checks and the restore call
        own.delete_backup(BackupArn=arn)

    events = deps.clients.dynamodb.meta.events
    events.register("before-call.dynamodb.RestoreTableFromBackup", retention_deletes_it)
    try:
        status, started = post(client, {"table": "orders", "backup_arn": arn, "target": world.target})
    finally:
        events.unregister("before-call.dynamodb.RestoreTableFromBackup", retention_deletes_it)
    assert status == 202 and started["status"] == "FAILED"
    assert started["error"].startswith("restore refused: BackupNotFoundException")
    assert deliver(world) == ["duplicate"]  # its poll finds it settled
    [alert] = world.aws.alerts()
    assert alert["message"]["restore_id"] == started["restore_id"]


# Every write a clean restore makes (AWS and the state table), and which occurrence of it to hit: each answer lost
# (applied, then an error: the retry, the redelivery or the client's retry must find it done); the restore call
# and the settle also refused hard after every retry, or applied by a worker that died.
WRITES = [
    ("dynamodb.TransactWriteItems", 1), ("sqs.SendMessage", 1), ("dynamodb.RestoreTableFromBackup", 1),
    ("dynamodb.UpdateItem", 1), ("dynamodb.UpdateTimeToLive", 1), ("dynamodb.UpdateContinuousBackups", 1),
    ("dynamodb.TagResource", 1), ("dynamodb.UpdateTable", 1), ("dynamodb.UpdateTable", 2), ("dynamodb.UpdateItem", 2),
]
CASES: list[tuple[str, int, Kind]] = [
    *[(op, n, "lost") for op, n in WRITES],
    ("dynamodb.RestoreTableFromBackup", 1, "error"), ("dynamodb.RestoreTableFromBackup", 1, "crash_after"),
    ("dynamodb.UpdateItem", 2, "crash_after"),
]


@pytest.mark.parametrize(("operation", "occurrence", "kind"), CASES, ids=[f"{op}#{n}-{k}" for op, n, k in CASES])
def test_a_fault_at_any_call_of_a_restore_still_ends_in_one_active_restore_without_alerts(
        world: World, operation: str, occurrence: int, kind: Kind) -> None:
    deps, restore_id = world.deps, f"faulty-{world.target}"
    body = {"table": "orders", "latest": True, "target": world.target, "restore_id": restore_id}
    fault = world.faults.inject(operation, kind, occurrence=occurrence, times=ATTEMPTS if kind == "error" else 1)
    for _ in range(3):  # the client retries a request that failed, with its restore id
        try:
            restore.start(deps, body)
            break
        except (Exception, WorkerCrash):
            world.clock.advance(seconds=5)
    deliver(world)
    assert fault.hits >= 1, f"{operation} #{occurrence} was never made"
    record = restore.show(deps, restore_id)[1]
    assert record["status"] == "ACTIVE", record
    assert record["settings_applied"] == ALL_SETTINGS and record["comparison"]["problems"] == []
    assert target_settings(world, world.target)["deletion_protection"] is True
    assert world.aws.alerts() == []


def test_a_point_in_time_restore_started_again_restores_to_the_point_its_request_resolved(
        world: World, client: Client) -> None:
    """The first RestoreTableToPointInTime refused (after every retry): the next poll starts it again, to the
    point the request named, or for ``latest_restorable`` the one resolved when it was asked for."""
    made: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        made.append(dict(params))

    earliest = world.deps.clients.dynamodb.describe_continuous_backups(TableName="orders")[
        "ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]["EarliestRestorableDateTime"]
    world.faults.inject("dynamodb.RestoreTableToPointInTime", "error", times=2 * ATTEMPTS)  # each first start
    events = world.deps.clients.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb.RestoreTableToPointInTime", record)
    try:
        _, named = post(client, {"table": "orders", "point_in_time": earliest.isoformat(), "target": world.target,
                                 "copy_settings": False})
        _, latest = post(client, {"table": "orders", "point_in_time": "latest_restorable",
                                  "target": f"{world.target}-2", "copy_settings": False})
        world.clock.advance(minutes=10)  # the source's latest restorable time moves on (on AWS)
        assert deliver(world) == ["requeued", "requeued", "active", "active"]
    finally:
        events.unregister("before-parameter-build.dynamodb.RestoreTableToPointInTime", record)
    for started in (named, latest):
        calls = [c for c in made if c["TargetTableName"] == started["target"]]
        assert len(calls) == ATTEMPTS + 1  # refused after every retry, then started again by the poll
        point = started["restored_from"]["point_in_time"]
        assert all("UseLatestRestorableTime" not in c and c["RestoreDateTime"].isoformat() == point for c in calls)
        assert shown(client, started["restore_id"])["restored_from"]["point_in_time"] == point


def test_a_restore_two_deliveries_settle_at_once_has_one_outcome_and_one_alert(world: World, client: Client) -> None:
    """SQS delivers a poll again while its first worker is still at it (the visibility timeout passed): both
    claim it (the same message), both find no table past the deadline; only the first settle counts and alerts."""
    deps, restore_id = world.deps, f"twice-{world.target}"
    world.faults.inject("dynamodb.RestoreTableFromBackup", "error", times=ATTEMPTS)  # the API's start: not yet
    post(client, {"table": "orders", "latest": True, "target": world.target, "restore_id": restore_id})
    [(body, _)] = world.aws.sent(deps.settings.backup_monitor_queue)
    world.clock.advance(minutes=deps.settings.backup_deadline_minutes + 1)
    twin: list[str] = []

    def redelivered(params: dict[str, Any], **_: Any) -> None:  # the twin runs whole before the first one settles
        if not twin and str(params.get("UpdateExpression", "")).startswith("SET #status = :status"):
            twin.append("running")
            twin[0] = monitor.check_run(deps, body, "m-1")

    events = deps.clients.dynamodb.meta.events
    events.register("before-parameter-build.dynamodb.UpdateItem", redelivered)
    try:
        first = monitor.check_run(deps, body, "m-1")
    finally:
        events.unregister("before-parameter-build.dynamodb.UpdateItem", redelivered)
    assert (first, twin) == ("failed", ["failed"])
    done = shown(client, restore_id)
    assert done["status"] == "FAILED" and "no restored table" in done["error"]
    [alert] = world.aws.alerts()
    assert alert["message"]["restore_id"] == restore_id


def test_a_failed_restore_whose_settle_answer_is_lost_still_sends_its_one_alert(world: World, client: Client) -> None:
    """The write that records FAILED applied, its answer lost: the retry finds its own write (not another
    delivery's) and alerts."""
    deps, restore_id = world.deps, f"lost-{world.target}"
    world.faults.inject("dynamodb.RestoreTableFromBackup", "error", times=ATTEMPTS)  # the API's start: not yet
    post(client, {"table": "orders", "latest": True, "target": world.target, "restore_id": restore_id})
    world.clock.advance(minutes=deps.settings.backup_deadline_minutes + 1)
    settle = world.faults.inject("dynamodb.UpdateItem", "lost",
                                 match=lambda p: str(p.get("UpdateExpression", "")).startswith("SET #status = :status"))
    assert deliver(world) == ["failed"]
    assert settle.hits == 1 and shown(client, restore_id)["status"] == "FAILED"
    [alert] = world.aws.alerts()
    assert alert["message"]["restore_id"] == restore_id


def source_table(w: World, name: str, tags: int = 1) -> str:
    """A table of this test only, in the selection, with ``tags`` tags and point-in-time recovery, backed up by
    this stage: its backup's ARN."""
    ddb = w.deps.clients.dynamodb
    ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
                     Tags=[{"Key": f"tag{i:02d}", "Value": f"v{i}"} for i in range(tags)])
    ddb.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
    use_settings(w.deps, backup_tables=(*w.deps.settings.backup_tables, name))
    return our_backup(w.deps, name, w.clock() - timedelta(minutes=1))


def every_tag(w: World, table: str) -> dict[str, str]:
    arn = w.deps.clients.dynamodb.describe_table(TableName=table)["Table"]["TableArn"]
    pages = w.deps.clients.dynamodb.get_paginator("list_tags_of_resource").paginate(ResourceArn=arn)
    return {t["Key"]: t["Value"] for page in pages for t in page["Tags"]}


def test_ten_requests_into_one_target_at_once_make_one_restore_the_others_are_refused(world: World) -> None:
    """Ten requests with different restore ids pass their checks (the target does not exist yet) before any of
    them records its restore: the target's name is claimed by one, the others get 409 naming it."""
    deps, answers = world.deps, list[tuple[int, str, str]]()
    bodies = [{"table": "orders", "latest": True, "target": world.target, "restore_id": f"race{i}-{world.target}"}
              for i in range(10)]
    waiting = list(bodies)

    def request() -> None:
        body = waiting.pop(0)
        try:
            answers.append((restore.start(deps, body)[0], str(body["restore_id"]), ""))
        except ApiError as exc:
            answers.append((exc.status, exc.field or "", exc.message))

    def the_next_one_first(**_: Any) -> None:  # each request's first write waits for the next request's
        if waiting:
            request()

    events = deps.clients.dynamodb.meta.events
    events.register("before-call.dynamodb.TransactWriteItems", the_next_one_first)
    try:
        request()
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", the_next_one_first)
    [(_, winner, _)] = [a for a in answers if a[0] == 202]
    refused = [a for a in answers if a[0] != 202]
    assert len(refused) == 9 and all(a[:2] == (409, "target") and repr(winner) in a[2] for a in refused), answers
    assert world.faults.calls["dynamodb.RestoreTableFromBackup"] == 1
    assert deliver(world) == ["active"]
    assert restore.show(deps, winner)[1]["status"] == "ACTIVE"
    assert [b["restore_id"] for b in bodies if RestoreStore(deps).get(str(b["restore_id"])) is not None] == [winner]


def test_a_target_whose_restore_failed_without_a_table_may_be_claimed_again(world: World, client: Client) -> None:
    deps, own = world.deps, boto3.client("dynamodb", region_name=world.deps.settings.region)
    arn = our_backup(deps, "orders", world.clock() - timedelta(minutes=1))

    def retention_deletes_it(**_: Any) -> None:
        own.delete_backup(BackupArn=arn)

    events = deps.clients.dynamodb.meta.events
    events.register("before-call.dynamodb.RestoreTableFromBackup", retention_deletes_it)
    try:
        status, first = post(client, {"table": "orders", "backup_arn": arn, "target": world.target})
    finally:
        events.unregister("before-call.dynamodb.RestoreTableFromBackup", retention_deletes_it)
    assert (status, first["status"]) == (202, "FAILED")
    status, again = post(client, {"table": "orders", "latest": True, "target": world.target})
    assert status == 202 and again["status"] == "RESTORING", again
    deliver(world)
    assert shown(client, again["restore_id"])["status"] == "ACTIVE"
    world.aws.alerts()


def test_a_restore_id_two_requests_record_at_once_is_recorded_once(world: World) -> None:
    deps = world.deps
    body = {"table": "orders", "latest": True, "target": world.target, "restore_id": f"twin-{world.target}"}
    inner: list[tuple[int, dict[str, Any]]] = []

    def the_twin_first(**_: Any) -> None:
        if not inner:
            inner.append((0, {}))
            inner[0] = restore.start(deps, body)

    events = deps.clients.dynamodb.meta.events
    events.register("before-call.dynamodb.TransactWriteItems", the_twin_first)
    try:
        outer = restore.start(deps, body)
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", the_twin_first)
    assert outer == inner[0] and outer[0] == 202
    assert world.faults.calls["dynamodb.RestoreTableFromBackup"] == 1
    assert deliver(world).count("active") == 1


def test_an_old_poll_message_never_starts_a_second_chain_while_the_restore_is_restoring(
        world: World, client: Client) -> None:
    deps, restore_id = world.deps, f"old-{world.target}"
    world.faults.inject("dynamodb.RestoreTableFromBackup", "error", times=ATTEMPTS)  # the API's start: not yet
    post(client, {"table": "orders", "latest": True, "target": world.target, "restore_id": restore_id})
    [(first, _)] = world.aws.sent(deps.settings.backup_monitor_queue)
    assert monitor.check_run(deps, first, "m-1") == "requeued"  # it starts the restore: polled again later
    [(second, _)] = world.aws.sent(deps.settings.backup_monitor_queue)
    assert shown(client, restore_id)["status"] == "RESTORING"
    assert monitor.check_run(deps, first, "m-2") == "duplicate"  # another delivery of the first poll's message
    assert world.aws.sent(deps.settings.backup_monitor_queue) == []
    assert shown(client, restore_id)["status"] == "RESTORING"
    assert monitor.check_run(deps, second, "m-3") == "active"
    assert world.faults.calls["dynamodb.RestoreTableFromBackup"] == ATTEMPTS + 1


def test_every_page_of_the_sources_tags_is_copied(world: World, client: Client) -> None:
    source = f"ledger-{world.target.rsplit('-', 1)[-1]}"
    source_table(world, source, tags=23)  # ListTagsOfResource answers 10 a page (moto, as AWS may): three pages
    pages: list[int] = []
    events = world.deps.clients.dynamodb.meta.events
    record = lambda parsed, **_: pages.append(len(parsed.get("Tags", [])))  # noqa: E731
    events.register("after-call.dynamodb.ListTagsOfResource", record)
    try:
        status, started = post(client, {"table": source, "latest": True, "target": f"{source}-restored-1"})
        assert status == 202
        assert deliver(world) == ["active"]
    finally:
        events.unregister("after-call.dynamodb.ListTagsOfResource", record)
    assert pages[:3] == [10, 10, 3]
    assert every_tag(world, f"{source}-restored-1") == every_tag(world, source) and len(every_tag(world, source)) == 23
    assert shown(client, started["restore_id"])["source_settings"]["tags"] == every_tag(world, source)


def test_a_restore_whose_source_was_deleted_says_its_settings_were_skipped_and_alerts_once(
        world: World, client: Client) -> None:
    deps, source = world.deps, f"gone-{world.target.rsplit('-', 1)[-1]}"
    source_table(world, source)
    status, started = post(client, {"table": source, "latest": True, "target": f"{source}-restored-1"})
    assert status == 202
    deps.clients.dynamodb.delete_table(TableName=source)
    publish = world.faults.inject("sns.Publish", "error", times=ATTEMPTS)  # the alert cannot go the first time
    outcomes = deliver(world)
    assert publish.hits == ATTEMPTS and outcomes[-1] == "active" and outcomes.count("active") == 1, outcomes
    done = shown(client, started["restore_id"])
    assert done["status"] == "ACTIVE" and done["settings_applied"] == []
    assert f"the source table {source!r} no longer exists" in done["settings_skipped"]
    [alert] = world.aws.alerts()
    assert alert["message"]["restore_id"] == started["restore_id"]
    assert alert["message"]["reason"] == done["settings_skipped"] and "without the source's settings" in alert["subject"]
    body = json.dumps({"restore_id": started["restore_id"], "poll": 0})
    assert monitor.check_run(deps, body, uuid.uuid4().hex) == "duplicate"  # a redelivery: no second alert
    assert world.aws.alerts() == []
