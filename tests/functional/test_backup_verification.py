"""Restore verification (BACKUP_VERIFY) and the point-in-time recovery report, driven as AWS drives the app:
the scheduled trigger, then every monitor message delivered after its delay through Chalice's test client."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import trigger
from chalicelib.backups.store import COMPLETE, Run, RunStore
from chalicelib.backups.verify_rules import restore_table_name
from chalicelib.settings import BackupVerify
from tests import events
from tests.faults import Faults
from tests.fixtures import Aws, Emitted, FakeClock, use_settings
from tests.functional.backup_support import CallCounter, monitor_messages, moto_backups

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

TABLES = ("orders", "users")
ITEMS = 5


def _tables(deps: Deps, names: tuple[str, ...] = TABLES, items: int = ITEMS) -> None:
    """Tables with a sort key, a GSI and ``items`` items each."""
    client = deps.clients.dynamodb
    for name in names:
        client.create_table(
            TableName=name, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("PK", "SK", "status")],
            GlobalSecondaryIndexes=[{"IndexName": "by-status", "KeySchema": [
                {"AttributeName": "status", "KeyType": "HASH"}], "Projection": {"ProjectionType": "ALL"}}])
        for i in range(items):
            client.put_item(TableName=name, Item={"PK": {"S": f"p{i}"}, "SK": {"S": "x"}, "status": {"S": "new"}})


def _run_day(aws: Aws, deps: Deps, clock: FakeClock, client: Client,
             between: Callable[[], None] | None = None, duplicate: bool = False) -> Run:
    """The scheduled trigger, then each monitor message after its delay (``duplicate``: each delivered
    twice, as SQS may), ``between`` called after each delivery, until the queue is empty."""
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    [run] = RunStore(deps).recent(1, with_tables=False)
    sent = 0
    for _ in range(40):
        messages = monitor_messages(aws, deps) + monitor_messages(aws, deps, watches=True)
        if not messages:
            break
        for body, delay in messages:
            sent += 1
            clock.advance(seconds=delay)
            for _ in range(2 if duplicate else 1):
                client.lambda_.invoke("backup_monitor", events.sqs_event(
                    events.sqs_record(body, deps.settings.backup_monitor_queue, f"m-{sent}")))
            if between is not None:
                between()
    found = RunStore(deps).get(run.run_id)
    assert found is not None
    return found


def _table_names(deps: Deps) -> set[str]:
    return set(deps.clients.dynamodb.list_tables()["TableNames"])


def _restores(deps: Deps) -> set[str]:
    """The stage's temporary restore tables that exist now."""
    return {t for t in _table_names(deps) if t.startswith(f"{deps.settings.backup_name_prefix}.verify.")}


@pytest.fixture
def verifying(aws: Aws, deps: Deps) -> Deps:
    _tables(deps)
    return use_settings(deps, backup_tables=TABLES, backup_verify=BackupVerify(sample=1))


def test_a_run_restores_its_sample_compares_it_deletes_the_restore_and_counts_it(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client, emitted: Emitted) -> None:
    run = _run_day(aws, verifying, clock, client)
    assert (emitted.total("BackupsVerified"), emitted.total("BackupVerificationsFailed")) == (1, 0)

    assert run.status == COMPLETE and run.verify_plan == ["orders"]
    [verification] = run.verifications.values()
    assert verification.status == "PASSED" and verification.problems == []
    assert (verification.recorded_items, verification.restored_items, verification.scan_complete) == (ITEMS, ITEMS, True)
    assert verification.restore_table == restore_table_name(verifying.settings.backup_name_prefix, run.run_id, "orders")
    assert verification.table_deleted and _restores(verifying) == set()
    assert run.summary["verified"] == 1 and run.summary["verify_failed"] == 0
    assert [a["message"].get("kind") for a in aws.alerts()] == ["summary"]

    shown = client.http.get(f"/backups/runs/{run.run_id}").json_body
    assert shown["status"] == COMPLETE and shown["verify_plan"] == ["orders"]
    assert shown["verifications"] == [{
        "table": "orders", "status": "PASSED", "backup_arn": run.tables["orders"].backup_arn,
        "restore_table": verification.restore_table, "started_at": verification.started_at, "error": None,
        "problems": [], "recorded_items": ITEMS, "restored_items": ITEMS, "scan_complete": True,
        "restore_table_deleted": True}]


def test_the_sample_rotates_so_the_next_run_verifies_the_next_table(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client) -> None:
    first = _run_day(aws, verifying, clock, client)
    clock.advance(days=1)
    second = _run_day(aws, verifying, clock, client)
    clock.advance(days=1)
    third = _run_day(aws, verifying, clock, client)

    assert [first.verify_plan, second.verify_plan, third.verify_plan] == [["orders"], ["users"], ["orders"]]
    assert all(r.summary["verified"] == 1 for r in (first, second, third))


