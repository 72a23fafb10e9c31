"""The scheduled backup trigger, invoked through Chalice's test client against moto."""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

from chalice.test import Client

from chalicelib.aws import Clients, Deps
from chalicelib.backups.store import RunStore
from tests import events
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import ThrottledHttp, create_tables, monitor_messages

# ListBackups pages and honours its time bounds as on AWS; backups carry the injected clock's time.


def _trigger(client: Client, clock: FakeClock) -> None:
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))


def _backed_up_tables(deps: Deps) -> list[str]:
    pages = deps.clients.dynamodb.get_paginator("list_backups").paginate(BackupType="USER")
    return sorted(s["TableName"] for p in pages for s in p["BackupSummaries"])


def _only_monitor_message(aws: Aws, deps: Deps) -> dict[str, Any]:
    sent = monitor_messages(aws, deps)
    assert len(sent) == 1, sent
    body, delay = sent[0]
    assert delay == deps.settings.backup_monitor_delay_seconds == 300
    message: dict[str, Any] = json.loads(body)
    return message


def test_listed_tables_are_backed_up_recorded_and_one_delayed_message_is_sent(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders", "users", "audit"])
    use_settings(deps, backup_tables=("orders", "users"))
    started = clock.now

    _trigger(client, clock)

    assert _backed_up_tables(deps) == ["orders", "users"]
    message = _only_monitor_message(aws, deps)
    run = RunStore(deps).get(message["run_id"])
    assert run is not None and run.status == "RUNNING"
    assert run.started_at == started
    assert {t: r.status for t, r in run.tables.items()} == {"orders": "PENDING", "users": "PENDING"}
    assert all(r.backup_arn.startswith("arn:aws:dynamodb:") for r in run.tables.values())
    assert re.fullmatch(r"timekeeper-test-orders-20261122T120000", run.tables["orders"].backup_name)


def test_pattern_selects_across_two_list_tables_pages(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, [f"shop-{i:03d}" for i in range(150)] + ["other"])
    use_settings(deps, backup_table_pattern=re.compile(r"shop-\d+"))
    list_pages = []
    deps.clients.dynamodb.meta.events.register(
        "after-call.dynamodb.ListTables", lambda parsed, **_: list_pages.append(len(parsed["TableNames"])))

    _trigger(client, clock)

    assert list_pages[:2] == [100, 53]  # 150 + "other" + the app's own two tables
    assert _backed_up_tables(deps) == [f"shop-{i:03d}" for i in range(150)]
    message = _only_monitor_message(aws, deps)
    run = RunStore(deps).get(message["run_id"])
    assert run is not None and len(run.tables) == 150


def test_tag_selects_tagged_tables_and_selections_combine_without_duplicates(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["a-table", "b-table", "c-table", "d-table"],
                  tags={"a-table": {"backup": "daily"}, "c-table": {"backup": "daily"},
                        "d-table": {"backup": "never"}})
    use_settings(deps, backup_table_tag=("backup", "daily"), backup_tables=("a-table", "b-table"),
                 backup_table_pattern=re.compile(r"[ab]-table"))

    _trigger(client, clock)

    assert _backed_up_tables(deps) == ["a-table", "b-table", "c-table"]
    _only_monitor_message(aws, deps)


def test_a_restored_copy_is_not_selected_by_the_pattern_or_the_tag_only_by_name(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    """RESTORE_TARGET_PATTERN's names (default `<table>-restored-*`) are restore targets: the copy carries the
    source's tags and its name matches the source's pattern, yet only BACKUP_TABLES backs it up."""
    daily = {"backup": "daily"}
    create_tables(deps, ["shop-1", "shop-1-restored-a", "shop-2-restored-b", "shop-3-restored-c"],
                  tags={"shop-1": daily, "shop-1-restored-a": daily, "shop-2-restored-b": daily})
    use_settings(deps, backup_table_pattern=re.compile(r"shop-.*"), backup_table_tag=("backup", "daily"),
                 backup_tables=("shop-3-restored-c",))

    _trigger(client, clock)

    assert deps.settings.restore_target_pattern == "<table>-restored-*"
    assert _backed_up_tables(deps) == ["shop-1", "shop-3-restored-c"]


def test_nothing_selected_is_an_alert_not_a_crash(aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    use_settings(deps, backup_table_pattern=re.compile("no-such-.*"))

    _trigger(client, clock)

    alerts = aws.alerts()
    assert [a["subject"] for a in alerts] == ["timekeeper: no tables selected for backup"]
    assert monitor_messages(aws, deps) == []


def test_a_missing_table_is_recorded_and_alerted_and_the_others_are_backed_up(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders", "users"])
    use_settings(deps, backup_tables=("orders", "gone", "users"))

    _trigger(client, clock)

    assert _backed_up_tables(deps) == ["orders", "users"]
    message = _only_monitor_message(aws, deps)
    run = RunStore(deps).get(message["run_id"])
    assert run is not None
    assert run.tables["gone"].status == "FAILED"
    assert "table not found" in run.tables["gone"].error
    alerts = aws.alerts()
    assert len(alerts) == 1
    assert alerts[0]["message"]["table"] == "gone"
    assert alerts[0]["message"]["run_id"] == run.run_id
    assert "table not found" in alerts[0]["message"]["reason"]


def test_thirty_percent_throttled_create_backup_calls_still_back_up_every_table(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, fake_backoff: FakeClock) -> None:
    names = [f"t-{i:02d}" for i in range(40)]
    create_tables(deps, names)
    rng = random.Random(7)
    use_settings(deps, backup_tables=tuple(names), aws_retry_mode="standard")
    deps.clients = Clients(deps.settings)  # botocore makes CreateBackup once: the trigger retries its throttling
    throttled = ThrottledHttp(deps.clients.dynamodb_unretried, "CreateBackup", lambda _n: rng.random() < 0.3)

    _trigger(client, clock)

    assert throttled.throttled >= 8  # about 30 % of the attempts really were throttled
    assert _backed_up_tables(deps) == names
    message = _only_monitor_message(aws, deps)
    run = RunStore(deps).get(message["run_id"])
    assert run is not None and all(r.status == "PENDING" for r in run.tables.values())
    assert aws.alerts() == []


def test_create_backup_calls_stay_under_the_rate_limit(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    names = [f"r-{i:02d}" for i in range(30)]
    create_tables(deps, names)
    use_settings(deps, backup_tables=tuple(names), backup_create_rate=25.0)
    stamps: list[float] = []
    deps.clients.dynamodb_unretried.meta.events.register(
        "before-call.dynamodb.CreateBackup", lambda **_: stamps.append(clock.now.timestamp()))

    _trigger(client, clock)

    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) == 30 and min(gaps) >= 1 / 25 - 1e-6


def test_the_same_scheduled_event_delivered_twice_makes_one_run(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    event = events.scheduled_event(clock.now)

    client.lambda_.invoke("backup_trigger", event)
    client.lambda_.invoke("backup_trigger", event)

    assert _backed_up_tables(deps) == ["orders"]
    _only_monitor_message(aws, deps)
