"""Backup runs survive duplicate deliveries racing each other and workers that die mid-step."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.aws import Deps
from chalicelib.backups import monitor, trigger
from chalicelib.backups.store import Run, RunStore
from tests.faults import WorkerCrash
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import (
    CallCounter,
    Intercept,
    create_tables,
    failing_calls,
    monitor_messages,
    our_backup,
    set_status,
)

# ListBackups pages and honours its time bounds as on AWS; backups carry the injected clock's time.


def _start(aws: Aws, deps: Deps, tables: list[str]) -> str:
    create_tables(deps, tables)
    use_settings(deps, backup_tables=tuple(tables))
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(deps.clock(), "scheduled"))
    (body, _), = monitor_messages(aws, deps)
    return body


def _start_creating(aws: Aws, deps: Deps, tables: list[str]) -> tuple[str, Run]:
    """A run started (its first poll's body) whose backup of orders is still CREATING."""
    body = _start(aws, deps, tables)
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    set_status(deps, run.tables["orders"].backup_arn, "CREATING")
    return body, run


def _strand_a_starter(deps: Deps, clock: FakeClock) -> str:
    """A scheduled run of orders whose starter died while STARTING (before the run went RUNNING): its id."""
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    run_id = trigger.new_run_id(clock.now, "scheduled")
    real = deps.clients.dynamodb

    def die(**kwargs: Any) -> None:
        if "#status = :RUNNING" in kwargs["UpdateExpression"]:
            raise WorkerCrash("the starter died")  # no try that fails: its claim lapses only after the lease

    deps.clients.dynamodb = Intercept(real, "update_item", die)  # type: ignore[assignment]
    try:
        with pytest.raises(WorkerCrash):
            trigger.start_run(deps, "schedule", run_id=run_id)
    finally:
        deps.clients.dynamodb = real
    return run_id


def _polls(aws: Aws, deps: Deps) -> list[int]:
    return [json.loads(body)["poll"] for body, _ in monitor_messages(aws, deps)]


def test_two_deliveries_racing_on_one_claimed_poll_send_one_next_message(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body, _ = _start_creating(aws, deps, ["orders", "users"])  # users' is done: the poll is claimed
    real = deps.clients.dynamodb
    twin_ran: list[bool] = []

    def twin_first(**kwargs: Any) -> None:
        # The twin delivery reads the same run and claims the poll before this one's claim lands.
        if kwargs.get("UpdateExpression", "").startswith("SET #poll = :next") and not twin_ran:
            twin_ran.append(True)
            deps.clients.dynamodb = real
            assert monitor.check_run(deps, body, "twin") == "requeued"
            deps.clients.dynamodb = intercepted  # type: ignore[assignment]

    intercepted = Intercept(real, "update_item", twin_first)
    deps.clients.dynamodb = intercepted  # type: ignore[assignment]

    assert monitor.check_run(deps, body, "first") == "duplicate"

    assert twin_ran and _polls(aws, deps) == [1]


def test_a_worker_dying_between_claiming_a_poll_and_sending_is_repaired_by_the_redelivery(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body, _ = _start_creating(aws, deps, ["orders", "users"])  # users' is done: the poll is claimed
    with failing_calls(deps, "sqs", "send_message"), pytest.raises(Exception, match="simulated"):
        monitor.check_run(deps, body, "m-1")
    assert _polls(aws, deps) == []

    assert monitor.check_run(deps, body, "m-1") == "duplicate"  # a racing twin: too soon to take over
    clock.advance(seconds=300)  # SQS redelivers after the visibility timeout
    assert monitor.check_run(deps, body, "m-1") == "resent"
    assert monitor.check_run(deps, body, "m-1") == "duplicate"

    assert _polls(aws, deps) == [1]


def test_a_worker_dying_before_sending_an_unclaimed_poll_is_repaired_by_the_redelivery(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body, run = _start_creating(aws, deps, ["orders"])
    with failing_calls(deps, "sqs", "send_message"), pytest.raises(Exception, match="simulated"):
        monitor.check_run(deps, body, "m-1")
    clock.advance(seconds=300)  # SQS redelivers after the visibility timeout
    assert monitor.check_run(deps, body, "m-1") == "requeued"

    (next_body, _), = monitor_messages(aws, deps)
    set_status(deps, run.tables["orders"].backup_arn, "AVAILABLE")
    assert monitor.check_run(deps, next_body, "m-2") == "complete"


def test_a_message_delivered_twice_while_backups_are_creating_leaves_one_chain_at_the_first_claim(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body, run = _start_creating(aws, deps, ["orders"])
    reads = CallCounter().watch(deps.clients.dynamodb)

    assert [monitor.check_run(deps, body, m) for m in ("m-1", "m-1")] == ["requeued", "requeued"]
    assert [c for c in reads.calls if c != "dynamodb:ListBackups"] == []  # nothing of the run read or written
    copies = [b for b, _ in monitor_messages(aws, deps)]
    assert [json.loads(b)["poll"] for b in copies] == [1, 1]  # a second chain, for as long as all are CREATING

    set_status(deps, run.tables["orders"].backup_arn, "AVAILABLE")
    assert [monitor.check_run(deps, b, f"m-{i}") for i, b in enumerate(copies, 2)] == ["complete", "duplicate"]
    assert monitor_messages(aws, deps) == []
    assert [a["message"].get("kind") for a in aws.alerts()] == ["summary"]


def test_a_finisher_dying_mid_retention_is_taken_over_after_its_lease(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start(aws, deps, ["orders"])
    old = [our_backup(deps, "orders", clock.now - timedelta(days=5 + i))
           for i in range(4)]
    with failing_calls(deps, "dynamodb", "delete_backup", when=lambda **kw: kw["BackupArn"] == old[2]), \
            pytest.raises(Exception, match="simulated"):
        monitor.check_run(deps, body, "m-1")
    run_id = json.loads(body)["run_id"]
    assert RunStore(deps).get(run_id).status == "FINISHING"  # type: ignore[union-attr]

    clock.advance(seconds=300)
    with pytest.raises(monitor.RetryLater):  # SQS will deliver it again
        monitor.check_run(deps, body, "m-1")
    clock.advance(seconds=deps.settings.backup_run_lease_seconds)
    assert monitor.check_run(deps, body, "m-1") == "complete"

    run = RunStore(deps).get(run_id)
    assert run is not None and run.status == "COMPLETE" and run.summary["deleted"] >= 1
    summaries = [a for a in aws.alerts() if a["message"].get("kind") == "summary"]
    assert len(summaries) == 1


def test_a_run_whose_starter_died_is_closed_and_alerted_by_the_next_trigger(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    run_id = _strand_a_starter(deps, clock)
    with pytest.raises(trigger.StartInProgress):  # Lambda's async retry a minute later
        clock.advance(seconds=60)
        trigger.start_run(deps, "schedule", run_id=run_id)

    clock.advance(days=1)
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    stale = RunStore(deps).get(run_id)
    assert stale is not None and stale.status == "COMPLETE" and "abandoned" in stale.summary["note"]
    subjects = [a["subject"] for a in aws.alerts()]
    assert subjects == [f"timekeeper: backup run {run_id} abandoned"]
    assert len(_polls(aws, deps)) == 1  # the new run's monitor


def test_a_failing_alert_does_not_leave_the_run_without_its_monitor(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders", "missing"))

    with failing_calls(deps, "sns", "publish"), pytest.raises(Exception, match="simulated"):
        trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert _polls(aws, deps) == [0]


def test_a_run_whose_monitor_message_was_dead_lettered_is_re_queued_by_the_next_trigger(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    _, run = _start_creating(aws, deps, ["orders"])
    run_id = run.run_id
    # The monitor message failed five deliveries and went to the dead-letter queue: nothing polls the run.
    # While its backups may be CREATING a silent run may be a healthy one (its polls go unclaimed): the
    # first trigger past its deadline mends it.
    clock.now = trigger.run_deadline(deps, run) + timedelta(seconds=1)

    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    polls = {json.loads(b)["run_id"]: json.loads(b)["poll"] for b, _ in monitor_messages(aws, deps)}
    assert polls[run_id] == 0 and len(polls) == 2
    set_status(deps, run.tables["orders"].backup_arn, "AVAILABLE")
    assert monitor.check_run(deps, json.dumps({"run_id": run_id, "poll": 0})) == "complete"


def test_a_run_polling_unclaimed_is_not_re_queued_before_its_deadline(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body, run = _start_creating(aws, deps, ["orders"])
    for _ in range(6):  # half an hour of polls that find the backup CREATING: none claims the run
        clock.advance(seconds=deps.settings.backup_monitor_delay_seconds)
        assert monitor.check_run(deps, body) == "requeued"
        (body, _), = monitor_messages(aws, deps)  # the chain goes on (taken off the queue here)

    trigger.start_run(deps, "api", tables=["orders"])

    runs = [json.loads(b)["run_id"] for b, _ in monitor_messages(aws, deps)]
    assert run.run_id not in runs and len(runs) == 1


def test_a_healthy_run_is_not_re_queued(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start(aws, deps, ["orders"])
    clock.advance(seconds=deps.settings.backup_monitor_delay_seconds)

    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    runs = [json.loads(b)["run_id"] for b, _ in monitor_messages(aws, deps)]
    assert json.loads(body)["run_id"] not in runs and len(runs) == 1


def test_an_abandoned_run_whose_alert_failed_is_alerted_by_a_later_trigger(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    stranded = _strand_a_starter(deps, clock)
    clock.advance(days=1)
    with failing_calls(deps, "sns", "publish"):
        trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))  # today's run still starts
    assert RunStore(deps).get(stranded).status == "STARTING"  # type: ignore[union-attr]
    clock.advance(days=1)
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert [a["subject"] for a in aws.alerts()] == [f"timekeeper: backup run {stranded} abandoned"]
    assert RunStore(deps).get(stranded).status == "COMPLETE"  # type: ignore[union-attr]
    assert len(RunStore(deps).recent(10)) == 3