def test_a_restore_with_fewer_items_fails_its_verification_with_one_alert_and_is_deleted(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client, emitted: Emitted) -> None:
    corrupted: list[str] = []

    def corrupt_the_restore() -> None:  # between the restore and the comparison, as a broken restore would be
        for name in _restores(verifying):
            if not corrupted:
                for i in range(2):
                    verifying.clients.dynamodb.delete_item(TableName=name, Key={"PK": {"S": f"p{i}"}, "SK": {"S": "x"}})
                corrupted.append(name)

    run = _run_day(aws, verifying, clock, client, between=corrupt_the_restore, duplicate=True)

    [verification] = run.verifications.values()
    assert corrupted == [verification.restore_table]
    assert verification.status == "FAILED"
    assert verification.problems == [f"restored {ITEMS - 2} items, the backup recorded {ITEMS}"]
    assert verification.table_deleted and _restores(verifying) == set()
    assert run.status == COMPLETE and run.summary["verify_failed"] == 1 and run.summary["verified"] == 0
    alerts = [a["message"] for a in aws.alerts() if a["message"].get("kind") != "summary"]
    assert len(alerts) == 1  # each message was delivered twice: still one alert
    assert (emitted.total("BackupsVerified"), emitted.total("BackupVerificationsFailed")) == (0, 1)  # and one count
    assert alerts[0]["subject"] == "timekeeper: restore verification of orders failed"
    assert alerts[0]["reason"] == verification.error and alerts[0]["restored_items"] == ITEMS - 2
    shown = client.http.get(f"/backups/runs/{run.run_id}").json_body
    assert shown["verifications"][0]["status"] == "FAILED"


def test_a_backup_that_cannot_be_restored_fails_its_verification_with_an_alert(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client) -> None:
    def vanish_the_backup() -> None:  # after the backups settle, before the restore
        run = RunStore(verifying).recent(1)[0]
        arn = run.tables["orders"].backup_arn
        if run.status == "VERIFYING" and not run.verifications and arn in moto_backups(verifying):
            del moto_backups(verifying)[arn]

    run = _run_day(aws, verifying, clock, client, between=vanish_the_backup)

    [verification] = run.verifications.values()
    assert verification.status == "FAILED" and verification.error.startswith("restore refused: BackupNotFoundException")
    assert run.status == COMPLETE and run.summary["verify_failed"] == 1
    [alert] = [a["message"] for a in aws.alerts() if a["message"].get("kind") != "summary"]
    assert alert["subject"] == "timekeeper: restore verification of orders failed"


