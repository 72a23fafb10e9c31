"""The backup monitor queue's messages: poll messages and the start watch.

- ``{"run_id", "poll": n}``: check run ``run_id``; each number is claimed once on the run.
  While the run may be polled unclaimed (RUNNING, in pages, every table's backup started: ``Creating``),
  the message also carries its ``started_at`` and the number of its ``backups``: a poll that finds them
  all still CREATING reads and writes nothing of the run (monitor.py).
- ``{"export_run", "poll": n}``: check export run ``export_run`` (exports.py); each number is claimed once on it.
- ``{"restore_id", "poll": n}``: check restore ``restore_id`` (restore.py); each number is claimed once on it.
- ``{"run_id", "watch": true}``: sent when a run is created, delayed by the lease (at most
  SQS's 900 s). If the run is still STARTING once its lease has passed, its starter died
  and the monitor takes the start over; otherwise the watch is dropped. A starter out of
  time sends one with no delay after handing the rest of its tables on (trigger.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from chalicelib.aws import Deps
from chalicelib.backups.retry import retry_transient
from chalicelib.backups.store import RUNNING, Run

MAX_DELAY_SECONDS = 900  # SQS's DelaySeconds limit


class BadMessage(ValueError):
    pass


@dataclass(frozen=True)
class Creating:
    """What a poll needs to tell, from the listing alone, that every backup of a run is still CREATING: the
    run's start (its backups' names, the listing's bound, the deadline) and how many backups it started."""

    started_at: datetime
    backups: int


@dataclass(frozen=True)
class MonitorMessage:
    run_id: str
    poll: int = 0
    watch: bool = False
    creating: Creating | None = None


def creating_of(run: Run) -> Creating | None:
    """The facts a poll message of ``run`` carries: only while a poll may go unclaimed (RUNNING, its tables
    in pages, at least one backup started, no table that failed to start and may still need its alert)."""
    backups = run.counts.get("backups", 0)
    if run.status != RUNNING or not run.paged or run.counts.get("failed", 0) or not backups:
        return None
    return Creating(run.started_at, backups)


@dataclass(frozen=True)
class RestoreMessage:
    restore_id: str
    poll: int = 0


@dataclass(frozen=True)
class ExportMessage:
    """``{"export_run", "poll": n}``: check export run ``export_run`` (exports.py); each number claimed once."""

    run_id: str
    poll: int = 0


def parse_message(body: str) -> MonitorMessage | RestoreMessage | ExportMessage:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadMessage(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadMessage("body must be a JSON object")
    run_id, poll, watch = data.get("run_id"), data.get("poll", 0), data.get("watch", False)
    if "export_run" in data and run_id is None:
        export_run = data["export_run"]
        if not isinstance(export_run, str) or not export_run:
            raise BadMessage("export_run must be a non-empty string")
        if not isinstance(poll, int) or isinstance(poll, bool) or poll < 0:
            raise BadMessage("poll must be a whole number >= 0")
        return ExportMessage(export_run, poll)
    if "restore_id" in data and run_id is None:
        restore_id = data["restore_id"]
        if not isinstance(restore_id, str) or not restore_id:
            raise BadMessage("restore_id must be a non-empty string")
        if not isinstance(poll, int) or isinstance(poll, bool) or poll < 0:
            raise BadMessage("poll must be a whole number >= 0")
        return RestoreMessage(restore_id, poll)
    if not isinstance(run_id, str) or not run_id:
        raise BadMessage("run_id must be a non-empty string")
    if not isinstance(poll, int) or isinstance(poll, bool) or poll < 0:
        raise BadMessage("poll must be a whole number >= 0")
    if not isinstance(watch, bool):
        raise BadMessage("watch must be true or false")
    return MonitorMessage(run_id, poll, watch, _creating(data))


def _creating(data: dict[str, object]) -> Creating | None:
    started_at, backups = data.get("started_at"), data.get("backups")
    if started_at is None and backups is None:
        return None
    if not isinstance(backups, int) or isinstance(backups, bool) or backups < 1:
        raise BadMessage("backups must be a whole number >= 1")
    try:
        started = datetime.fromisoformat(started_at) if isinstance(started_at, str) else None
    except ValueError:
        started = None
    if started is None or started.tzinfo is None:
        raise BadMessage("started_at must be an ISO-8601 time with its offset")
    return Creating(started, backups)


def _send(deps: Deps, body: dict[str, object], delay: int) -> None:
    url = deps.queue_url(deps.settings.backup_monitor_queue)
    retry_transient(lambda: deps.clients.sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps(body), DelaySeconds=delay), deps.sleep)


def send_poll_message(deps: Deps, run_id: str, poll: int, creating: Creating | None = None,
                      delay: int | None = None) -> None:
    """Poll ``poll`` of the run, delayed by BACKUP_MONITOR_DELAY_SECONDS (or ``delay``); ``creating``: the run's
    start and backup count while all its backups are CREATING (a poll that finds them so claims nothing)."""
    body: dict[str, object] = {"run_id": run_id, "poll": poll}
    if creating is not None:
        body.update(started_at=creating.started_at.isoformat(), backups=creating.backups)
    _send(deps, body, deps.settings.backup_monitor_delay_seconds if delay is None else delay)


def send_watch_message(deps: Deps, run_id: str, delay: int | None = None) -> None:
    """The start watch, delayed by the lease (at most SQS's 900 s), or by ``delay`` (a start handed on)."""
    _send(deps, {"run_id": run_id, "watch": True},
          min(deps.settings.backup_run_lease_seconds, MAX_DELAY_SECONDS) if delay is None else delay)


def send_restore_poll(deps: Deps, restore_id: str, poll: int) -> None:
    """The next poll of a restore, delayed by BACKUP_MONITOR_DELAY_SECONDS."""
    _send(deps, {"restore_id": restore_id, "poll": poll}, deps.settings.backup_monitor_delay_seconds)
