"""docs/backups.md's AWS CLI restore and catalog commands, run as written through the pinned AWS CLI against
the offline runtime, on a stage whose calendar retention (BACKUP_RETENTION) the catalog explains."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from chalicelib.backups import retention, rules
from chalicelib.settings import Settings
from local.client import wait_until
from local.demo import Demo, demo_for
from local.stage import PROJECT_DIR, LocalStage
from tests.e2e.stage_support import demo_stage

pytestmark = pytest.mark.e2e
CALENDAR = "daily=3,weekly=2"
REGION = "us-east-1"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    with demo_stage(BACKUP_RETENTION=CALENDAR) as started:
        yield started


@pytest.fixture
def demo(stage: LocalStage) -> Demo:
    return demo_for(stage)


def tag() -> str:
    return uuid.uuid4().hex[:6]


def doc_cli_commands(page: str, after: str, names: dict[str, str]) -> list[list[str]]:
    """The ``aws`` commands of the first code block after the line starting ``after`` in docs/<page>, one argv
    each (continuation lines joined, comments dropped), each of ``names`` (a word) replaced, in order."""
    text = (DOCS / page).read_text()
    block = text[text.index("\n" + after):].split("```")[1]
    for placeholder, value in names.items():
        block = re.sub(rf"(?<![\w-]){re.escape(placeholder)}(?![\w-])", value, block)
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.startswith("aws ")]


# .venv/bin/aws's own entry point, once for each command, all in one process (a process a command: 1 s each),
# its sessions reading botocore's data files through one loader (local/shared_loaders.py: parsed once, not per command)
AWS_CLI = """import json, sys
from local import shared_loaders
shared_loaders.install()
from awscli.clidriver import create_clidriver
for n, argv in enumerate(json.loads(sys.stdin.read())):
    if create_clidriver().main(argv) != 0:
        sys.exit(f"command {n + 1} failed: aws {' '.join(argv)}")
