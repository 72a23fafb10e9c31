"""Incremental exports between full ones (EXPORT_FULL_HOURS), followed by the monitor, and restores through their
chain (chalicelib/backups/exports.py, restore.py, restore_chain.py), against moto with its export correction."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import export_rules, exports, monitor
from chalicelib.backups.export_store import ExportRun, ExportStore
from tests.faults import Faults
from tests.fixtures import ACCOUNT, Aws, FakeClock
from tests.functional.export_support import BUCKET, export_stage, finish_exports, moto_exports


def _run(deps: Deps, clock: FakeClock, settle: bool = True) -> ExportRun:
    """An export run at the clock's time, followed by the monitor to its end (``settle``)."""
    run = exports.start(deps, clock.now.replace(microsecond=0))
    if settle:
        finish_exports(deps)
        assert monitor.check_run(deps, json.dumps({"export_run": run.run_id, "poll": 0}), f"{run.run_id}-0") \
            == "complete"
    return run


def _lines(deps: Deps, run_id: str) -> list[dict[str, Any]]:
    """The data lines of ``orders``' export of ``run_id``, by its manifests."""
    record = ExportStore(deps).get("orders", run_id)
    assert record is not None
    s3 = deps.clients.s3
    summary = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{record.prefix}/AWSDynamoDB/{record.export_id}/"
                                                          "manifest-summary.json")["Body"].read())
    lines: list[dict[str, Any]] = []
    for entry in s3.get_object(Bucket=BUCKET, Key=summary["manifestFilesS3Key"])["Body"].read().splitlines():
        data = gzip.decompress(s3.get_object(Bucket=BUCKET, Key=json.loads(entry)["dataFileS3Key"])["Body"].read())
        lines += [json.loads(line) for line in data.splitlines() if line.strip()]
    return lines


def _put(deps: Deps, key: str, n: int) -> None:
    deps.clients.dynamodb.put_item(TableName="orders", Item={"PK": {"S": key}, "n": {"N": str(n)}})


def _delete(deps: Deps, key: str) -> None:
    deps.clients.dynamodb.delete_item(TableName="orders", Key={"PK": {"S": key}})


def test_a_lost_answer_for_an_incremental_export_never_makes_two_exports_and_its_manifests_are_checked(
        aws: Aws, deps: Deps, clock: FakeClock, faults: Faults, caplog: pytest.LogCaptureFixture) -> None:
    export_stage(deps, ["orders"], export_full_hours=24)
    _run(deps, clock)
    _put(deps, "c", 3)
    clock.advance(hours=1)
    faults.inject("dynamodb.ExportTableToPointInTime", "lost")

    run = _run(deps, clock, settle=False)

    made = [e for e in moto_exports(deps).values() if e.export_type == "INCREMENTAL_EXPORT"]
    assert len(made) == 1
    assert any(r.getMessage() == "export found after a failed answer" for r in caplog.records)  # by its prefix
    assert made[0].client_token == export_rules.client_token("orders", run.export_time)  # AWS's own guard
    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.export_type == "INCREMENTAL_EXPORT" and record.export_arn == made[0].arn
    finish_exports(deps)  # the monitor checks an incremental's manifests as a full one's
    key = f"{record.prefix}/AWSDynamoDB/{record.export_id}/manifest-summary.json"
    written = json.loads(deps.clients.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    deps.clients.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({**written, "itemCount": 5}).encode())
    assert monitor.check_run(deps, json.dumps({"export_run": run.run_id, "poll": 0}), "m-0") == "complete"
    record = ExportStore(deps).get("orders", run.run_id)
    assert record is not None and record.status == "FAILED" and "manifest counts disagree" in record.error
    assert [a["subject"] for a in aws.alerts()] == ["timekeeper: export of orders failed"]


def _restore(client: Client, deps: Deps, export: str) -> tuple[int, dict[str, Any]]:
    response = client.http.post("/backups/restores", headers={"Content-Type": "application/json"}, body=json.dumps({
        "table": "orders", "target": "orders-restored-1", "export": export, "restore_id": "chained"}))
    return response.status_code, response.json_body


def _items(deps: Deps, table: str) -> dict[str, str]:
    return {i["PK"]["S"]: i["n"]["N"] for i in deps.clients.dynamodb.scan(TableName=table)["Items"]}


