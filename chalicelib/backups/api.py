"""The backup routes' domain side: start a run now, list runs, show one."""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from chalicelib.backups.export_rules import EXPORT_RUN_ID
from chalicelib.backups.store import RunStore
from chalicelib.backups.trigger import start_run, tagged_tables
from chalicelib.throttle import error_code
from chalicelib.web import ApiError, bad_request, not_found, reject_unknown

RECENT_LIMIT_MAX = 100
MAX_TABLES = 100  # one request's run: CreateBackup at BACKUP_CREATE_RATE stays well inside API Gateway's 29 s
RUN_ID = re.compile(r"[0-9]{8}T[0-9]{6}Z-[a-z0-9-]{1,40}")  # as backups.store names runs; ASCII digits only
TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}\Z")  # \Z: "$" would also match before a final newline


def _table_exists(deps: Deps, table: str) -> bool:
    try:
        deps.clients.dynamodb.describe_table(TableName=table)
        return True
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return False
        raise


def not_allowed(deps: Deps, tables: list[str]) -> list[str]:
    """The tables of ``tables`` this stage may not back up on demand.

    Allowed: BACKUP_TABLES and BACKUP_API_TABLES (listed by name), and the tables the
    stage's BACKUP_TABLE_PATTERN matches or that carry BACKUP_TABLE_TAG, except the
    app's own state and tasks tables, which only a listing by name allows.
    """
    s = deps.settings
    listed = set(s.backup_tables) | set(s.backup_api_tables)
    own = {s.state_table, s.tasks_table}
    rest = [t for t in tables if t not in listed]
    if s.backup_table_pattern is not None:
        rest = [t for t in rest if t in own or not s.backup_table_pattern.fullmatch(t)]
    if s.backup_table_tag is not None:
        candidates = [t for t in rest if t not in own and _table_exists(deps, t)]
        tagged = set(tagged_tables(deps, candidates, *s.backup_table_tag))
        rest = [t for t in rest if t not in tagged]
    return rest


def start(deps: Deps, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    tables: list[str] | None = None
    if body is not None:
        reject_unknown(body, {"tables"})
        if "tables" in body:
            raw = body["tables"]
            if not isinstance(raw, list) or not raw or not all(isinstance(t, str) and t for t in raw):
                raise bad_request("tables", "tables must be a non-empty list of table names")
            if len(raw) > MAX_TABLES:
                raise bad_request("tables", f"at most {MAX_TABLES} tables per request, got {len(raw)}")
            invalid = [t for t in raw if not TABLE_NAME.match(t)]
            if invalid:
                raise bad_request("tables", f"not table names (3-255 of A-Z a-z 0-9 _ . -): {', '.join(invalid)}")
            tables = list(dict.fromkeys(raw))
            refused = not_allowed(deps, tables)
            if refused:
                raise bad_request("tables", "tables this stage does not back up (BACKUP_TABLES, BACKUP_TABLE_PATTERN, "
                                  f"BACKUP_TABLE_TAG or BACKUP_API_TABLES): {', '.join(refused)}")
            unknown = [t for t in tables if not _table_exists(deps, t)]
            if unknown:
                raise bad_request("tables", f"unknown tables: {', '.join(unknown)}")
    run = start_run(deps, trigger="api", tables=tables)
    return 202, {"run_id": run.run_id, "status": run.status,
                 "tables": sorted(run.tables), "href": f"/backups/runs/{run.run_id}"}


def query_limit(query: dict[str, str], default: int, maximum: int) -> int:
    """A listing's ``limit`` query parameter (``default`` when absent), or a 400 naming it."""
    if "limit" not in query:
        return default
    if not re.fullmatch(r"[0-9]{1,4}", query["limit"]) or not 1 <= int(query["limit"]) <= maximum:
        raise bad_request("limit", f"limit must be a whole number from 1 to {maximum}")
    return int(query["limit"])


def recent(deps: Deps, query: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    query = query or {}
    reject_unknown(query, {"limit"})
    limit = query_limit(query, 20, RECENT_LIMIT_MAX)
    runs = RunStore(deps).recent(limit, with_tables=False)
    body: dict[str, Any] = {"runs": [r.view(with_tables=False) for r in runs]}
    if deps.settings.export_bucket:  # the export runs beside the backup runs
        from chalicelib.backups import exports
        body["export_runs"] = exports.recent_runs(deps, limit)
    return 200, body


def show(deps: Deps, run_id: str) -> tuple[int, dict[str, Any]]:
    if EXPORT_RUN_ID.fullmatch(run_id):  # an export run: its exports
        from chalicelib.backups import exports
        view = exports.run_view(deps, run_id)
        if view is None:
            raise not_found("export run", run_id)
        return 200, view
    if not RUN_ID.fullmatch(run_id):  # never a key DynamoDB would refuse (over 2048 bytes, not UTF-8)
        raise not_found("backup run", run_id[:100])
    run = RunStore(deps).get(run_id)
    if run is None:
        raise not_found("backup run", run_id)
    return 200, run.view()


__all__ = ["ApiError", "recent", "show", "start"]
