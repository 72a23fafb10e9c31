"""Backup runs at account scale: state items of bounded size, write units linear in the tables, polls
that cost their listing, retention that lists only what can expire, AWS's per-second quotas.

The whole-run tests use the bench's world (bench/backups.py): moto with AWS's ListBackups, every
table with this app's backups from 1 and 4 days before, and the state writes sized by DynamoDB's
rules, each refused as AWS would above 400 KB.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from bench import backups as bench
from chalicelib.aws import Clients, Deps
from chalicelib.backups import monitor, trigger
from chalicelib.backups.rules import backup_name
from chalicelib.backups.store import Run, RunStore, TableResult
from tests.aws_limits import item_size
from tests.faults import WorkerCrash
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.backup_support import (
    Intercept,
    ThrottledHttp,
    create_tables,
    make_backup,
    monitor_messages,
    moto_backups,
    our_backup,
    set_status,
    vanish,
)

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

ITEM_BOUND = 40_000  # bytes: far below DynamoDB's 400 KB


def _run_of(deps: Deps, clock: FakeClock, n: int) -> Run:
    prefix = deps.settings.backup_name_prefix
    run = Run(run_id=f"{clock.now:%Y%m%dT%H%M%SZ}-scale", started_at=clock.now, trigger="test", claimed_at=clock.now)
    for i in range(n):
        table = f"orders-{i:05d}-eu-west-1-production"
        run.tables[table] = TableResult(table, "PENDING", backup_name=backup_name(prefix, table, clock.now))
    return run


def _state_items(deps: Deps) -> list[dict[str, Any]]:
    """The state table's items as moto holds them (DynamoDB JSON): read from its backend, not through a Scan,
    whose answer moto would serialise value by value (most of a 10,000-table run's seconds)."""
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[ACCOUNT][deps.settings.region].get_table(deps.settings.state_table)
    return [{name: value.to_regular_json() for name, value in item.attrs.items()} for item in table.all_items()]


def test_a_10000_table_run_keeps_every_state_item_far_below_400_kb_and_shows_every_table(
        deps: Deps, clock: FakeClock) -> None:
    store = RunStore(deps)
    run = _run_of(deps, clock, 10_000)
    assert store.create(run)
    for i, result in enumerate(run.tables.values()):
        result.backup_arn = (f"arn:aws:dynamodb:eu-west-1:123456789012:table/{result.table}/backup/"
                             f"0179551242{i:04d}-c40f6c61")

    assert store.started(run, clock.now)

    sizes = [item_size(item) for item in _state_items(deps)]
    assert len(sizes) == 1 + 100 and max(sizes) < ITEM_BOUND
    shown = store.get(run.run_id)
    assert shown is not None and len(shown.tables) == 10_000
    assert all(r.backup_arn for r in shown.tables.values())
    assert shown.view()["table_count"] == 10_000 and len(shown.view()["tables"]) == 10_000


STAMPS: dict[int, dict[str, list[float]]] = {}  # by table count: the clock's time at each backup call


@pytest.fixture(scope="module")
def runs() -> dict[int, bench.RunFigures]:
    """The app's daily run (trigger, every monitor message, retention) at 20 and 250 tables."""
    out: dict[int, bench.RunFigures] = {}
    for n in (20, 250):
        with bench.world(n) as w:
            stamps: dict[str, list[float]] = {}
            STAMPS[n] = stamps
            for client in (w.deps.clients.dynamodb, w.deps.clients.dynamodb_unretried):
                client.meta.events.register(
                    "before-call.dynamodb.*", lambda model, w=w, stamps=stamps, **_: stamps.setdefault(
                        model.name, []).append(w.clock.now.timestamp()))
            out[n] = bench.run_ours(w)
    return out


def _min_gap(stamps: list[float]) -> float:
    return min(b - a for a, b in itertools.pairwise(stamps))


def test_backup_calls_stay_under_their_per_second_quotas(runs: dict[int, bench.RunFigures]) -> None:
    stamps = STAMPS[250]
    assert len(stamps["ListBackups"]) > 10 and _min_gap(stamps["ListBackups"]) >= 1 / 5 - 1e-6
    assert len(stamps["CreateBackup"]) == 250 and _min_gap(stamps["CreateBackup"]) >= 1 / 50 - 1e-6
    assert len(stamps["DeleteBackup"]) == 250 and _min_gap(stamps["DeleteBackup"]) >= 1 / 10 - 1e-6


def test_describe_backup_stays_under_10_a_second(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    tables = [f"t-{i}" for i in range(5)]
    create_tables(deps, tables)
    use_settings(deps, backup_tables=tuple(tables))
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))
    (body, _), = monitor_messages(aws, deps)
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    for result in run.tables.values():
        vanish(deps, result.backup_arn)  # gone from the listing: each is asked for by DescribeBackup
    stamps: list[float] = []
    deps.clients.dynamodb.meta.events.register(
        "before-call.dynamodb.DescribeBackup", lambda **_: stamps.append(clock.now.timestamp()))

    assert monitor.check_run(deps, body) == "complete"

    assert len(stamps) == 5 and _min_gap(stamps) >= 1 / 10 - 1e-6