def test_a_restore_still_creating_past_the_deadline_fails_and_its_table_is_deleted(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.dynamodb.models.table import RestoredTable  # moto's restores are ACTIVE at once; AWS's take time

    described = RestoredTable.describe

    def creating(self: Any, base_key: str = "TableDescription") -> dict[str, Any]:
        out: dict[str, Any] = described(self, base_key)
        out[base_key]["TableStatus"] = "CREATING"
        return out

    monkeypatch.setattr(RestoredTable, "describe", creating)
    use_settings(verifying, backup_deadline_minutes=15)

    run = _run_day(aws, verifying, clock, client)

    [verification] = run.verifications.values()
    assert verification.status == "FAILED" and verification.error == "restore still in progress after 15 minutes"
    assert verification.table_deleted and _restores(verifying) == set()
    assert run.status == COMPLETE and run.summary["verify_failed"] == 1
    [alert] = [a["message"] for a in aws.alerts() if a["message"].get("kind") != "summary"]
    assert alert["reason"] == verification.error


def test_restores_refused_for_the_accounts_limit_are_tried_again_until_the_deadline(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client, faults: Faults) -> None:
    use_settings(verifying, backup_deadline_minutes=15)
    refused = faults.inject("dynamodb.RestoreTableFromBackup", "error", code="LimitExceededException", times=1000)

    run = _run_day(aws, verifying, clock, client)

    [verification] = run.verifications.values()
    assert verification.status == "FAILED"
    assert verification.error == "no restored table 15 minutes after the verification started"
    assert refused.hits > 1 and run.status == COMPLETE and _restores(verifying) == set()


def test_a_listed_table_without_a_good_backup_is_skipped_not_restored(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _tables(deps, ("orders",))
    use_settings(deps, backup_tables=("orders", "gone"), backup_verify=BackupVerify(tables=("gone", "orders")))

    run = _run_day(aws, deps, clock, client)

    assert {t: v.status for t, v in run.verifications.items()} == {"gone": "SKIPPED", "orders": "PASSED"}
    assert run.status == COMPLETE and run.summary["verify_skipped"] == 1 and run.summary["verified"] == 1


def test_without_backup_verify_a_run_completes_as_before(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _tables(deps)
    use_settings(deps, backup_tables=TABLES)

    run = _run_day(aws, deps, clock, client)

    assert run.status == COMPLETE and run.verify_plan == [] and run.verifications == {}
    assert "verified" not in run.summary and _restores(deps) == set()


def test_the_next_trigger_deletes_restore_tables_a_dead_verification_left_and_only_those(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client) -> None:
    run = _run_day(aws, verifying, clock, client)
    prefix = verifying.settings.backup_name_prefix
    backup = run.tables["users"].backup_arn
    client_ddb = verifying.clients.dynamodb
    left = restore_table_name(prefix, run.run_id, "users")  # its run is COMPLETE: nobody will delete it
    client_ddb.restore_table_from_backup(TargetTableName=left, BackupArn=backup)
    lookalike = restore_table_name(prefix, run.run_id, "lookalike")  # a name like ours, not a restore: kept
    _tables(verifying, (lookalike,), items=0)
    clock.advance(days=1)

    trigger.start_run(verifying, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert left not in _table_names(verifying) and lookalike in _table_names(verifying)


def test_a_verifying_runs_restore_table_is_left_to_its_run(
        aws: Aws, verifying: Deps, clock: FakeClock, client: Client) -> None:
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    [body] = [b for b, _ in monitor_messages(aws, verifying)]
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, verifying.settings.backup_monitor_queue, "m-1")))  # backups settled: VERIFYING
    [body] = [b for b, _ in monitor_messages(aws, verifying)]
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, verifying.settings.backup_monitor_queue, "m-2")))  # the restore started
    [restored] = _restores(verifying)
    clock.advance(minutes=10)

    trigger.start_run(verifying, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert restored in _table_names(verifying)


# --- point-in-time recovery --------------------------------------------------------------------------

def _pitr_tables(deps: Deps) -> None:
    _tables(deps)
    deps.clients.dynamodb.update_continuous_backups(
        TableName="orders", PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})


def test_with_backup_require_pitr_the_run_reports_point_in_time_recovery_of_every_table(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _pitr_tables(deps)
    use_settings(deps, backup_tables=TABLES, backup_require_pitr=True)

    run = _run_day(aws, deps, clock, client)

    assert {t: r.pitr for t, r in run.tables.items()} == {"orders": "ENABLED", "users": "DISABLED"}
    assert run.summary["pitr_off"] == 1 and run.summary["pitr_read"] == 2
    shown = client.http.get(f"/backups/runs/{run.run_id}").json_body
    assert {t["table"]: t["pitr"] for t in shown["tables"]} == {"orders": "enabled", "users": "disabled"}


def test_without_backup_require_pitr_a_week_of_runs_reads_each_table_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _pitr_tables(deps)
    use_settings(deps, backup_tables=TABLES)
    reads = CallCounter().watch(deps.clients.dynamodb)
    read: dict[str, str] = {}
    for _ in range(7):
        before = reads.count("dynamodb:DescribeContinuousBackups")
        run = trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))
        assert reads.count("dynamodb:DescribeContinuousBackups") - before <= 1  # ceil(2 tables / 7)
        shown = client.http.get(f"/backups/runs/{run.run_id}").json_body
        for table in shown["tables"]:
            if table["pitr"] is not None:
                assert table["table"] not in read  # once a week
                read[table["table"]] = table["pitr"]
        clock.advance(days=1)

    assert read == {"orders": "enabled", "users": "disabled"}
    assert aws.alerts() == []  # not required: no alert


def test_backup_require_pitr_alerts_once_a_run_for_the_tables_without_it(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _pitr_tables(deps)
    use_settings(deps, backup_tables=TABLES, backup_require_pitr=True)

    run = _run_day(aws, deps, clock, client, duplicate=True)

    alerts: list[dict[str, Any]] = [a["message"] for a in aws.alerts() if a["message"].get("kind") != "summary"]
    assert len(alerts) == 1
    assert alerts[0]["subject"] == "timekeeper: 1 backed-up tables without point-in-time recovery"
    assert alerts[0]["tables"] == ["users"] and alerts[0]["run_id"] == run.run_id
    assert json.loads(json.dumps(run.summary))["pitr_off"] == 1
    clock.advance(minutes=1)
    assert timedelta(0) < clock.now - run.started_at