"""


def aws_cli(stage: LocalStage, commands: list[list[str]]) -> str:
    """``commands`` (each ``aws ...``) through the pinned AWS CLI, at the stage's moto, its dummy credentials."""
    env = {"PATH": os.environ.get("PATH", ""), "AWS_ACCESS_KEY_ID": stage.environment["AWS_ACCESS_KEY_ID"],
           "AWS_SECRET_ACCESS_KEY": stage.environment["AWS_SECRET_ACCESS_KEY"], "AWS_DEFAULT_REGION": REGION,
           "AWS_MAX_ATTEMPTS": "1", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    argvs = [[*argv[1:], "--endpoint-url", stage.aws_endpoint] for argv in commands]
    done = subprocess.run([sys.executable, "-c", AWS_CLI], input=json.dumps(argvs), env=env, capture_output=True,
                          text=True, timeout=60, check=False, cwd=PROJECT_DIR)
    assert done.returncode == 0, done.stderr
    return done.stdout



def test_docs_cli_restore_of_a_runs_backup_and_the_calendar_retention_the_catalog_shows(stage: LocalStage,
                                                                                        demo: Demo) -> None:
    """docs/backups.md's AWS CLI restore, run as written (names substituted) on a backup POST /backups made, and its
    catalog's list-backups; that run's calendar retention (BACKUP_RETENTION) kept what the policy keeps, and
    GET /backups says why. (The API's restore to ACTIVE on this stage: make demo's flow 1, above.)"""
    settings = Settings.from_env(stage.environment)
    ddb = boto3.client("dynamodb", endpoint_url=stage.aws_endpoint, region_name=REGION)
    table, account = f"sample-cli-{tag()}", DEFAULT_ACCOUNT_ID
    ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
    targets = [f"{table}-restored-1", f"{table}-restored-pitr"]
    try:
        ddb.put_item(TableName=table, Item={"PK": {"S": "order-1"}})
        now = datetime.now(UTC)
        backends = dynamodb_backends[account][REGION].backups
        earlier: dict[int, rules.Backup] = {}
        for days in (1, 2, 3, 15, 16):  # earlier runs' backups, on earlier days (moto stamps now: rewritten)
            at = (now - timedelta(days=days)).replace(microsecond=0)
            name = rules.backup_name(settings.backup_name_prefix, table, at)
            arn = ddb.create_backup(TableName=table, BackupName=name)["BackupDetails"]["BackupArn"]
            backends[arn].creation_date_time = at.replace(tzinfo=None)
            earlier[days] = rules.Backup(arn, name, table, at, "AVAILABLE", "USER")

        started = demo.api.post("/backups", {"tables": [table]})
        assert started.status == 202, started.body
        href = f"/backups/runs/{started.body['run_id']}"

        def complete() -> dict[str, Any] | None:
            shown = demo.api.get(href).body
            return shown if shown.get("status") == "COMPLETE" else None
        run = wait_until(complete, 30.0, "the run to complete", 0.2)

        # the run's retention at the stage's calendar kept exactly what the policy keeps
        left = [rules.Backup(b["BackupArn"], b["BackupName"], b["TableName"], b["BackupCreationDateTime"],
                             b["BackupStatus"], b["BackupType"])
                for b in ddb.list_backups(TableName=table, BackupType="USER")["BackupSummaries"]]
        newest = rules.newest_first(left)[0]
        policy, prefix = retention.retention_policy(settings), settings.backup_name_prefix
        decided = rules.retention_verdicts([*earlier.values(), newest], now, policy, prefix, [table])
        assert {b.arn for b in left} == {v.backup.arn for v in decided if v.kept}, (left, decided)
        assert run["summary"]["deleted"] == len(decided) - len(left) >= 1, run["summary"]
        # whatever the weekday: today's (last good) and the two days before (daily=3) kept, 16 days ago not
        # (weekly=2: this ISO week and the newest other week that has one, 1-3 or 15 days ago)
        verdicts = {v.backup.arn: v for v in rules.retention_verdicts(left, datetime.now(UTC), policy, prefix,
                                                                       [table])}
        assert newest.arn not in {b.arn for b in earlier.values()} and earlier[16].arn not in verdicts
        catalog = demo.api.get(f"/backups?table={table}")
        assert catalog.status == 200, catalog.body
        shown = {b["arn"]: b for b in catalog.body["backups"]}
        assert set(shown) == set(verdicts)
        for arn, verdict in verdicts.items():  # the catalog says which rule keeps each one left
            assert verdict.kept and shown[arn]["kept"] == verdict.kept[0].value, (shown[arn], verdict)
            assert shown[arn]["expires_after"] is None, shown[arn]  # BACKUP_RETENTION_DAYS=0: none kept by age
        kept = [shown.get(b.arn, {}).get("kept") for b in (newest, earlier[1], earlier[2])]
        assert kept == ["last_good", "daily", "daily"], kept

        # the AWS CLI restore as docs/backups.md writes it, then the settings DynamoDB does not restore
        commands = doc_cli_commands("backups.md", "The AWS CLI equivalent", {
            "arn:aws:dynamodb:REGION:ACCOUNT:table/orders/backup/ID": newest.arn,
            "orders-restored-1": targets[0], "REGION": REGION, "ACCOUNT": account, "orders": table})
        assert [c[2] for c in commands] == ["restore-table-from-backup", "restore-table-to-point-in-time",
                                            "wait", "update-time-to-live", "update-continuous-backups",
                                            "tag-resource", "update-table", "update-table"]
        commands[1] = [targets[1] if a == targets[0] else a for a in commands[1]]  # the other way in: its own
        catalog_cli = doc_cli_commands("backups.md", "**Cost and order.**", {})
        assert catalog_cli == [["aws", "dynamodb", "list-backups", "--backup-type", "USER"]]
        listed, _ = json.JSONDecoder().raw_decode(aws_cli(stage, [*catalog_cli, *commands]))  # its answer first
        assert [b["BackupArn"] for b in listed["BackupSummaries"] if b["TableName"] == table] == [
            b.arn for b in reversed(rules.newest_first(left))]  # what the catalog shows, oldest first
        restored = ddb.describe_table(TableName=targets[0])["Table"]
        assert restored["TableStatus"] == "ACTIVE" and restored["RestoreSummary"]["SourceBackupArn"] == newest.arn
        assert restored["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        assert restored["DeletionProtectionEnabled"] is True
        assert ddb.describe_time_to_live(TableName=targets[0])["TimeToLiveDescription"] == {
            "TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
        pitr = ddb.describe_continuous_backups(TableName=targets[0])["ContinuousBackupsDescription"]
        assert pitr["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
        assert ddb.list_tags_of_resource(ResourceArn=restored["TableArn"])["Tags"] == [
            {"Key": "team", "Value": "core"}]
        assert ddb.get_item(TableName=targets[0], Key={"PK": {"S": "order-1"}}).get("Item")
        assert ddb.describe_table(TableName=targets[1])["Table"]["TableStatus"] == "ACTIVE"
    finally:
        for name in [*targets, table]:
            with contextlib.suppress(ddb.exceptions.ResourceNotFoundException):
                ddb.update_table(TableName=name, DeletionProtectionEnabled=False)
                ddb.delete_table(TableName=name)