def test_a_throttled_create_backup_is_made_aws_max_attempts_times_in_all(
        aws: Aws, deps: Deps, clock: FakeClock, fake_backoff: FakeClock) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",), aws_retry_mode="standard", aws_max_attempts=4)
    deps.clients = Clients(deps.settings)
    throttled = ThrottledHttp(deps.clients.dynamodb_unretried, "CreateBackup", lambda _n: True)

    run = trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert throttled.attempts == 4  # AWS_MAX_ATTEMPTS: the trigger's, as botocore makes CreateBackup once
    assert run.tables["orders"].status == "FAILED" and "Throttling" in run.tables["orders"].error
    assert [a["subject"] for a in aws.alerts()] == ["timekeeper: backup of orders failed"]


def test_state_write_units_per_table_do_not_grow_with_the_run(runs: dict[int, bench.RunFigures]) -> None:
    small, large = runs[20], runs[250]
    assert not small.failed and not large.failed
    assert large.write_units / 250 <= small.write_units / 20
    assert large.largest_item < ITEM_BOUND


def test_a_pending_poll_costs_the_listing_pages_and_the_next_message_only(
        runs: dict[int, bench.RunFigures]) -> None:
    for n, figures in runs.items():
        assert dict(figures.pending_poll) == {"dynamodb:ListBackups": bench.pages(n), "sqs:SendMessage": 1}, n


def test_a_run_asks_for_no_backup_one_by_one(runs: dict[int, bench.RunFigures]) -> None:
    for figures in runs.values():
        assert figures.of("DescribeBackup") == 0


def test_a_poll_is_claimed_once_and_the_claim_reads_the_run(deps: Deps, clock: FakeClock) -> None:
    store = RunStore(deps)
    run = _run_of(deps, clock, 3)
    assert store.create(run)
    for result in run.tables.values():
        result.backup_arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{result.table}/backup/1"
    assert store.started(run, clock.now)
    clock.advance(seconds=300)

    claimed = store.claim_poll(run.run_id, 0, clock.now, "m-1")
    again = store.claim_poll(run.run_id, 0, clock.now + timedelta(seconds=1), "m-2")

    assert claimed is not None and claimed.poll == 1 and claimed.poll_message == "m-1"
    assert claimed.counts == {"count": 3, "pages": 1, "backups": 3, "failed": 0}
    assert again is None


def _listings(deps: Deps) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    deps.clients.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.ListBackups", lambda params, **_: calls.append(dict(params)))
    return calls


def _start_one(aws: Aws, deps: Deps, table: str = "orders") -> str:
    create_tables(deps, [table])
    use_settings(deps, backup_tables=(table,), backup_retention_days=3, backup_min_keep=2)
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(deps.clock(), "scheduled"))
    (body, _), = monitor_messages(aws, deps)
    return body


