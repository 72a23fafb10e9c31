"""The backup monitor queue's messages: poll messages and the start watch.

- ``{"run_id", "poll": n}``: check run ``run_id``; each number is claimed once on the run.
- ``{"restore_id", "poll": n}``: check restore ``restore_id`` (restore.py); each number is claimed once on it.
- ``{"run_id", "watch": true}``: sent when a run is created, delayed by the lease (at most
  SQS's 900 s). If the run is still STARTING once its lease has passed, its starter died
  and the monitor takes the start over; otherwise the watch is dropped. A starter out of
  time sends one with no delay after handing the rest of its tables on (trigger.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from chalicelib.aws import Deps
from chalicelib.backups.retry import retry_transient

MAX_DELAY_SECONDS = 900  # SQS's DelaySeconds limit


class BadMessage(ValueError):
    pass


@dataclass(frozen=True)
class MonitorMessage:
    run_id: str
    poll: int = 0
    watch: bool = False


@dataclass(frozen=True)
class RestoreMessage:
    restore_id: str
    poll: int = 0


def parse_message(body: str) -> MonitorMessage | RestoreMessage:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadMessage(f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadMessage("body must be a JSON object")
    run_id, poll, watch = data.get("run_id"), data.get("poll", 0), data.get("watch", False)
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
    return MonitorMessage(run_id, poll, watch)


def _send(deps: Deps, body: dict[str, object], delay: int) -> None:
    url = deps.queue_url(deps.settings.backup_monitor_queue)
    retry_transient(lambda: deps.clients.sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps(body), DelaySeconds=delay), deps.sleep)


def send_poll_message(deps: Deps, run_id: str, poll: int, delay: int | None = None) -> None:
    """Poll ``poll`` of the run, delayed by BACKUP_MONITOR_DELAY_SECONDS (or ``delay``)."""
    _send(deps, {"run_id": run_id, "poll": poll},
          deps.settings.backup_monitor_delay_seconds if delay is None else delay)


def send_watch_message(deps: Deps, run_id: str, delay: int | None = None) -> None:
    """The start watch, delayed by the lease (at most SQS's 900 s), or by ``delay`` (a start handed on)."""
    _send(deps, {"run_id": run_id, "watch": True},
          min(deps.settings.backup_run_lease_seconds, MAX_DELAY_SECONDS) if delay is None else delay)


def send_restore_poll(deps: Deps, restore_id: str, poll: int) -> None:
    """The next poll of a restore, delayed by BACKUP_MONITOR_DELAY_SECONDS."""
    _send(deps, {"restore_id": restore_id, "poll": poll}, deps.settings.backup_monitor_delay_seconds)
