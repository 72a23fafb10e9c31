"""Backup runs in the state table: one item per run, the tables' outcomes in a map.

Item: PK="BACKUP_RUN", SK=<run id> (run ids start with the UTC start time, so a
query in reverse order lists recent runs first).  Every state change is a
conditional write, so duplicate deliveries find the work done and stop.

Every write is retried on transient errors (retry.py) and stamps the item with
a fresh ``write_id``. When a write's condition fails, the item is read again:
if it holds this write's ``write_id``, the write was this worker's own earlier
attempt whose response was lost (or botocore's retry of it), and it counts as
done; otherwise another worker got there first.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.backups.retry import retry_transient

PARTITION = "BACKUP_RUN"
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[a-z0-9-]{1,40}$")

STARTING, RUNNING, FINISHING, COMPLETE = "STARTING", "RUNNING", "FINISHING", "COMPLETE"


@dataclass
class TableResult:
    table: str
    status: str                 # PENDING | AVAILABLE | FAILED | STUCK
    backup_arn: str = ""
    backup_name: str = ""
    error: str = ""
    alerted: bool = False

    def to_item(self) -> dict[str, Any]:
        return {"status": self.status, "backup_arn": self.backup_arn, "backup_name": self.backup_name,
                "error": self.error, "alerted": self.alerted}

    @classmethod
    def from_item(cls, table: str, item: dict[str, Any]) -> TableResult:
        return cls(table=table, status=item["status"], backup_arn=item.get("backup_arn", ""),
                   backup_name=item.get("backup_name", ""), error=item.get("error", ""),
                   alerted=bool(item.get("alerted", False)))


@dataclass
class Run:
    run_id: str
    started_at: datetime
    trigger: str
    status: str = STARTING
    tables: dict[str, TableResult] = field(default_factory=dict)
    poll: int = 0                      # the monitor message number the run expects next
    poll_queued: bool = False          # that message has been sent
    advanced_at: datetime | None = None  # when ``poll`` last changed
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": PARTITION, "SK": self.run_id, "run_id": self.run_id,
            "started_at": self.started_at.isoformat(), "trigger": self.trigger, "status": self.status,
            "tables": {t: r.to_item() for t, r in self.tables.items()}, "poll": self.poll,
            "poll_queued": self.poll_queued, "summary": self.summary,
        }
        if self.claimed_at:
            item["claimed_at"] = self.claimed_at.isoformat()
        if self.advanced_at:
            item["advanced_at"] = self.advanced_at.isoformat()
        if self.finished_at:
            item["finished_at"] = self.finished_at.isoformat()
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Run:
        return cls(
            run_id=item["run_id"],
            started_at=datetime.fromisoformat(item["started_at"]),
            trigger=item.get("trigger", ""),
            status=item["status"],
            tables={t: TableResult.from_item(t, r) for t, r in item.get("tables", {}).items()},
            poll=int(item.get("poll", 0)),
            poll_queued=bool(item.get("poll_queued", False)),
            advanced_at=datetime.fromisoformat(item["advanced_at"]) if item.get("advanced_at") else None,
            claimed_at=datetime.fromisoformat(item["claimed_at"]) if item.get("claimed_at") else None,
            finished_at=datetime.fromisoformat(item["finished_at"]) if item.get("finished_at") else None,
            summary=item.get("summary", {}),
        )

    def view(self) -> dict[str, Any]:
        """What the API shows of a run."""
        return {
            "run_id": self.run_id, "status": self.status, "trigger": self.trigger,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "tables": [
                {"table": r.table, "status": r.status, "backup_arn": r.backup_arn or None,
                 "backup_name": r.backup_name or None, "error": r.error or None}
                for r in self.tables.values()
            ],
            "summary": self.summary,
        }


def _conditional_failed(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class RunStore:
    def __init__(self, deps: Deps) -> None:
        self._ddb = deps.clients.dynamodb
        self._table = deps.settings.state_table
        self._sleep = deps.sleep

    def _key(self, run_id: str) -> dict[str, Any]:
        return {"PK": {"S": PARTITION}, "SK": {"S": run_id}}

    def create(self, run: Run) -> bool:
        """Store a new run; False when a run with this id exists already (a duplicate trigger)."""
        write_id = uuid.uuid4().hex
        item = ddb.serialize({**run.to_item(), "write_id": write_id})
        try:
            retry_transient(lambda: self._ddb.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(PK)"), self._sleep)
            return True
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
        return self._holds(run.run_id, write_id)

    def _holds(self, run_id: str, write_id: str) -> bool:
        """After a failed condition: the item holds this very write (its earlier attempt was applied)."""
        response = retry_transient(lambda: self._ddb.get_item(
            TableName=self._table, Key=self._key(run_id), ConsistentRead=True,
            ProjectionExpression="write_id"), self._sleep)
        return response.get("Item", {}).get("write_id", {}).get("S") == write_id

    def get(self, run_id: str) -> Run | None:
        if not RUN_ID.fullmatch(run_id):
            return None
        response = retry_transient(lambda: self._ddb.get_item(
            TableName=self._table, Key=self._key(run_id), ConsistentRead=True), self._sleep)
        item = response.get("Item")
        return Run.from_item(ddb.deserialize(item)) if item else None

    def recent(self, limit: int) -> list[Run]:
        response = retry_transient(lambda: self._ddb.query(
            TableName=self._table, KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": PARTITION}}, ScanIndexForward=False, Limit=limit), self._sleep)
        return [Run.from_item(ddb.deserialize(i)) for i in response.get("Items", [])]

    def _update(self, run_id: str, update: str, condition: str,
                names: dict[str, str] | None = None, values: dict[str, Any] | None = None) -> bool:
        """``update`` ("SET ..." with an optional " REMOVE ...") if ``condition`` holds, or held for this
        very write (see the module's docstring); False when another worker's write stands in the way."""
        write_id = uuid.uuid4().hex
        sets, _, removes = update.partition(" REMOVE ")
        kwargs: dict[str, Any] = {
            "TableName": self._table, "Key": self._key(run_id),
            "UpdateExpression": f"{sets}, write_id = :write_id" + (f" REMOVE {removes}" if removes else ""),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": {k: ddb.value(v) for k, v in {**(values or {}), ":write_id": write_id}.items()},
        }
        if names:
            kwargs["ExpressionAttributeNames"] = names
        try:
            retry_transient(lambda: self._ddb.update_item(**kwargs), self._sleep)
            return True
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
        return self._holds(run_id, write_id)

    def reclaim_start(self, run_id: str, claimed_before: datetime, now: datetime) -> bool:
        """Take over a run whose starter died while STARTING (claimed before ``claimed_before``)."""
        return self._update(
            run_id, "SET claimed_at = :now", "#s = :starting AND claimed_at < :stale",
            names={"#s": "status"},
            values={":now": now.isoformat(), ":starting": STARTING, ":stale": claimed_before.isoformat()})

    def started(self, run: Run, now: datetime) -> bool:
        """Record the tables' first results and move STARTING -> RUNNING, expecting monitor message 0;
        only while the run is still this worker's (claimed at ``run.claimed_at``: not taken over)."""
        claimed = run.claimed_at.isoformat() if run.claimed_at else ""
        return self._update(
            run.run_id, "SET #s = :running, tables = :tables, poll = :zero, poll_queued = :f, advanced_at = :now",
            "#s = :starting AND claimed_at = :claimed", names={"#s": "status"},
            values={":running": RUNNING, ":starting": STARTING, ":zero": 0, ":f": False, ":now": now.isoformat(),
                    ":claimed": claimed, ":tables": {t: r.to_item() for t, r in run.tables.items()}})

    def abandon(self, run_id: str, claimed_at: datetime, now: datetime, note: str) -> bool:
        """A run whose starter died while STARTING: close it (the next run backs up afresh)."""
        return self._update(
            run_id, "SET #s = :complete, finished_at = :now, summary = :summary",
            "#s = :starting AND claimed_at = :claimed", names={"#s": "status"},
            values={":complete": COMPLETE, ":now": now.isoformat(), ":starting": STARTING,
                    ":claimed": claimed_at.isoformat(),
                    ":summary": {"backed_up": 0, "failed": 0, "stuck": 0, "deleted": 0, "note": note}})

    def unabandon(self, run_id: str, claimed_at: datetime) -> None:
        """Undo ``abandon`` when its alert could not be sent, so the next trigger retries both."""
        self._update(run_id, "SET #s = :starting REMOVE finished_at", "#s = :complete AND claimed_at = :claimed",
                     names={"#s": "status"},
                     values={":starting": STARTING, ":complete": COMPLETE, ":claimed": claimed_at.isoformat()})

    def claim_stale_poll(self, run_id: str, poll: int, advanced_at: datetime, now: datetime) -> bool:
        """Take over a RUNNING run whose poll has not moved since ``advanced_at`` (its message is lost)."""
        return self._update(
            run_id, "SET advanced_at = :now, poll_queued = :f",
            "#s = :running AND poll = :poll AND advanced_at = :seen", names={"#s": "status"},
            values={":now": now.isoformat(), ":poll": poll, ":f": False, ":running": RUNNING,
                    ":seen": advanced_at.isoformat()})

    def mark_queued(self, run_id: str, poll: int) -> None:
        """The message for ``poll`` is in the queue."""
        self._update(run_id, "SET poll_queued = :t", "poll = :poll", values={":t": True, ":poll": poll})

    def claim_resend(self, run_id: str, poll: int, advanced_at: datetime | None, now: datetime) -> bool:
        """Take over sending the message for ``poll`` from a worker that advanced to it and died."""
        seen = advanced_at.isoformat() if advanced_at else ""
        return self._update(
            run_id, "SET advanced_at = :now", "poll = :poll AND poll_queued = :f AND advanced_at = :seen",
            values={":now": now.isoformat(), ":poll": poll, ":f": False, ":seen": seen})

    def settle_table(self, run_id: str, result: TableResult) -> bool:
        """PENDING -> a final outcome for one table; False if another delivery got there first."""
        return self._update(
            run_id, "SET tables.#t.#s = :status, tables.#t.#e = :error, tables.#t.alerted = :alerted",
            "tables.#t.#s = :pending",
            names={"#t": result.table, "#s": "status", "#e": "error"},
            values={":status": result.status, ":error": result.error, ":alerted": result.alerted,
                    ":pending": "PENDING"})

    def claim_alert(self, run_id: str, table: str) -> bool:
        """A table that failed to start, not yet alerted -> alerted; False if another worker claimed it."""
        return self._update(run_id, "SET tables.#t.alerted = :t",
                            "tables.#t.#s = :failed AND tables.#t.alerted = :f", names={"#t": table, "#s": "status"},
                            values={":t": True, ":f": False, ":failed": "FAILED"})

    def release_alert(self, run_id: str, table: str) -> None:
        """Undo ``claim_alert`` when the alert could not be sent, so the next poll retries it."""
        self._update(run_id, "SET tables.#t.alerted = :f", "attribute_exists(PK)", names={"#t": table},
                     values={":f": False})

    def unsettle_table(self, run_id: str, table: str) -> None:
        """Undo ``settle_table`` when its alert could not be sent, so a redelivery retries it."""
        self._update(run_id, "SET tables.#t.#s = :pending, tables.#t.alerted = :f",
                     "attribute_exists(PK)", names={"#t": table, "#s": "status"},
                     values={":pending": "PENDING", ":f": False})

    def advance_poll(self, run_id: str, poll: int, now: datetime) -> bool:
        """Claim poll ``poll``: only one delivery of its message wins and sends the next one."""
        return self._update(run_id, "SET poll = :next, poll_queued = :f, advanced_at = :now",
                            "poll = :poll AND #s = :running", names={"#s": "status"},
                            values={":next": poll + 1, ":poll": poll, ":running": RUNNING, ":f": False,
                                    ":now": now.isoformat()})

    def claim_finish(self, run_id: str, poll: int, now: datetime, stale_before: datetime) -> bool:
        """RUNNING (at this poll) -> FINISHING, or take over a FINISHING claim gone stale."""
        return self._update(
            run_id, "SET #s = :finishing, claimed_at = :now",
            "(#s = :running AND poll = :poll) OR (#s = :finishing AND claimed_at < :stale)",
            names={"#s": "status"},
            values={":finishing": FINISHING, ":running": RUNNING, ":poll": poll,
                    ":now": now.isoformat(), ":stale": stale_before.isoformat()})

    def complete(self, run_id: str, now: datetime, summary: dict[str, Any]) -> bool:
        return self._update(
            run_id, "SET #s = :complete, finished_at = :now, summary = :summary",
            "#s IN (:finishing, :starting)", names={"#s": "status"},
            values={":complete": COMPLETE, ":now": now.isoformat(), ":summary": summary,
                    ":finishing": FINISHING, ":starting": STARTING})
