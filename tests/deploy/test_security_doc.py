"""docs/security.md's policy table is what deploy/iam.py renders: every action of every function, no more, no less.

The table (``| function | actions | resources |``) has a row per function and rows that add to a function's
actions under a condition its first cell names: ``BACKUP_VERIFY`` (a stage that verifies restores), ``lazy or
interval`` (a task source of those strategies), ``TASK_WEBHOOK_SECRETS`` (a stage whose webhooks sign with
secrets), ``selects tables`` (a stage with tables to back up, which restore on demand may restore; and
``TASK_SOURCES`` too: a stage that also declares task sources),
``TASK_ACTION_TARGET_ARNS`` (naming functions, buses and state machines), ``Deny`` (the function's explicit
Deny); ``every function`` rows
apply to all. The actions are the backticked ``service:Action`` names of the second cell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from chalicelib.settings import Settings
from deploy import iam, stage

ROOT = Path(__file__).resolve().parents[2]
ACTION = re.compile(r"`([a-z0-9-]+:[A-Za-z]+)`")
HEADER = "| function | actions | resources |"
EVERY = "every function"
SOURCE = "source_NAME"
VERIFY, LAZY_OR_INTERVAL, WEBHOOK, RESTORE = "verify", "lazy or interval", "webhook secrets", "selects tables"
TARGETS = "TASK_ACTION_TARGET_ARNS"
RESTORE_SOURCES = "selects tables and declares TASK_SOURCES"
EXPORTS, EXPORT_CHOICE, EXPORT_RESTORE = "EXPORT_BUCKET", "EXPORT_TABLES", "selects tables and sets EXPORT_BUCKET"


class Row(NamedTuple):
    function: str
    condition: str  # "", VERIFY, LAZY_OR_INTERVAL, WEBHOOK, RESTORE, RESTORE_SOURCES, TARGETS or an EXPORT one
    effect: str     # Allow or Deny
    actions: frozenset[str]


def documented_rows(text: str) -> list[Row]:
    lines = text.splitlines()
    start = lines.index(HEADER) + 2  # the header and its --- line
    rows: list[Row] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        first, actions, _resources = (cell.strip() for cell in line.strip().strip("|").split(" | "))
        named = re.match(r"`([a-z_A-Z]+)`", first)
        function = named[1] if named else first
        condition = (VERIFY if "BACKUP_VERIFY" in first else LAZY_OR_INTERVAL if LAZY_OR_INTERVAL in first
                     else WEBHOOK if "TASK_WEBHOOK_SECRETS" in first
                     else EXPORT_CHOICE if EXPORT_CHOICE in first
                     else EXPORT_RESTORE if RESTORE in first and EXPORTS in first else EXPORTS if EXPORTS in first
                     else RESTORE_SOURCES if RESTORE in first and "TASK_SOURCES" in first else RESTORE if RESTORE in first
                     else TARGETS if TARGETS in first else "")
        rows.append(Row(function, condition, "Deny" if "Deny" in first else "Allow",
                        frozenset(ACTION.findall(actions))))
    return rows


ROWS = documented_rows((ROOT / "docs" / "security.md").read_text())


def documented(rows: list[Row], function: str, effect: str, conditions: Iterable[str] = ()) -> set[str]:
    wanted = {"", *conditions}
    return {a for row in rows if row.function in (function, EVERY) and row.effect == effect
            and row.condition in wanted for a in row.actions}


def differences(rows: list[Row], settings: Settings, conditions: Iterable[str] = ()) -> list[str]:
    """What the table gets wrong about the policies rendered for ``settings`` (its ``conditions`` hold)."""
    out: list[str] = []
    for function, policy in iam.function_policies(settings, iam.Account()).items():
        source = settings.source(function.removeprefix("source_")) if function.startswith("source_") else None
        name = SOURCE if source is not None else function
        extra = (LAZY_OR_INTERVAL,) if source is not None and source.strategy in ("lazy", "interval") else ()
        for effect in ("Allow", "Deny"):
            said, granted = documented(rows, name, effect, (*conditions, *extra)), set(iam.actions_of(policy, effect))
            if said != granted:
                out.append(f"{function} ({effect}): missing from the docs {sorted(granted - said)}, "
                           f"not in the policy {sorted(said - granted)}")
    return out


SOURCES: dict[str, dict[str, Any]] = {
    "appointments": {"table": "appointments", "strategy": "exact", "due_attribute": "due"},
    "sessions": {"table": "sessions", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"],
                 "recurrence": "rate(1 day)"},
    "slots": {"table": "slots", "strategy": "interval", "bucket_index": "slot-index", "bucket_attribute": "slot",
              "key": ["id"]},
}
STREAMS = {name: f"arn:aws:dynamodb:us-east-1:123456789012:table/{s['table']}/stream/2026-01-01T00:00:00.000"
           for name, s in SOURCES.items()}


def stage_settings(**changes: str) -> Settings:
    return Settings.from_env({**stage.environment(stage.load_config(), "prod"), **changes})


CASES = {
    "prod": (stage_settings(), ()),
    "wildcard action targets": (stage_settings(TASK_ACTION_TARGET_ARNS="arn:aws:sqs:*:*:*,arn:aws:sns:*:*:*"), ()),
    "every kind of action target": (stage_settings(TASK_ACTION_TARGET_ARNS=(
        "arn:aws:sqs:*:*:*,arn:aws:sns:*:*:*,arn:aws:lambda:*:*:function:*,arn:aws:events:*:*:event-bus/*,"
        "arn:aws:states:*:*:stateMachine:*")), (TARGETS,)),
    "verifying named tables": (stage_settings(BACKUP_VERIFY="2", BACKUP_TABLES="orders,users"), (VERIFY, RESTORE)),
    "verifying a pattern's tables": (stage_settings(BACKUP_VERIFY="1", BACKUP_TABLE_PATTERN="app-.*"), (VERIFY, RESTORE)),
    "webhook secrets": (stage_settings(TASK_WEBHOOK_SECRETS="ssm:/tk/hook,secretsmanager:tk/hook"), (WEBHOOK,)),
    "restoring the API's tables": (stage_settings(BACKUP_API_TABLES="orders"), (RESTORE,)),
    "task sources": (stage_settings(TASK_SOURCES=json.dumps(SOURCES), TASK_SOURCE_STREAMS=json.dumps(STREAMS)), ()),
    "restoring beside task sources": (stage_settings(BACKUP_TABLE_PATTERN="app-.*", TASK_SOURCES=json.dumps(SOURCES),
                                                     TASK_SOURCE_STREAMS=json.dumps(STREAMS)), (RESTORE, RESTORE_SOURCES)),
    "exports of named tables": (stage_settings(EXPORT_BUCKET="vault", EXPORT_TABLES="orders"), (EXPORTS,)),
    "exports of a pattern's tables, restored from": (stage_settings(
        EXPORT_BUCKET="vault", EXPORT_BUCKET_OWNER="210987654321", BACKUP_TABLE_PATTERN="app-.*"),
        (EXPORTS, EXPORT_CHOICE, RESTORE, EXPORT_RESTORE)),
    "exports of verified tables": (stage_settings(EXPORT_BUCKET="vault", BACKUP_TABLES="orders", BACKUP_VERIFY="1"),
                                   (EXPORTS, RESTORE, EXPORT_RESTORE, VERIFY)),
}


def test_the_table_documents_every_function_of_the_app() -> None:
    every = iam.function_names(stage_settings(EXPORT_BUCKET="vault"))  # with the export trigger
    assert {row.function for row in ROWS} == {*every, SOURCE, EVERY}
    assert all(row.actions for row in ROWS)


@pytest.mark.parametrize("case", CASES)
def test_no_policy_grants_what_unlocks_or_reconfigures_a_bucket_and_the_page_names_each(case: str) -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    assert [a for a in iam.NEVER_GRANTED if f"`{a}`" not in text] == []
    settings, _ = CASES[case]
    granted = {a for policy in iam.function_policies(settings, iam.Account()).values()
               for a in iam.actions_of(policy, "Allow")}
    assert granted & set(iam.NEVER_GRANTED) == set()


@pytest.mark.parametrize("case", CASES)
def test_each_functions_documented_actions_are_exactly_its_rendered_ones(case: str) -> None:
    settings, conditions = CASES[case]
    assert differences(ROWS, settings, conditions) == [], f"docs/security.md's table vs deploy/iam.py, {case}"


def test_an_action_missing_from_the_table_or_extra_in_it_is_a_difference() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("| `task_executor` |"))
    tampered = text.replace(line, line.replace("`dynamodb:GetItem`, `dynamodb:BatchGetItem`",
                                               "`dynamodb:DeleteItem`, `dynamodb:BatchGetItem`"))
    assert tampered != text
    assert differences(documented_rows(tampered), stage_settings()) == [
        "task_executor (Allow): missing from the docs ['dynamodb:GetItem'], not in the policy ['dynamodb:DeleteItem']"]
