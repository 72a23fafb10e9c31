"""Settings: defaults, and bad values fail fast naming the variable and the value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chalicelib.settings import MIN_API_TOKEN, VARIABLES, Settings, SettingsError


def test_defaults() -> None:
    s = Settings.from_env({})
    assert s.backup_schedule == "rate(1 day)"
    assert s.backup_monitor_delay_seconds == 300
    assert s.backup_deadline_minutes == 360
    assert s.backup_retention_days == 3 and s.backup_min_keep == 2
    assert s.backup_name_prefix == "timekeeper-local"  # timekeeper-<STAGE>
    assert s.due_attribute == "run_at" and s.ttl_attribute == "expires_at"
    assert s.default_strategy == "exact"


@pytest.mark.parametrize(("name", "value"), [
    ("BACKUP_SCHEDULE", "every day"),
    ("BACKUP_SCHEDULE", "rate(0 days)"),
    ("BACKUP_SCHEDULE", "rate(1 days)"),
    ("BACKUP_SCHEDULE", "cron(0 12 * * * *)"),
    ("BACKUP_SCHEDULE", "cron(61 12 * * ? *)"),
    ("PROCESSOR_SCHEDULE", "cron(0 12 * *)"),
    ("BACKUP_MONITOR_DELAY_SECONDS", "901"),
    ("BACKUP_MONITOR_DELAY_SECONDS", "five"),
    ("BACKUP_MIN_KEEP", "0"),
    ("BACKUP_RUN_LEASE_SECONDS", "60"),     # shorter than the trigger's 300 s timeout
    ("BACKUP_RUN_LEASE_SECONDS", "3600"),   # longer than the monitor's SQS redeliveries last
    ("BACKUP_TABLE_PATTERN", "(unclosed"),
    ("BACKUP_TABLE_TAG", "novalue"),
    ("BACKUP_TABLES", "ok,x"),
    ("ALERT_TOPIC_ARN", "my-topic"),
    ("DEFAULT_STRATEGY", "sometimes"),
    ("AWS_RETRY_MODE", "legacy"),
    ("API_AUTH", "basic"),
    ("BACKUP_VERIFY", "0"),
    ("BACKUP_VERIFY", "51"),                # AWS runs at most 50 restores at once
    ("BACKUP_VERIFY", "orders,x"),
    ("BACKUP_VERIFY", ",".join(f"table{i:03d}" for i in range(51))),
    ("BACKUP_REQUIRE_PITR", "yes"),
])
def test_a_bad_value_names_the_variable_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env({name: value})
    assert error.value.name == name
    assert name in str(error.value) and repr(value) in str(error.value)


@pytest.mark.parametrize("expression", [
    "rate(1 day)", "rate(5 minutes)", "rate(1 hour)", "rate(12 hours)",
    "cron(0 12 * * ? *)", "cron(15 10 ? * MON-FRI *)", "cron(0/15 * * * ? *)", "cron(0 18 L * ? *)",
    "cron(0 9 ? * 2#1 *)", "cron(0 8 1W * ? 2026-2030)", "cron(0 0 ? * 6L *)", "cron(5,35 14 * JAN,MAR ? *)",
])
def test_valid_schedules_are_accepted(expression: str) -> None:
    assert Settings.from_env({"BACKUP_SCHEDULE": expression}).backup_schedule == expression


def test_token_auth_needs_a_token() -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"API_AUTH": "token"})
    assert error.value.name == "API_TOKEN"


@pytest.mark.parametrize("stage", ["dev", "prod", "test"])
def test_a_stage_other_than_local_refuses_a_short_token_without_showing_it(stage: str) -> None:
    short = "x" * (MIN_API_TOKEN - 1)
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"STAGE": stage, "API_AUTH": "token", "API_TOKEN": short})
    assert error.value.name == "API_TOKEN"
    assert f"at least {MIN_API_TOKEN} characters" in str(error.value) and short not in str(error.value)
    long_enough = "x" * MIN_API_TOKEN
    assert Settings.from_env({"STAGE": stage, "API_AUTH": "token", "API_TOKEN": long_enough}).api_token == long_enough


def test_the_local_stage_keeps_the_token_it_is_given() -> None:
    assert Settings.from_env({"STAGE": "local", "API_AUTH": "token", "API_TOKEN": "tour"}).api_token == "tour"


@pytest.mark.parametrize(("value", "sample", "tables"), [
    ("", 0, ()), ("none", 0, ()), ("NONE", 0, ()), ("3", 3, ()), ("50", 0 + 50, ()),
    ("orders, users,orders", 0, ("orders", "users")),
])
def test_backup_verify_is_none_a_number_of_tables_or_a_list(value: str, sample: int, tables: tuple[str, ...]) -> None:
    verify = Settings.from_env({"BACKUP_VERIFY": value}).backup_verify
    assert (verify.sample, verify.tables, verify.enabled) == (sample, tables, bool(sample or tables))


def test_table_lists_are_deduplicated() -> None:
    assert Settings.from_env({"BACKUP_TABLES": "aaa, bbb,aaa,,"}).backup_tables == ("aaa", "bbb")


def test_the_configuration_page_documents_every_variable() -> None:
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", page, flags=re.MULTILINE))
    assert {v.name for v in VARIABLES} <= documented


@pytest.mark.parametrize("pattern", ["*", "<table>", "<table>*", "*<table>*", "<table>-*", "*-r*<table>"])
def test_a_restore_target_pattern_that_pins_no_fixed_part_of_the_name_is_refused(pattern: str) -> None:
    """On a stage that selects tables by pattern, `<table>` is `*` in the IAM policies: these would grant a
    restore's item writes and Scan on every table of the account."""
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"RESTORE_TARGET_PATTERN": pattern})
    assert error.value.name == "RESTORE_TARGET_PATTERN" and "pins no fixed part" in str(error.value)


@pytest.mark.parametrize("pattern", ["<table>-restored-*", "restore-<table>", "*-copy", "<table>.bak"])
def test_a_restore_target_pattern_with_a_fixed_part_is_accepted(pattern: str) -> None:
    assert Settings.from_env({"RESTORE_TARGET_PATTERN": pattern}).restore_target_pattern == pattern


@pytest.mark.parametrize("value", ["1", "3999", "40001", "-1", "warm"])
def test_the_state_tables_warm_write_units_are_0_or_from_a_new_tables_4000_to_the_tables_default_quota(
        value: str) -> None:
    with pytest.raises(SettingsError, match=r"STATE_TABLE_WARM_WRITE_UNITS='.*' is invalid: expected 0 or a whole"):
        Settings.from_env({"STATE_TABLE_WARM_WRITE_UNITS": value})
    assert Settings.from_env({"STATE_TABLE_WARM_WRITE_UNITS": "12000"}).state_table_warm_write_units == 12_000
    assert Settings.from_env({}).state_table_warm_write_units == 0
