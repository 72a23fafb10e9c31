"""Restore on demand's pure decisions: the request, the refusals, what it restores from, the settings to re-apply."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.backups import restore_rules as rr
from chalicelib.backups.rules import Backup, backup_name
from chalicelib.backups.verify_rules import restored_shape
from chalicelib.web import ApiError

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/backup/01700000000000-abcdef12"
PATTERN = "<table>-restored-*"
PREFIX = "timekeeper-test"
OWN = {"timekeeper-state", "timekeeper-tasks"}
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def body(**changes: Any) -> dict[str, Any]:
    return {"table": "orders", "target": "orders-restored-1", "latest": True, **changes}


def refused_field(data: dict[str, Any] | None) -> str | None:
    with pytest.raises(ApiError) as caught:
        rr.parse_request(data)
    assert caught.value.status == 400
    return caught.value.field


def test_a_request_names_the_source_the_target_and_what_to_restore_from() -> None:
    request = rr.parse_request(body(copy_settings=False, billing_mode="PAY_PER_REQUEST", restore_id="incident-42"))
    assert (request.kind, request.backup_arn, request.point_in_time) == (rr.FROM_BACKUP, "", None)
    assert (request.copy_settings, request.billing_mode, request.restore_id) == (False, "PAY_PER_REQUEST", "incident-42")
    by_arn = rr.parse_request({"table": "orders", "target": "orders-restored-1", "backup_arn": ARN})
    assert (by_arn.kind, by_arn.backup_arn, by_arn.copy_settings, by_arn.billing_mode) == (rr.FROM_BACKUP, ARN, True, "SOURCE")
    at = rr.parse_request({"table": "orders", "target": "orders-restored-1", "point_in_time": "2026-11-22T11:00:00Z"})
    assert (at.kind, at.point_in_time) == (rr.FROM_POINT, datetime(2026, 11, 22, 11, tzinfo=UTC))
    latest = rr.parse_request({"table": "orders", "target": "orders-restored-1", "point_in_time": "latest_restorable"})
    assert (latest.kind, latest.point_in_time) == (rr.FROM_POINT, None)


@pytest.mark.parametrize(("data", "field"), [
    (None, "body"),
    (body(tables=["x"]), "tables"),
    (body(table="a"), "table"),
    (body(target="bad name"), "target"),
    ({"table": "orders", "target": "orders-restored-1"}, "backup_arn"),
    (body(backup_arn=ARN), "latest"),                           # two sources named: the second one
    ({**body(), "latest": False}, "latest"),
    ({"table": "orders", "target": "orders-restored-1", "backup_arn": "arn:aws:s3:::bucket"}, "backup_arn"),
    ({"table": "orders", "target": "orders-restored-1", "point_in_time": "yesterday"}, "point_in_time"),
    ({"table": "orders", "target": "orders-restored-1", "point_in_time": 1700000000}, "point_in_time"),
    (body(copy_settings="yes"), "copy_settings"),
    (body(billing_mode="PROVISIONED"), "billing_mode"),
    (body(restore_id="has space"), "restore_id"),
    (body(restore_id=""), "restore_id"),
])
def test_a_bad_request_is_refused_naming_its_field(data: dict[str, Any] | None, field: str) -> None:
    assert refused_field(data) == field


@pytest.mark.parametrize(("pattern", "target", "allowed"), [
    ("<table>.copy", "orders.copy", True),
    ("<table>.copy", "orders.copy.2", False),      # matched whole: not as a prefix
    ("<table>.copy", "orders.copy-restored", False),
    ("restore-<table>", "restore-orders", True),
    ("restore-<table>", "restore-orders-x", False),
    ("restore-<table>", "x-restore-orders", False),
])
def test_the_target_pattern_is_matched_whole(pattern: str, target: str, allowed: bool) -> None:
    refusal = rr.target_refusal(rr.parse_request(body(target=target)), pattern, OWN, PREFIX)
    assert (refusal is None) is allowed, refusal


@pytest.mark.parametrize(("name", "restored"), [
    ("orders-restored-1", True), ("prod-users-restored-", True), ("orders", False),
    ("-restored-1", False), ("orders-restored", False), ("restored-orders", False),
])
def test_any_target_tells_the_names_a_restore_may_make_whatever_the_source(name: str, restored: bool) -> None:
    assert bool(rr.any_target(PATTERN).fullmatch(name)) is restored


@pytest.mark.parametrize(("target", "reason"), [
    ("orders-restored-1", None),
    ("orders-restored-", None),
    ("orders-copy", "does not match RESTORE_TARGET_PATTERN 'orders-restored-*'"),
    ("users-restored-1", "does not match"),
    ("xorders-restored-1", "does not match"),
    ("timekeeper-state", "one of the app's own tables"),
    ("timekeeper-test.verify.20261122T120000Z-x.orders", "one of the app's own tables"),
    ("orders", "not the source table"),
])
def test_the_target_must_be_a_name_the_pattern_allows_and_never_the_apps_own(target: str, reason: str | None) -> None:
    refusal = rr.target_refusal(rr.parse_request(body(target=target)), PATTERN, OWN, PREFIX)
    if reason is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.field == "target" and reason in refusal.message


@settings(max_examples=40, deadline=None)
@given(table=st.from_regex(r"[A-Za-z0-9_.-]{3,20}", fullmatch=True), suffix=st.from_regex(r"[A-Za-z0-9_.-]{0,20}", fullmatch=True))
def test_the_default_pattern_allows_exactly_the_table_restored_and_anything(table: str, suffix: str) -> None:
    pattern = rr.target_pattern(PATTERN, table)
    assert pattern.fullmatch(f"{table}-restored-{suffix}")
    assert not pattern.fullmatch(f"{table}-copy-{suffix}")
    assert not pattern.fullmatch(f"x{table}-restored-{suffix}")


def test_a_point_in_time_outside_the_restorable_window_is_refused_saying_the_window() -> None:
    earliest, latest = NOW - timedelta(days=35), NOW - timedelta(minutes=5)
    assert rr.window_refusal(NOW - timedelta(hours=1), earliest, latest) is None
    assert rr.window_refusal(earliest, earliest, latest) is None
    late = rr.window_refusal(NOW, earliest, latest)
    assert late is not None and earliest.isoformat() in late and latest.isoformat() in late
    assert rr.window_refusal(NOW - timedelta(days=40), earliest, latest) is not None
    assert "point-in-time recovery is off" in str(rr.window_refusal(NOW, None, None))


def description(name: str, table: str = "orders", status: str = "AVAILABLE") -> dict[str, Any]:
    return {"BackupDetails": {"BackupName": name, "BackupStatus": status},
            "SourceTableDetails": {"TableName": table, "ItemCount": 3}}


def test_a_backup_is_restorable_when_it_is_this_stages_available_backup_of_the_table() -> None:
    ours = backup_name(PREFIX, "orders", NOW)
    assert rr.backup_refusal(description(ours), "orders", PREFIX, False) is None
    assert "not 'orders'" in str(rr.backup_refusal(description(ours, table="users"), "orders", PREFIX, False))
    assert "CREATING" in str(rr.backup_refusal(description(ours, status="CREATING"), "orders", PREFIX, False))


def test_another_stages_backup_is_refused_unless_foreign_backups_are_allowed() -> None:
    theirs = backup_name("timekeeper-prod", "orders", NOW)
    assert "BACKUP_RESTORE_FOREIGN" in str(rr.backup_refusal(description(theirs), "orders", PREFIX, False))
    assert rr.backup_refusal(description(theirs), "orders", PREFIX, True) is None
    assert rr.backup_refusal(description("by-hand"), "orders", PREFIX, False) is not None


def test_latest_is_the_newest_available_backup_this_stage_made_of_the_table() -> None:
    def backup(arn: str, prefix: str, hours: int, status: str = "AVAILABLE", table: str = "orders") -> Backup:
        at = NOW - timedelta(hours=hours)
        return Backup(arn=arn, name=backup_name(prefix, table, at), table=table, created=at, status=status, type="USER")
    backups = [backup("old", PREFIX, 30), backup("good", PREFIX, 5), backup("failed", PREFIX, 1, status="FAILED"),
               backup("theirs", "timekeeper-prod", 0), backup("users", PREFIX, 0, table="users")]
    newest = rr.newest_ours(backups, "orders", PREFIX)
    assert newest is not None and newest.arn == "good"
    assert rr.newest_ours(backups[3:], "orders", PREFIX) is None


def test_a_table_is_this_restores_when_dynamodb_says_it_was_restored_from_its_backup_or_source() -> None:
    restored = {"RestoreSummary": {"SourceBackupArn": ARN, "SourceTableArn": "arn:aws:dynamodb:r:1:table/orders"}}
    assert rr.is_our_restore(restored, rr.FROM_BACKUP, ARN, "table/orders")
    assert not rr.is_our_restore(restored, rr.FROM_BACKUP, ARN + "0", "table/orders")
    assert rr.is_our_restore(restored, rr.FROM_POINT, "", "table/orders")
    assert not rr.is_our_restore(restored, rr.FROM_POINT, "", "table/users")
    assert not rr.is_our_restore({}, rr.FROM_BACKUP, ARN, "table/orders")  # made by hand


SOURCE = rr.table_settings(
    {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}, "DeletionProtectionEnabled": True},
    {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"},
    {"PointInTimeRecoveryDescription": {"PointInTimeRecoveryStatus": "ENABLED"}},
    [{"Key": "team", "Value": "core"}, {"Key": "aws:cloudformation:stack-name", "Value": "s"}])


def test_settings_are_read_from_the_descriptions_and_aws_tags_are_not_copied() -> None:
    assert rr.TableSettings("expires_at", "NEW_IMAGE", True, True, {"team": "core"}) == SOURCE
    assert rr.table_settings({}, {"TimeToLiveStatus": "DISABLED"}, {}, []) == rr.TableSettings()


def test_what_the_source_has_and_the_target_lacks_is_applied_in_order() -> None:
    assert rr.copied(SOURCE) == ["ttl", "pitr", "tags", "stream", "deletion_protection"]
    assert rr.settings_changes(SOURCE, rr.TableSettings()) == rr.copied(SOURCE)
    assert rr.settings_changes(SOURCE, SOURCE) == []  # a poll that goes on after applying some: nothing twice
    half = rr.TableSettings(ttl_attribute="expires_at", pitr=True, tags={"team": "core"})
    assert rr.settings_changes(SOURCE, half) == ["stream", "deletion_protection"]
    assert rr.settings_changes(rr.TableSettings(), rr.TableSettings()) == []
    assert rr.settings_changes(SOURCE, rr.TableSettings(tags={"team": "other"}))[2] == "tags"


def test_a_point_in_time_is_compared_with_the_sources_key_schema_and_indexes_and_no_count() -> None:
    source = {"KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}], "ItemCount": 99}
    shape = rr.source_shape(source)
    assert shape.key_schema == (("PK", "HASH"),) and shape.items == 0
    restored = {"KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}]}
    assert rr.compare(shape, restored_shape(source, 0, True)) == []
    assert rr.compare(shape, restored_shape(restored, 5, True))  # another key schema
