"""Exports to S3 on a schedule, followed by the monitor (chalicelib/backups/exports.py), against moto."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import export_rules, exports, monitor
from chalicelib.backups.export_store import ExportRun, ExportStore
from chalicelib.settings import Calendar
from tests.faults import Faults
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.backup_support import create_tables
from tests.functional.export_support import BUCKET, export_polls, export_stage, finish_exports, moto_exports


def _poll(deps: Deps, run_id: str, number: int) -> str:
    return monitor.check_run(deps, json.dumps({"export_run": run_id, "poll": number}), f"m-{number}")


def test_a_scheduled_export_goes_to_the_stage_prefix_with_a_token_of_table_and_time_and_the_monitor_follows_it(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders"], export_bucket_owner="210987654321")
    at = clock.now.replace(microsecond=0)

    run = exports.start(deps, at)

    (made,) = moto_exports(deps).values()
    assert (made.s3_bucket, made.s3_prefix) == (BUCKET, f"timekeeper-test/orders/{run.run_id}")
    assert made.account_id == "210987654321"  # S3BucketOwner reached the call
    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "IN_PROGRESS" and record.export_arn == made.arn
    assert export_polls(aws, deps) == [{"export_run": run.run_id, "poll": 0}]
    assert export_rules.client_token("orders", at) == export_rules.client_token("orders", at)
    assert export_rules.client_token("orders", at) != export_rules.client_token("orders", at + timedelta(seconds=1))
    assert export_rules.client_token("orders", at) != export_rules.client_token("users", at)


def test_a_table_without_pitr_is_refused_with_one_alert_naming_it_even_when_the_schedule_fires_twice(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders", "users"], pitr=["orders"])
    at = clock.now.replace(microsecond=0)

    exports.start(deps, at)
    exports.start(deps, at)  # the scheduled event delivered twice

    assert len(moto_exports(deps)) == 1  # the second delivery made no second export of orders
    record = ExportStore(deps).get("users", export_rules.export_time_label(at))
    assert record is not None and record.status == "REFUSED" and "point-in-time recovery is off" in record.error
    alerts = aws.alerts()
    assert [a["subject"] for a in alerts] == ["timekeeper: export of users refused"]
    assert alerts[0]["message"]["table"] == "users"


def test_a_lost_export_answer_never_makes_a_second_export(aws: Aws, deps: Deps, clock: FakeClock,
                                                          faults: Faults) -> None:
    export_stage(deps, ["orders"])
    faults.inject("dynamodb.ExportTableToPointInTime", "lost")

    run = exports.start(deps, clock.now.replace(microsecond=0))

    assert len(moto_exports(deps)) == 1  # found by its prefix before the call was tried again
    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.export_arn == next(iter(moto_exports(deps)))


def test_a_bucket_that_refuses_the_exports_fails_them_with_one_alert_naming_the_bucket(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders", "users"], make_bucket=False)
    run = exports.start(deps, clock.now.replace(microsecond=0))
    finish_exports(deps)

    assert _poll(deps, run.run_id, 0) == "complete"

    store = ExportStore(deps)
    for table in ("orders", "users"):
        record = store.get(table, run.run_id)
        assert record is not None and record.status == "FAILED" and record.failure_code == "S3NoSuchBucket"
    assert [a["subject"] for a in aws.alerts()] == [f"timekeeper: exports refused by bucket {BUCKET}"]


def test_the_same_monitor_message_twice_is_one_poll(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders"])
    run = exports.start(deps, clock.now.replace(microsecond=0))
    export_polls(aws, deps)
    made = next(iter(moto_exports(deps).values()))
    made.join(timeout=10)
    made.status = "IN_PROGRESS"  # still running, as far as DescribeExport tells

    assert _poll(deps, run.run_id, 0) == "requeued"
    assert _poll(deps, run.run_id, 0) == "duplicate"

    assert export_polls(aws, deps) == [{"export_run": run.run_id, "poll": 1}]
    for unknown in ("20200101T000000Z", "not-a-run"):  # a message naming no run: dead-lettered, not a duplicate
        assert _poll(deps, unknown, 0) == "dead-lettered"
    assert len(aws.sent(deps.settings.backup_monitor_dlq)) == 2


@pytest.mark.parametrize(("what", "status"), [("vanished", "VANISHED"), ("stuck", "STUCK")])
def test_an_export_that_vanishes_or_is_stuck_past_its_deadline_is_alerted_once(
        aws: Aws, deps: Deps, clock: FakeClock, what: str, status: str) -> None:
    export_stage(deps, ["orders"])
    run = exports.start(deps, clock.now.replace(microsecond=0))
    made = next(iter(moto_exports(deps).values()))
    made.join(timeout=10)
    if what == "vanished":
        del moto_exports(deps)[made.arn]
    else:
        made.status = "IN_PROGRESS"
        clock.advance(minutes=deps.settings.export_deadline_minutes + 1)

    assert _poll(deps, run.run_id, 0) == "complete"
    assert _poll(deps, run.run_id, 1) == "duplicate"  # the run is complete: nothing more to claim

    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == status
    assert [a["subject"] for a in aws.alerts()] == [f"timekeeper: export of orders {status.lower()}"]


def test_an_export_completes_with_its_item_count_and_size_and_the_catalog_and_run_view_show_it_beside_the_backups(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    export_stage(deps, ["orders", "users"], pitr=["orders"])  # users: REFUSED (no PITR)
    run = exports.start(deps, clock.now.replace(microsecond=0))
    export_polls(aws, deps)
    aws.alerts()
    finish_exports(deps)

    assert _poll(deps, run.run_id, 0) == "complete"

    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "COMPLETED"
    assert record.item_count == 2 and record.size_bytes > 0
    assert export_polls(aws, deps) == [] and aws.alerts() == []

    for path in ("/backups?table=orders", "/backups"):  # the table's exports; the newest run's
        page = client.http.get(path).json_body
        shown = next(e for e in page["exports"] if e["table"] == "orders")
        assert shown["status"] == "COMPLETED" and shown["item_count"] == 2 and shown["size_bytes"] > 0
        assert shown["location"] == f"s3://{BUCKET}/timekeeper-test/orders/{run.run_id}/"
        assert shown["kept_because"] == ["last_good", "age"]  # why it is kept (the newest), no expiry while it is
    listed = client.http.get("/backups/runs").json_body  # the run view: the export runs beside the backup runs
    assert listed["runs"] == [] and [r["run_id"] for r in listed["export_runs"]] == [run.run_id]
    assert listed["export_runs"][0]["href"] == f"/backups/runs/{run.run_id}"
    view = client.http.get(f"/backups/runs/{run.run_id}").json_body
    assert view["kind"] == "export" and view["status"] == "COMPLETE"
    assert {e["table"]: e["status"] for e in view["exports"]} == {"orders": "COMPLETED", "users": "REFUSED"}
    assert view["summary"] == {"exports": 2, "started": 1, "in_progress": 0, "completed": 1, "failed": 1,
                               "item_count": 2, "size_bytes": record.size_bytes}
    assert client.http.get("/backups/runs/20200101T000000Z").status_code == 404


def _export_days(aws: Aws, deps: Deps, clock: FakeClock, days: int) -> list[str]:
    """One export run a day for ``days`` days, each followed to its end (and its retention)."""
    run_ids = []
    for _ in range(days):
        run = exports.start(deps, clock.now.replace(microsecond=0))
        finish_exports(deps)
        assert _poll(deps, run.run_id, 0) == "complete"
        run_ids.append(run.run_id)
        clock.advance(days=1)
    return run_ids


def _keys(deps: Deps, prefix: str) -> list[str]:
    versions = deps.clients.s3.list_object_versions(Bucket=BUCKET, Prefix=prefix)
    return [v["Key"] for v in versions.get("Versions", [])]


def test_retention_deletes_expired_exports_objects_under_the_stage_prefix_only_and_keeps_the_newest(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders"], backup_retention_days=2, backup_min_keep=1)
    deps.clients.s3.put_object(Bucket=BUCKET, Key="someone-else/orders/keep.json", Body=b"{}")

    run_ids = _export_days(aws, deps, clock, 4)

    store = ExportStore(deps)
    records = {r: store.get("orders", r) for r in run_ids}
    assert [records[r].deleted for r in run_ids] == [True, False, False, False]  # type: ignore[union-attr]
    assert _keys(deps, f"timekeeper-test/orders/{run_ids[0]}/") == []
    assert len(_keys(deps, f"timekeeper-test/orders/{run_ids[3]}/")) == 3  # manifests and data
    assert _keys(deps, "someone-else/") == ["someone-else/orders/keep.json"]
    newest, older = records[run_ids[3]], records[run_ids[1]]
    assert newest is not None and newest.kept_because == ["last_good", "age"] and not newest.expires  # while newest
    assert older is not None and older.kept_because == ["age"]
    assert older.expires == (older.export_time + timedelta(days=2)).isoformat()


def test_a_locked_bucket_gets_each_exports_objects_locked_to_its_planned_expiry_and_the_lock_keeps_them_longer(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders"], make_bucket=False, backup_retention_days=1, backup_min_keep=1)
    deps.clients.s3.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
    deps.clients.s3.put_object_lock_configuration(Bucket=BUCKET, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled"})
    use_settings(deps, backup_retention=Calendar(weekly=1))  # an export kept a week at most: locked a week

    run_ids = _export_days(aws, deps, clock, 3)

    first = ExportStore(deps).get("orders", run_ids[0])
    assert first is not None and not first.deleted
    assert first.kept_because == ["lock"]  # the rules expire it, its lock keeps it
    assert first.locked_until == (first.export_time + timedelta(weeks=1)).isoformat()
    versions = deps.clients.s3.list_object_versions(Bucket=BUCKET, Prefix=f"timekeeper-test/orders/{run_ids[0]}/")
    for version in versions["Versions"]:  # every object of the export is still there, locked
        from moto.s3.models import s3_backends
        (kept,) = [k for k in s3_backends[ACCOUNT]["aws"].buckets[BUCKET].keys.getlist(version["Key"])
                   if k.version_id == version["VersionId"]]
        assert (kept.lock_mode, kept.lock_until) == ("GOVERNANCE", first.locked_until.replace("+00:00", "Z"))


def _completed_export(aws: Aws, deps: Deps, clock: FakeClock) -> str:
    export_stage(deps, ["orders"], backup_tables=("orders",))
    run = exports.start(deps, clock.now.replace(microsecond=0))
    finish_exports(deps)
    assert _poll(deps, run.run_id, 0) == "complete"
    return run.run_id


def _restore_from(client: Client, deps: Deps, export: str) -> dict[str, Any]:
    response = client.http.post("/backups/restores", headers={"Content-Type": "application/json"}, body=json.dumps({
        "table": "orders", "target": "orders-restored-1", "export": export, "restore_id": "from-export"}))
    assert response.status_code == 202, response.body
    from moto.dynamodb.models import dynamodb_backends
    for made in dynamodb_backends[ACCOUNT][deps.settings.region].table_imports.values():
        made.join(timeout=10)
    assert monitor.check_run(deps, json.dumps({"restore_id": "from-export", "poll": 0}), "r-0") == "active"
    body: dict[str, Any] = client.http.get("/backups/restores/from-export").json_body
    return body


@pytest.mark.parametrize("lost", [False, True])
def test_a_restore_from_an_export_imports_it_into_a_new_table_with_the_sources_settings_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, faults: Faults, lost: bool) -> None:
    run_id = _completed_export(aws, deps, clock)
    if lost:  # ImportTable applied, its answer lost: the next poll finds the table; no second table, no second copy
        faults.inject("dynamodb.ImportTable", "lost")

    restore = _restore_from(client, deps, run_id)

    assert restore["status"] == "ACTIVE" and restore["restored_from"]["from"] == "export"
    assert restore["comparison"]["compared_with"] == "export"
    assert restore["comparison"]["recorded_items"] == restore["comparison"]["restored_items"] == 2
    assert "pitr" in restore["settings_applied"]  # re-applied from the source, as a backup restore does
    tables = deps.clients.dynamodb.list_tables()["TableNames"]
    assert tables.count("orders-restored-1") == 1
    from moto.dynamodb.models import dynamodb_backends
    imports = dynamodb_backends[ACCOUNT][deps.settings.region].table_imports.values()
    assert [i.status for i in imports] == ["COMPLETED"]  # one import (its ClientToken) whatever was lost


def test_an_export_to_a_locked_bucket_in_another_region_than_the_table_is_made_followed_locked_and_restored(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    import boto3

    # the bucket's owner named (S3BucketOwner, ExpectedBucketOwner on every S3 call), as for another account's
    export_stage(deps, ["orders"], make_bucket=False, backup_tables=("orders",), export_bucket_owner=ACCOUNT)
    assert deps.settings.region != "eu-west-1"
    elsewhere = boto3.client("s3", region_name="eu-west-1")
    elsewhere.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"},
                            ObjectLockEnabledForBucket=True)
    elsewhere.put_object_lock_configuration(Bucket=BUCKET, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    run = exports.start(deps, clock.now.replace(microsecond=0))
    finish_exports(deps)

    assert _poll(deps, run.run_id, 0) == "complete"  # followed: DescribeExport, its manifests read, locked

    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "COMPLETED" and record.item_count == 2 and record.locked_until
    keys = elsewhere.list_objects_v2(Bucket=BUCKET, Prefix=f"timekeeper-test/orders/{run.run_id}/")["Contents"]
    assert len(keys) == 3  # manifests and data, in the bucket's own region
    restore = _restore_from(client, deps, run.run_id)
    assert restore["status"] == "ACTIVE" and restore["comparison"]["restored_items"] == 2


def test_a_restore_names_an_export_that_exists_or_is_refused_naming_the_field(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _completed_export(aws, deps, clock)
    response = client.http.post("/backups/restores", headers={"Content-Type": "application/json"}, body=json.dumps({
        "table": "orders", "target": "orders-restored-1", "export": "20200101T000000Z"}))
    assert response.status_code == 400 and response.json_body["field"] == "export", response.body


def test_a_completed_export_whose_manifests_disagree_with_its_count_fails_with_one_alert(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders"])
    run = exports.start(deps, clock.now.replace(microsecond=0))
    finish_exports(deps)
    (summary,) = [k for k in _keys(deps, "timekeeper-test/orders/") if k.endswith("manifest-summary.json")]
    written = json.loads(deps.clients.s3.get_object(Bucket=BUCKET, Key=summary)["Body"].read())
    deps.clients.s3.put_object(Bucket=BUCKET, Key=summary, Body=json.dumps({**written, "itemCount": 1}).encode())

    assert _poll(deps, run.run_id, 0) == "complete"

    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "FAILED" and "manifest counts disagree" in record.error
    assert [a["subject"] for a in aws.alerts()] == ["timekeeper: export of orders failed"]


def test_an_export_the_accounts_quota_refuses_is_deferred_and_started_by_the_next_poll_without_an_alert(
        aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    export_stage(deps, ["orders"])
    faults.inject("dynamodb.ExportTableToPointInTime", "error", code="LimitExceededException")
    run = exports.start(deps, clock.now.replace(microsecond=0))
    deferred = ExportStore(deps).get("orders", run.run_id)
    assert deferred is not None and deferred.status == "PENDING" and not moto_exports(deps)

    first = _poll(deps, run.run_id, 0)  # started now (300 exports at once an account), followed from here
    assert len(moto_exports(deps)) == 1
    if first == "requeued":  # moto's export thread had not finished when the poll described it
        finish_exports(deps)
        first = _poll(deps, run.run_id, 1)
    assert first == "complete"

    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "COMPLETED" and aws.alerts() == []


def test_a_trigger_that_died_before_recording_some_exports_is_finished_by_the_monitor_and_a_dead_chain_resumed(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    export_stage(deps, ["orders", "users"])
    at = clock.now.replace(microsecond=0)
    store = ExportStore(deps)
    store.create_run(ExportRun(run_id=export_rules.export_time_label(at), export_time=at, tables=["orders", "users"]))
    store.claim_poll(export_rules.export_time_label(at), 0)  # poll 0 claimed, then its worker died: no poll 1 sent

    clock.advance(hours=1)  # within EXPORT_DEADLINE_MINUTES
    exports.start(deps, clock.now.replace(microsecond=0))  # the next run sends the dead chain's poll again
    polls = export_polls(aws, deps)
    assert {"export_run": export_rules.export_time_label(at), "poll": 1} in polls

    first = _poll(deps, export_rules.export_time_label(at), 1)  # its tables' exports, never recorded: made now
    finish_exports(deps)
    if first == "requeued":
        first = _poll(deps, export_rules.export_time_label(at), 2)
    assert first == "complete"
    for table in ("orders", "users"):
        record = store.get(table, export_rules.export_time_label(at))
        assert record is not None and record.status == "COMPLETED"


def test_make_run_provisions_the_stages_export_bucket_with_object_lock_once_and_pitr_on_its_tables(
        aws: Aws, deps: Deps) -> None:
    from local.stage import enable_export_pitr, ensure_export_bucket

    assert ensure_export_bucket(deps.clients, deps.settings) is None  # no EXPORT_BUCKET: no bucket
    create_tables(deps, ["sample-orders"])
    use_settings(deps, export_bucket="timekeeper-local-exports", export_tables=("sample-orders", "not-made"))
    for _ in range(2):  # a restart against the same moto keeps the bucket
        assert ensure_export_bucket(deps.clients, deps.settings) == "timekeeper-local-exports"
    lock = deps.clients.s3.get_object_lock_configuration(Bucket="timekeeper-local-exports")
    assert lock["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled"
    assert enable_export_pitr(deps.clients, deps.settings) == ["sample-orders"]  # an export needs it
    pitr = deps.clients.dynamodb.describe_continuous_backups(TableName="sample-orders")["ContinuousBackupsDescription"]
    assert pitr["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
