"""The backup monitor (SQS consumer), fed generated SQS events through Chalice's test client."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import trigger
from chalicelib.backups.rules import backup_name, parse_backup_name
from chalicelib.backups.store import Run, RunStore
from tests import events
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import (
    CallCounter,
    create_tables,
    make_backup,
    monitor_messages,
    moto_backups,
    our_backup,
    set_status,
    vanish,
)

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

# ListBackups pages and honours its time bounds as on AWS; backups carry the injected clock's time.


def _start(aws: Aws, deps: Deps, clock: FakeClock, client: Client, tables: list[str]) -> str:
    create_tables(deps, tables)
    use_settings(deps, backup_tables=tuple(tables))
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    (body, _delay), = monitor_messages(aws, deps)
    return body


def _deliver(client: Client, deps: Deps, body: str, message_id: str = "m-1") -> None:
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, deps.settings.backup_monitor_queue, message_id)))


def _run(deps: Deps, body: str) -> Run:
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    return run


def test_all_available_completes_the_run_applies_retention_and_publishes_a_summary(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders", "users"])
    old = [our_backup(deps, "orders", clock.now - timedelta(days=5 + i))
           for i in range(3)]
    clock.advance(minutes=5)

    _deliver(client, deps, body)

    run = _run(deps, body)
    assert run.status == "COMPLETE"
    assert {t: r.status for t, r in run.tables.items()} == {"orders": "AVAILABLE", "users": "AVAILABLE"}
    # orders keeps today's backup + the newest old one (BACKUP_MIN_KEEP=2); the two older go.
    assert set(moto_backups(deps)) & set(old) == {old[0]}
    assert run.summary["deleted"] == 2 and run.summary["backed_up"] == 2
    alerts = aws.alerts()
    assert len(alerts) == 1 and alerts[0]["message"]["kind"] == "summary"
    assert alerts[0]["subject"].endswith("2 ok, 0 failed, 0 stuck, 2 deleted")
    assert monitor_messages(aws, deps) == []


def test_creating_backups_re_send_the_message_with_the_same_delay(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders", "users"])
    run = _run(deps, body)
    set_status(deps, run.tables["users"].backup_arn, "CREATING")
    clock.advance(minutes=5)

    _deliver(client, deps, body)

    sent = monitor_messages(aws, deps)
    assert len(sent) == 1
    next_body, delay = sent[0]
    assert delay == 300
    assert json.loads(next_body) == {"run_id": run.run_id, "poll": 1, "started_at": run.started_at.isoformat(),
                                     "backups": 2}
    run = _run(deps, body)
    assert run.status == "RUNNING"
    assert {t: r.status for t, r in run.tables.items()} == {"orders": "AVAILABLE", "users": "PENDING"}

    set_status(deps, run.tables["users"].backup_arn, "AVAILABLE")
    clock.advance(minutes=5)
    _deliver(client, deps, next_body, "m-2")
    assert _run(deps, body).status == "COMPLETE"


def test_a_deleted_backup_alerts_exactly_once_when_the_message_is_delivered_twice(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders", "users"])
    run = _run(deps, body)
    set_status(deps, run.tables["orders"].backup_arn, "DELETED")
    set_status(deps, run.tables["users"].backup_arn, "CREATING")

    _deliver(client, deps, body, "m-1")
    _deliver(client, deps, body, "m-1")  # SQS at least once: the same message again

    alerts = [a for a in aws.alerts() if a["message"].get("kind") != "summary"]
    assert len(alerts) == 1
    assert alerts[0]["message"] == {
        "subject": "timekeeper: backup of orders failed", "table": "orders", "run_id": run.run_id,
        "backup_arn": run.tables["orders"].backup_arn, "reason": "backup was deleted"}
    assert [json.loads(b)["poll"] for b, _ in monitor_messages(aws, deps)] == [1]
    assert _run(deps, body).poll == 1


def test_a_vanished_backup_is_a_failure(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders"])
    run = _run(deps, body)
    vanish(deps, run.tables["orders"].backup_arn)

    _deliver(client, deps, body)

    run = _run(deps, body)
    assert run.tables["orders"].status == "FAILED"
    assert run.tables["orders"].error == "backup no longer exists"
    subjects = [a["subject"] for a in aws.alerts()]
    assert "timekeeper: backup of orders failed" in subjects


def test_creating_past_the_deadline_is_stuck_alerted_and_the_run_finishes(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders"])
    run = _run(deps, body)
    set_status(deps, run.tables["orders"].backup_arn, "CREATING")
    clock.advance(minutes=deps.settings.backup_deadline_minutes + 1)

    _deliver(client, deps, body)

    run = _run(deps, body)
    assert run.tables["orders"].status == "STUCK"
    assert run.status == "COMPLETE" and run.summary["stuck"] == 1
    alerts = aws.alerts()
    assert next(a["subject"] for a in alerts) == "timekeeper: backup of orders stuck"
    assert monitor_messages(aws, deps) == []


def test_a_finished_run_delivered_again_neither_deletes_nor_alerts_again(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    body = _start(aws, deps, clock, client, ["orders"])
    for i in range(4):
        our_backup(deps, "orders", clock.now - timedelta(days=5 + i))
    deletes = CallCounter()
    deps.clients.dynamodb.meta.events.register("before-call.dynamodb.DeleteBackup", deletes)

    _deliver(client, deps, body)
    _deliver(client, deps, body)

    assert deletes.count() == 3
    assert len(aws.alerts()) == 1


def test_one_poll_over_100_creating_backups_costs_one_status_call(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    tables = [f"big-{i:03d}" for i in range(100)]
    body = _start(aws, deps, clock, client, tables)
    run = _run(deps, body)
    for result in run.tables.values():
        set_status(deps, result.backup_arn, "CREATING")
    counter = CallCounter().watch(deps.clients.dynamodb)

    _deliver(client, deps, body)

    backup_status_calls = [c for c in counter.calls if "Backup" in c]
    assert backup_status_calls == ["dynamodb:ListBackups"]  # at most 2 allowed; one page here
    assert len(monitor_messages(aws, deps)) == 1


def test_an_unreadable_message_is_dead_lettered_not_retried(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    _deliver(client, deps, "not json", "bad-1")
    _deliver(client, deps, json.dumps({"run_id": "20260101T000000Z-nope", "poll": 0}), "bad-2")

    dead = [json.loads(m["Body"]) for m in aws.drain(deps.settings.backup_monitor_dlq)]
    assert [(d["event_id"], d["source"]) for d in dead] == [("bad-1", "backup-monitor"),
                                                            ("bad-2", "backup-monitor")]
    assert "not JSON" in dead[0]["reason"] and "not found" in dead[1]["reason"]


def _summaries(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in alerts if a["message"].get("kind") == "summary"]


def test_retention_never_touches_other_prefixes_other_tables_or_system_backups(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["unselected"])
    body = _start(aws, deps, clock, client, ["orders"])
    long_ago = clock.now - timedelta(days=30)
    keep = [
        make_backup(deps, "orders", "manual-orders-1", long_ago),
        make_backup(deps, "orders", backup_name("timekeeper", "orders", long_ago), long_ago),  # another stage's
        make_backup(deps, "orders", f"{deps.settings.backup_name_prefix}-orders-by-hand", long_ago),
        our_backup(deps, "orders", long_ago, type_="SYSTEM"),
        our_backup(deps, "orders", long_ago, type_="AWS_BACKUP"),
        *[our_backup(deps, "unselected", long_ago - timedelta(days=i)) for i in range(3)],
    ]
    ours = [our_backup(deps, "orders", long_ago + timedelta(days=i)) for i in range(3)]

    _deliver(client, deps, body)

    remaining = set(moto_backups(deps))
    assert set(keep) <= remaining
    assert remaining & set(ours) == {ours[2]}  # the newest old one + today's make BACKUP_MIN_KEEP
    assert _summaries(aws.alerts())[0]["message"]["deleted"] == sorted(ours[:2])


def test_two_stages_backing_up_one_table_never_prune_each_others_backups(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    """dev and prod in one account, each with its default prefix, both back up "orders" every day."""
    create_tables(deps, ["orders"])
    stages = {"prod": "timekeeper-prod", "dev": "timekeeper-prod-dev"}  # dev's prefix starts with prod's
    for _day in range(6):
        for stage in stages:
            use_settings(deps, stage=stage, backup_name_prefix=stages[stage], backup_tables=("orders",),
                         backup_retention_days=3, backup_min_keep=2)
            trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, stage))
            for body, _ in monitor_messages(aws, deps):
                _deliver(client, deps, body)
        clock.advance(days=1)

    names = sorted(b.name for b in moto_backups(deps).values())
    for stage, prefix in stages.items():
        mine = [n for n in names if parse_backup_name(n, prefix, "orders")]
        # each stage keeps its own: retention 3 days deletes only what is older, never the other's
        assert len(mine) == 4, (stage, names)
