"""GET /backups, the catalog, and retention by calendar under faults, at the stage settings, on moto."""

from __future__ import annotations

import base64
import json
import zlib
from datetime import UTC, timedelta
from urllib.parse import quote

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import catalog, monitor, retention, rules
from chalicelib.backups.store import Run, RunStore, Verification
from chalicelib.backups.trigger import new_run_id
from chalicelib.settings import Calendar
from tests.faults import Faults, Kind
from tests.fixtures import FakeClock, use_settings
from tests.functional.backup_support import (
    CallCounter,
    create_tables,
    make_backup,
    moto_backups,
    our_backup,
)

CALENDAR = Calendar(daily=7, weekly=4, monthly=2)


def _calendar_stage(deps: Deps) -> rules.Policy:
    use_settings(deps, backup_retention=CALENDAR, backup_retention_days=3, backup_min_keep=2,
                 backup_tables=("orders", "audit", "burst"))
    return retention.retention_policy(deps.settings)


def _ours(deps: Deps) -> list[rules.Backup]:
    return [rules.Backup(arn, b.name, b.table.name, b.creation_date_time.replace(tzinfo=UTC), b.status, b.type)
            for arn, b in moto_backups(deps).items() if rules.is_ours(rules.Backup(
                arn, b.name, b.table.name, b.creation_date_time, b.status, b.type), deps.settings.backup_name_prefix)]


