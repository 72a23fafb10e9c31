"""The backup routes' domain side: start a run now, list runs, show one."""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from chalicelib.backups.store import RunStore
from chalicelib.backups.trigger import start_run
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
            unknown = [t for t in tables if not _table_exists(deps, t)]
            if unknown:
                raise bad_request("tables", f"unknown tables: {', '.join(unknown)}")
    run = start_run(deps, trigger="api", tables=tables)
    return 202, {"run_id": run.run_id, "status": run.status,
                 "tables": sorted(run.tables), "href": f"/backups/runs/{run.run_id}"}


def recent(deps: Deps, query: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    query = query or {}
    reject_unknown(query, {"limit"})
    limit = 20
    if "limit" in query:
        if not re.fullmatch(r"[0-9]{1,4}", query["limit"]) or not 1 <= int(query["limit"]) <= RECENT_LIMIT_MAX:
            raise bad_request("limit", f"limit must be a whole number from 1 to {RECENT_LIMIT_MAX}")
        limit = int(query["limit"])
    runs = RunStore(deps).recent(limit)
    return 200, {"runs": [r.view() for r in runs]}


def show(deps: Deps, run_id: str) -> tuple[int, dict[str, Any]]:
    if not RUN_ID.fullmatch(run_id):  # never a key DynamoDB would refuse (over 2048 bytes, not UTF-8)
        raise not_found("backup run", run_id[:100])
    run = RunStore(deps).get(run_id)
    if run is None:
        raise not_found("backup run", run_id)
    return 200, run.view()


__all__ = ["ApiError", "recent", "show", "start"]
