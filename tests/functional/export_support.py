"""Arrange helpers for the export tests: a bucket, tables with point-in-time recovery, moto's exports finished."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from chalicelib.aws import Deps
from tests.fixtures import ACCOUNT, Aws, use_settings
from tests.functional.backup_support import create_tables

BUCKET = "timekeeper-exports"


def export_stage(deps: Deps, tables: Iterable[str], pitr: Iterable[str] | None = None, bucket: str = BUCKET,
                 make_bucket: bool = True, **settings: Any) -> list[str]:
    """Tables (PITR on for ``pitr``, default all), the bucket, and the stage's export settings."""
    names = list(tables)
    create_tables(deps, names)
    for name in names if pitr is None else pitr:
        deps.clients.dynamodb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
    for name in names:
        deps.clients.dynamodb.put_item(TableName=name, Item={"PK": {"S": "a"}, "n": {"N": "1"}})
        deps.clients.dynamodb.put_item(TableName=name, Item={"PK": {"S": "b"}, "n": {"N": "2"}})
    if make_bucket:
        deps.clients.s3.create_bucket(Bucket=bucket)
    use_settings(deps, export_bucket=bucket, export_tables=tuple(names), **settings)
    return names


def moto_exports(deps: Deps) -> dict[str, Any]:
    """moto's exports by ARN (threads: ``finish`` waits for them)."""
    from moto.dynamodb.models import dynamodb_backends

    exports: dict[str, Any] = dynamodb_backends[ACCOUNT][deps.settings.region].table_exports
    return exports


def finish_exports(deps: Deps) -> None:
    for export in moto_exports(deps).values():
        export.join(timeout=10)


def export_polls(aws: Aws, deps: Deps) -> list[dict[str, Any]]:
    """The export poll messages on the monitor queue (drained)."""
    bodies = [json.loads(body) for body, _ in aws.sent(deps.settings.backup_monitor_queue)]
    return [b for b in bodies if "export_run" in b]