def test_the_catalog_walks_every_backup_newest_first_one_listbackups_page_a_request_with_retentions_decision(
        deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders", "audit", "burst"])
    policy = _calendar_stage(deps)
    now = clock.now
    for day in range(70):  # ten weeks of daily backups of two tables
        for table in ("orders", "audit"):
            our_backup(deps, table, now - timedelta(days=day, hours=1))
    for minute in range(130):  # more than a ListBackups page within one day: a window that must narrow
        our_backup(deps, "burst", now - timedelta(days=2, minutes=minute))
    make_backup(deps, "orders", "before-the-migration", now - timedelta(days=3))
    make_backup(deps, "orders", rules.backup_name("timekeeper-other", "orders", now - timedelta(days=4)),
                now - timedelta(days=4))
    counter = CallCounter().watch(deps.clients.dynamodb)

    seen, lists, sizes, token = [], [], [], None
    while True:
        before = counter.count("dynamodb:ListBackups")
        response = client.http.get("/backups?limit=40" + (f"&next_token={token}" if token else ""))
        assert response.status_code == 200, response.json_body
        lists.append(counter.count("dynamodb:ListBackups") - before)
        seen += response.json_body["backups"]
        sizes.append(len(response.json_body["backups"]))
        token = response.json_body["next_token"]
        if token is None:
            break

    expected = rules.newest_first(_ours(deps))
    assert [b["arn"] for b in seen] == [b.arn for b in expected]  # every one of ours, once, newest first
    # every page full but the last, which is not empty: no page past the end
    assert sizes[:-1] == [40] * (len(sizes) - 1) and 0 < sizes[-1] <= 40, sizes
    # windows listed until the page is full, and one more ListBackups for each table the first time its page's last
    # backup would be kept were it the table's oldest (a count not filled yet: retention keeps the oldest)
    assert max(lists) <= catalog.MAX_LISTINGS + catalog.OLDEST_LOOKUPS, lists
    assert counter.count("dynamodb:DescribeBackup") == 0
    decided = {v.backup.arn: v for v in rules.retention_verdicts(
        expected, now, policy, deps.settings.backup_name_prefix, ["orders", "audit", "burst"])}
    for item in seen:
        verdict = decided[item["arn"]]
        assert item["kept"] == (verdict.kept[0].value if verdict.kept else None), item
        assert item["expires_after"] == (verdict.expires_after.isoformat() if verdict.expires_after else None)
    kinds = {item["kept"] for item in seen}
    assert {"last_good", "weekly", "daily", "age", None} <= kinds


def test_a_page_is_full_until_the_end_and_no_next_token_is_given_past_it(deps: Deps, clock: FakeClock,
                                                                          client: Client) -> None:
    create_tables(deps, ["orders"])
    assert client.http.get("/backups").json_body == {"backups": [], "next_token": None}  # an empty catalog
    for days in (0, 1, 40, 900):  # sparse: years apart, where one window would once make a page
        our_backup(deps, "orders", clock.now - timedelta(days=days, hours=1))

    first = client.http.get("/backups?limit=2").json_body
    second = client.http.get(f"/backups?limit=2&next_token={first['next_token']}").json_body
    by_table = client.http.get("/backups?table=orders&limit=4").json_body

    assert len(first["backups"]) == 2 and first["next_token"]
    assert len(second["backups"]) == 2 and second["next_token"] is None
    assert len(by_table["backups"]) == 4 and by_table["next_token"] is None


def test_a_backup_shows_the_run_that_made_it_and_its_verification(deps: Deps, clock: FakeClock,
                                                                  client: Client) -> None:
    create_tables(deps, ["orders", "audit"])
    use_settings(deps, backup_tables=("orders", "audit"))
    started = clock.now.replace(microsecond=0)
    run = Run(run_id=new_run_id(started, "api-1"), started_at=started, trigger="api", verify_plan=["orders"])
    store = RunStore(deps)
    store.create(run)
    store.add_verifications(run.run_id, [Verification(table="orders", status="PASSED")])
    our_backup(deps, "orders", started)
    our_backup(deps, "audit", started)

    orders = client.http.get("/backups?table=orders").json_body["backups"]
    audit = client.http.get("/backups?table=audit&status=AVAILABLE").json_body["backups"]

    assert [(b["run_id"], b["verified"], b["verification"], b["kept"]) for b in orders] == [
        (run.run_id, True, "PASSED", "last_good")]
    assert [(b["run_id"], b["verified"], b["verification"]) for b in audit] == [(run.run_id, False, None)]
    assert orders[0]["run_started"] == started.isoformat() and orders[0]["size_bytes"] is not None


BAD_QUERIES = [
    ("table=a", "table"), ("status=GONE", "status"), ("after=yesterday", "after"), ("before=2026-13-01", "before"),
    ("limit=0", "limit"), ("limit=101", "limit"), ("next_token=nonsense", "next_token"),
    ("after=2026-11-22T00:00:00Z&before=2026-11-21T00:00:00Z", "after"), ("colour=red", "colour"),
]


@pytest.mark.parametrize(("query", "field"), BAD_QUERIES)
def test_a_bad_query_value_names_its_field(query: str, field: str) -> None:
    from urllib.parse import parse_qsl

    from chalicelib.web import ApiError

    with pytest.raises(ApiError) as error:
        parsed, token = catalog.parse_query(dict(parse_qsl(query)))
        if token:
            catalog.Cursor.decode(token, parsed.key)
    assert error.value.status == 400 and error.value.field == field


@pytest.mark.parametrize("kind", ["lost", "error"])
def test_calendar_retention_under_a_lost_delete_or_a_hard_error_mid_prune_ends_with_the_policys_kept_set(
        deps: Deps, clock: FakeClock, faults: Faults, kind: Kind) -> None:
    create_tables(deps, ["orders"])
    policy = _calendar_stage(deps)
    for day in range(60):
        our_backup(deps, "orders", clock.now - timedelta(days=day, hours=1))
    keep = {v.backup.arn for v in rules.retention_verdicts(
        _ours(deps), clock.now, policy, deps.settings.backup_name_prefix, ["orders"]) if not v.deleted}
    fault = faults.inject("dynamodb.DeleteBackup", kind, occurrence=5, times=3 if kind == "error" else 1)

    for _ in range(3):  # the finish, and the monitor's redeliveries of it while it fails
        try:
            monitor.apply_retention(deps, ["orders"], clock.now)
            break
        except Exception as exc:
            assert "injected fault" in str(exc)
        assert keep <= set(moto_backups(deps))  # nothing the policy keeps was deleted, even half-way
    again = monitor.apply_retention(deps, ["orders"], clock.now)

    assert fault.hits >= 1
    assert set(moto_backups(deps)) == keep and again == []
    assert len(keep) == 7 + 3 + 1  # 7 days (the last good and the 3 days of age among them), 3 more weeks, 1 month


def test_before_skips_the_newer_backups_so_retention_is_unknown_and_a_token_or_value_of_another_query_is_a_400(
        deps: Deps, clock: FakeClock, client: Client) -> None:
    create_tables(deps, ["orders"])
    for day in range(3):
        our_backup(deps, "orders", clock.now - timedelta(days=day))
    token = client.http.get("/backups?table=orders&limit=1").json_body["next_token"]
    assert client.http.get(f"/backups?table=orders&limit=1&next_token={token}").status_code == 200
    refused = client.http.get(f"/backups?table=other&limit=1&next_token={token}")
    assert refused.status_code == 400 and refused.json_body["field"] == "next_token"
    bad = client.http.get("/backups?status=GONE")
    assert bad.status_code == 400 and bad.json_body["field"] == "status"
    before = quote((clock.now - timedelta(hours=12)).isoformat())
    items = client.http.get(f"/backups?table=orders&before={before}").json_body["backups"]
    assert len(items) == 2 and all(i["retention"] == "unknown" and i["kept"] is None for i in items)
    assert all("retention" not in i for i in client.http.get("/backups?table=orders").json_body["backups"])


def test_a_tables_oldest_backup_shows_kept_while_a_count_is_not_filled_within_a_pages_lookups(
        deps: Deps, clock: FakeClock, client: Client) -> None:
    tables = [f"young-{i}" for i in range(catalog.OLDEST_LOOKUPS + 2)]
    create_tables(deps, tables)
    use_settings(deps, backup_retention=Calendar(daily=7), backup_retention_days=0, backup_min_keep=1,
                 backup_tables=tuple(tables))
    for table in tables:  # two runs on one day: the later one is the day's, the first one the table's oldest
        our_backup(deps, table, clock.now - timedelta(hours=2))
        our_backup(deps, table, clock.now - timedelta(hours=5))
    counter = CallCounter().watch(deps.clients.dynamodb)

    first = client.http.get("/backups").json_body  # all on the first page: the rest of the walk finds none
    assert first["next_token"] is None and len(first["backups"]) == 2 * len(tables)
    assert counter.count("dynamodb:ListBackups") - catalog.OLDEST_LOOKUPS <= catalog.MAX_LISTINGS
    oldest = [b for b in first["backups"] if b["created"] == (clock.now - timedelta(hours=5)).isoformat()]
    assert sorted(str((b["kept"], b.get("retention"))) for b in oldest) == sorted(
        [str(("daily", None))] * catalog.OLDEST_LOOKUPS + [str((None, "unknown"))] * 2)
    unknown = next(b["table"] for b in oldest if b.get("retention") == "unknown")
    alone = client.http.get(f"/backups?table={unknown}").json_body["backups"]
    assert [(b["kept"], b.get("retention")) for b in alone] == [("last_good", None), ("daily", None)]


def test_a_token_that_would_grow_too_long_drops_the_tables_walks() -> None:
    from chalicelib.backups import catalog

    walks = {f"table-{i:05d}-{i * 7919 % 10007}": rules.TableWalk(i % 5, {rules.Keep.DAILY: i % 7},
                                                                  {rules.Keep.DAILY: (2026, 1 + i % 12, 1 + i % 28)})
             for i in range(3000)}
    cursor = catalog.Cursor(1_800_000_000, 86_400, None, walks, "q")
    token = cursor.encode()
    assert len(token) <= catalog.TOKEN_MAX and catalog.Cursor.decode(token, "q").walks is None
    walks["table-00001-7919"].oldest = 1_700_000_000
    few = catalog.Cursor(1_800_000_000, 86_400, None, dict(list(walks.items())[:3]), "q")
    assert catalog.Cursor.decode(few.encode(), "q").walks == dict(list(walks.items())[:3])
    raw = json.dumps({"u": 1, "w": 2, "s": None, "k": {"t": [1, {"daily": 1}, {"daily": [2026, 1, 2]}]}, "q": "q"})
    older = base64.urlsafe_b64encode(zlib.compress(raw.encode())).decode()  # a token made before walks had oldest
    assert catalog.Cursor.decode(older, "q").walks == {
        "t": rules.TableWalk(1, {rules.Keep.DAILY: 1}, {rules.Keep.DAILY: (2026, 1, 2)})}