def test_a_restore_from_an_incremental_imports_its_full_export_then_applies_each_incremental_up_to_it_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    export_stage(deps, ["orders"], backup_tables=("orders",), export_full_hours=24)  # a=1, b=2
    _run(deps, clock)
    _put(deps, "c", 3)
    _put(deps, "b", 20)
    clock.advance(hours=1)
    _run(deps, clock)
    _delete(deps, "a")
    _put(deps, "d", 4)
    clock.advance(hours=1)
    asked = _run(deps, clock)
    wanted = _items(deps, "orders")
    _put(deps, "e", 5)  # after the asked time: not restored
    clock.advance(hours=1)
    _run(deps, clock)

    store = ExportStore(deps)
    records = store.of_table("orders")
    assert [(r.export_type, r.status) for r in records] == [("FULL_EXPORT", "COMPLETED")] + [
        ("INCREMENTAL_EXPORT", "COMPLETED")] * 3  # each followed by the monitor as a full one
    assert [r.from_time for r in records[1:]] == [r.export_time for r in records[:-1]]
    assert records[2].run_id == asked.run_id and records[2].item_count == 2
    described = deps.clients.dynamodb.describe_export(ExportArn=records[2].export_arn)["ExportDescription"]
    assert described["IncrementalExportSpecification"]["ExportFromTime"] == records[1].export_time
    assert described["IncrementalExportSpecification"]["ExportToTime"] == asked.export_time
    changes = {line["Keys"]["PK"]["S"]: line for line in _lines(deps, asked.run_id)}
    assert set(changes) == {"a", "d"}  # only what changed in its window
    assert "NewImage" not in changes["a"] and changes["a"]["OldImage"]["n"] == {"N": "1"}  # deleted
    assert changes["d"]["NewImage"]["n"] == {"N": "4"} and "OldImage" not in changes["d"]  # new

    status, body = _restore(client, deps, asked.run_id)
    assert status == 202, body
    from moto.dynamodb.models import dynamodb_backends
    for made in dynamodb_backends[ACCOUNT][deps.settings.region].table_imports.values():
        made.join(timeout=10)
    assert monitor.check_run(deps, json.dumps({"restore_id": "chained", "poll": 0}), "r-0") == "active"

    assert wanted == {"b": "20", "c": "3", "d": "4"}
    assert _items(deps, "orders-restored-1") == wanted
    restore = client.http.get("/backups/restores/chained").json_body
    assert restore["status"] == "ACTIVE"
    assert [i["export"] for i in restore["restored_from"]["incrementals"]] == [r.run_id for r in records[1:3]]
    assert restore["comparison"]["recorded_items"] == restore["comparison"]["restored_items"] == 3

    from chalicelib.backups.restore_chain import apply_incrementals  # a retried poll applies them all again
    assert apply_incrementals(deps, "orders-restored-1", restore["restored_from"]["incrementals"]) == 1
    assert _items(deps, "orders-restored-1") == wanted


def test_a_restore_from_an_incremental_whose_chain_is_broken_is_refused_naming_the_field(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    export_stage(deps, ["orders"], backup_tables=("orders",), export_full_hours=24)
    _run(deps, clock)
    clock.advance(hours=1)
    middle = _run(deps, clock, settle=False)
    finish_exports(deps)
    record = ExportStore(deps).get("orders", middle.run_id)
    assert record is not None
    moto_exports(deps)[record.export_arn].status = "IN_PROGRESS"  # still running when the next one chains from it
    clock.advance(hours=1)
    last = _run(deps, clock, settle=False)
    finish_exports(deps)
    del moto_exports(deps)[record.export_arn]  # then it vanishes: the chain is broken before the last one
    assert monitor.check_run(deps, json.dumps({"export_run": middle.run_id, "poll": 0}), "m-0") == "complete"
    assert monitor.check_run(deps, json.dumps({"export_run": last.run_id, "poll": 0}), "l-0") == "complete"
    settled = ExportStore(deps).get("orders", last.run_id)
    assert settled is not None and settled.status == "COMPLETED" and settled.from_time == middle.export_time

    status, body = _restore(client, deps, last.run_id)

    assert status == 400 and body["field"] == "export", body
    assert "chain" in body["error"] and "VANISHED" in body["error"]
    assert "orders-restored-1" not in deps.clients.dynamodb.list_tables()["TableNames"]
