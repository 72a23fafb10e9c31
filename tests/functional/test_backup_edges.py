"""Backup edge cases: per-table errors, listing pages, describe fallback, pacing, logs, settings at import."""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from chalicelib.aws import Deps
from chalicelib.backups import monitor, trigger
from chalicelib.backups.store import RunStore
from chalicelib.settings import SettingsError
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import (
    Intercept,
    create_tables,
    failing_calls,
    monitor_messages,
    our_backup,
    set_status,
)

# ListBackups pages and honours its time bounds as on AWS; backups carry the injected clock's time.

ROOT = Path(__file__).parents[2]


def _start(aws: Aws, deps: Deps, tables: list[str]) -> str:
    create_tables(deps, [t for t in tables if not t.startswith("missing")])
    use_settings(deps, backup_tables=tuple(tables))
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(deps.clock(), "scheduled"))
    sent = monitor_messages(aws, deps)
    assert len(sent) == 1
    return sent[0][0]


@pytest.mark.parametrize(("code", "message", "reason"), [
    ("ResourceInUseException", "Table is being deleted", "table is being created, updated or deleted"),
    ("LimitExceededException", "There is a limit of 50 concurrent backups", "backup quota exceeded"),
    ("ContinuousBackupsUnavailableException", "Backups are being enabled", "backups are being enabled"),
])
def test_a_table_being_deleted_or_a_quota_error_is_recorded_and_alerted_and_the_run_goes_on(
        aws: Aws, deps: Deps, clock: FakeClock, code: str, message: str, reason: str) -> None:
    real = deps.clients.dynamodb_unretried

    def refuse_orders(**kwargs: Any) -> None:
        if kwargs["TableName"] == "orders":
            raise _error(code, message)

    deps.clients.dynamodb_unretried = Intercept(real, "create_backup", refuse_orders)  # type: ignore[assignment]
    body = _start(aws, deps, ["orders", "users"])

    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    assert run.tables["orders"].status == "FAILED" and reason in run.tables["orders"].error
    assert run.tables["users"].status == "PENDING" and run.tables["users"].backup_arn
    alerts = aws.alerts()
    assert [a["message"]["table"] for a in alerts] == ["orders"]
    assert code in alerts[0]["message"]["reason"]


def _error(code: str, message: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, "CreateBackup")