def test_retention_lists_only_backups_older_than_the_retention_and_the_newer_ones_kept_against_them(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start_one(aws, deps)
    old = [our_backup(deps, "orders", clock.now - timedelta(days=d)) for d in (2, 5, 6)]
    for i in range(150):  # other backups of the account, older than the retention: two pages with ours
        make_backup(deps, "orders", f"by-hand-{i:03d}", clock.now - timedelta(days=10))
    listings = _listings(deps)
    clock.advance(minutes=5)
    cutoff = clock.now - timedelta(days=3)  # the deletes' pacing moves the clock on

    assert monitor.check_run(deps, body) == "complete"

    poll, *retention = listings
    assert poll["TimeRangeLowerBound"] <= cutoff + timedelta(days=3) and "TimeRangeUpperBound" not in poll
    assert all(c["BackupType"] == "USER" for c in listings)
    expiring = [c for c in retention if c.get("TimeRangeUpperBound") == cutoff]
    assert len(expiring) == 2 and "TimeRangeLowerBound" not in expiring[0]
    assert expiring[1]["ExclusiveStartBackupArn"]
    newer = [c for c in retention if c not in expiring]
    assert newer and all(c["TimeRangeLowerBound"] == cutoff for c in newer)  # the ones kept (2 days old), not today's
    assert all("TimeRangeLowerBound" in c or "TimeRangeUpperBound" in c for c in listings)
    left = moto_backups(deps)
    assert old[0] in left and old[1] not in left and old[2] not in left  # today's and 2 days old kept


def test_retention_lists_nothing_newer_when_nothing_of_this_app_can_expire(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start_one(aws, deps)
    our_backup(deps, "orders", clock.now - timedelta(days=1))
    listings = _listings(deps)

    assert monitor.check_run(deps, body) == "complete"

    assert [c.get("TimeRangeUpperBound") is not None for c in listings] == [False, True]


def test_days_of_failed_runs_never_prune_the_last_good_backups(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start_one(aws, deps)
    good = [our_backup(deps, "orders", clock.now - timedelta(days=d)) for d in (10, 11)]
    older = our_backup(deps, "orders", clock.now - timedelta(days=12))
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    set_status(deps, run.tables["orders"].backup_arn, "DELETED")  # today's backup failed

    assert monitor.check_run(deps, body) == "complete"

    left = moto_backups(deps)
    assert all(arn in left for arn in good) and older not in left


def test_a_start_longer_than_one_invocation_hands_the_rest_on_through_the_monitor_queue(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    tables = [f"t-{i:03d}" for i in range(40)]
    create_tables(deps, tables)
    use_settings(deps, backup_tables=tuple(tables), backup_create_rate=0.2)  # 5 s a CreateBackup: 30 in 150 s
    listings = _listings(deps)
    started = clock.now

    run = trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    assert run.status == "STARTING" and clock.now - started <= trigger.START_BUDGET + timedelta(seconds=5)
    assert sum(1 for r in run.tables.values() if r.backup_arn) == 31  # at 0, 5, ... 150 s
    watches = monitor_messages(aws, deps, watches=True)
    assert [delay for _, delay in watches] == [deps.settings.backup_run_lease_seconds, 0]
    assert trigger.repair_stale_runs(deps, RunStore(deps), clock.now) == []  # a run handed on is not abandoned

    assert monitor.check_run(deps, watches[1][0], "w-1") == "start resumed"

    done = RunStore(deps).get(run.run_id)
    assert done is not None and done.status == "RUNNING"
    assert all(r.backup_arn and r.status == "PENDING" for r in done.tables.values())
    names = [b.name for b in moto_backups(deps).values()]
    assert sorted(names) == sorted(r.backup_name for r in done.tables.values())  # each table once
    assert listings == []  # no table's backups looked up one by one: the tables handed on were never tried
    assert [json.loads(b)["poll"] for b, _ in monitor_messages(aws, deps)] == [0]
    assert monitor.check_run(deps, watches[0][0], "w-0") == "watched"


def test_a_continuation_that_dies_is_taken_over_by_the_lease_watch_without_a_second_backup(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    tables = [f"t-{i:03d}" for i in range(36)]
    create_tables(deps, tables)
    use_settings(deps, backup_tables=tuple(tables), backup_create_rate=0.2)
    run = trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))
    lease_watch, handed_on = (body for body, _ in monitor_messages(aws, deps, watches=True))
    real = deps.clients.dynamodb_unretried
    made: list[str] = []

    def die_after_two(**kwargs: Any) -> None:
        made.append(kwargs["TableName"])
        if len(made) > 2:
            raise WorkerCrash("the continuation's Lambda died")
    deps.clients.dynamodb_unretried = Intercept(real, "create_backup", die_after_two)  # type: ignore[assignment]
    with pytest.raises(WorkerCrash):
        monitor.check_run(deps, handed_on, "w-1")
    deps.clients.dynamodb_unretried = real

    clock.advance(seconds=deps.settings.backup_run_lease_seconds)  # the lease watch comes in
    assert monitor.check_run(deps, lease_watch, "w-0") == "start resumed"

    done = RunStore(deps).get(run.run_id)
    assert done is not None and done.status == "RUNNING" and all(r.backup_arn for r in done.tables.values())
    names = Counter(b.name for b in moto_backups(deps).values())
    assert sorted(names) == sorted(r.backup_name for r in done.tables.values()) and set(names.values()) == {1}