class PagedListing:
    """ListBackups as AWS pages it (moto returns one page): ``page_size`` summaries a call."""

    def __init__(self, client: Any, page_size: int, hide: set[str] | None = None) -> None:
        self._client = client
        self._page_size = page_size
        self._hide = hide or set()
        self.list_calls: list[dict[str, Any]] = []
        self.describe_calls: list[str] = []

    def list_backups(self, **kwargs: Any) -> dict[str, Any]:
        self.list_calls.append(kwargs)
        request = {k: v for k, v in kwargs.items() if k != "ExclusiveStartBackupArn"}
        summaries = [s for s in self._client.list_backups(**request)["BackupSummaries"]
                     if s["BackupArn"] not in self._hide]
        summaries.sort(key=lambda s: s["BackupArn"])
        start = kwargs.get("ExclusiveStartBackupArn")
        if start:
            summaries = [s for s in summaries if s["BackupArn"] > start]
        page = summaries[: self._page_size]
        response: dict[str, Any] = {"BackupSummaries": page}
        if len(summaries) > self._page_size:
            response["LastEvaluatedBackupArn"] = page[-1]["BackupArn"]
        return response

    def describe_backup(self, **kwargs: Any) -> Any:
        self.describe_calls.append(kwargs["BackupArn"])
        return self._client.describe_backup(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_statuses_come_from_every_listbackups_page_of_user_backups_since_the_run_start(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    tables = [f"t-{i}" for i in range(5)]
    started = clock.now
    body = _start(aws, deps, tables)
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    set_status(deps, run.tables["t-4"].backup_arn, "CREATING")
    paged = PagedListing(deps.clients.dynamodb, page_size=2)
    deps.clients.dynamodb = paged  # type: ignore[assignment]

    assert monitor.check_run(deps, body) == "requeued"

    assert len(paged.list_calls) == 3  # 5 backups, 2 a page
    first = paged.list_calls[0]
    assert first["BackupType"] == "USER"
    assert first["TimeRangeLowerBound"] <= started and started - first["TimeRangeLowerBound"] <= timedelta(minutes=5)
    assert [c.get("ExclusiveStartBackupArn") is None for c in paged.list_calls] == [True, False, False]
    assert paged.describe_calls == []
    statuses = {t: r.status for t, r in RunStore(deps).get(run.run_id).tables.items()}  # type: ignore[union-attr]
    assert statuses == {"t-0": "AVAILABLE", "t-1": "AVAILABLE", "t-2": "AVAILABLE", "t-3": "AVAILABLE",
                        "t-4": "PENDING"}


def test_describe_backup_is_asked_only_for_an_arn_the_listing_lacks(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start(aws, deps, ["orders", "users"])
    run = RunStore(deps).get(json.loads(body)["run_id"])
    assert run is not None
    lagging = run.tables["users"].backup_arn  # not yet in the (eventually consistent) listing
    paged = PagedListing(deps.clients.dynamodb, page_size=100, hide={lagging})
    deps.clients.dynamodb = paged  # type: ignore[assignment]

    assert monitor.check_run(deps, body) == "complete"

    assert paged.describe_calls == [lagging]
    done = RunStore(deps).get(run.run_id)
    assert done is not None and done.tables["users"].status == "AVAILABLE"


def test_delete_backup_calls_stay_under_the_delete_rate(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    body = _start(aws, deps, ["orders"])
    for i in range(12):
        our_backup(deps, "orders", clock.now - timedelta(days=5 + i))
    stamps: list[float] = []
    deps.clients.dynamodb.meta.events.register(
        "before-call.dynamodb.DeleteBackup", lambda **_: stamps.append(clock.now.timestamp()))

    assert monitor.check_run(deps, body) == "complete"

    assert len(stamps) == 11  # today's + the newest old one stay (BACKUP_MIN_KEEP=2)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 1 / deps.settings.backup_delete_rate - 1e-6


def test_a_run_whose_monitor_message_could_not_be_sent_gets_it_from_the_duplicate_trigger(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    run_id = trigger.new_run_id(clock.now, "scheduled")
    with failing_calls(deps, "sqs", "send_message"), pytest.raises(Exception, match="simulated"):
        trigger.start_run(deps, "schedule", run_id=run_id)
    assert monitor_messages(aws, deps) == []

    clock.advance(seconds=60)  # Lambda's async retry of the scheduled event
    trigger.start_run(deps, "schedule", run_id=run_id)
    trigger.start_run(deps, "schedule", run_id=run_id)

    sent = [json.loads(b) for b, _ in monitor_messages(aws, deps)]
    assert [(m["run_id"], m["poll"]) for m in sent] == [(run_id, 0)]


def test_an_api_run_left_without_its_monitor_gets_one_from_the_next_trigger(
        aws: Aws, deps: Deps, clock: FakeClock) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    with failing_calls(deps, "sqs", "send_message"), pytest.raises(Exception, match="simulated"):
        trigger.start_run(deps, "api", tables=["orders"])
    (stranded,) = RunStore(deps).recent(1)

    clock.advance(seconds=deps.settings.backup_run_lease_seconds + deps.settings.backup_monitor_delay_seconds + 1)
    trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))

    runs = {json.loads(b)["run_id"] for b, _ in monitor_messages(aws, deps)}
    assert stranded.run_id in runs and len(runs) == 2


def test_nothing_selected_is_a_structured_warning_log(aws: Aws, deps: Deps, clock: FakeClock) -> None:
    use_settings(deps, backup_table_pattern=re.compile("no-such-.*"))
    app_logger = logging.getLogger("timekeeper")
    records: list[logging.LogRecord] = []
    capture = _Capture(records)
    app_logger.addHandler(capture)
    try:
        trigger.start_run(deps, "schedule", run_id=trigger.new_run_id(clock.now, "scheduled"))
    finally:
        app_logger.removeHandler(capture)

    formatter = next(h.formatter for h in app_logger.handlers if h is not capture and h.formatter)
    lines = [json.loads(formatter.format(r)) for r in records]
    warning = next(line for line in lines if line["message"] == "no tables selected for backup")
    assert warning["level"] == "WARNING" and "service" not in warning  # one log group a function: no service key
    assert warning["run_id"].endswith("-scheduled")


class _Capture(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(("name", "value"), [("BACKUP_SCHEDULE", "every day"), ("BACKUP_SCHEDULE", "cron(0 12 * *)")])
def test_an_invalid_schedule_stops_the_import_of_app_py(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("app_bad_schedule", ROOT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(SettingsError, match=name):
        spec.loader.exec_module(module)
