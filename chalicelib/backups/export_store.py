"""Exports to S3 in the state table: one record an export, one record an export run.

Export: PK="EXPORT#<table>", SK=<export time label> (export_rules.export_time_label): a table's exports are one
Query, newest last. Its status moves PENDING -> IN_PROGRESS -> COMPLETED / FAILED / VANISHED / STUCK (or is
REFUSED at once), each settled by one conditional write, whose winner alerts. Run: PK="EXPORT_RUN",
SK=<export time label>: the tables it exports, and the monitor's poll number (claimed once a number, so a
message delivered twice never makes a second chain of polls), and whether the bucket's refusal was alerted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.backups.conditional import StateStore, conditional_failed
from chalicelib.backups.export_rules import FULL, IN_PROGRESS, PENDING, Link
from chalicelib.backups.retry import retry_transient

RUN_PARTITION = "EXPORT_RUN"
RUNNING = "RUNNING"
COMPLETE = "COMPLETE"


def export_partition(table: str) -> str:
    return f"EXPORT#{table}"


@dataclass
class Export:
    table: str
    export_time: datetime
    run_id: str
    bucket: str
    prefix: str
    owner: str = ""
    status: str = PENDING
    export_arn: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    item_count: int = 0
    size_bytes: int = 0
    failure_code: str = ""
    error: str = ""
    expires: str = ""         # the planned expiry (retention), ISO date-time; "" while it is not planned
    kept_because: list[str] = field(default_factory=list)
    locked_until: str = ""    # the objects' Object Lock retention, as set
    deleted: bool = False     # its objects were deleted (retention)
    schema: dict[str, Any] = field(default_factory=dict)  # the table's keys and indexes: what an import recreates
    export_type: str = FULL   # FULL_EXPORT, or INCREMENTAL_EXPORT from from_time to export_time
    from_time: datetime | None = None

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": export_partition(self.table), "SK": self.run_id, "table": self.table,
            "export_time": self.export_time.isoformat(), "run_id": self.run_id, "bucket": self.bucket,
            "prefix": self.prefix, "owner": self.owner, "status": self.status, "export_arn": self.export_arn,
            "item_count": self.item_count, "size_bytes": self.size_bytes, "failure_code": self.failure_code,
            "error": self.error, "expires": self.expires, "kept_because": self.kept_because,
            "locked_until": self.locked_until, "deleted": self.deleted, "schema": self.schema,
            "export_type": self.export_type}
        if self.from_time:
            item["from_time"] = self.from_time.isoformat()
        if self.started_at:
            item["started_at"] = self.started_at.isoformat()
        if self.finished_at:
            item["finished_at"] = self.finished_at.isoformat()
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Export:
        def when(name: str) -> datetime | None:
            return datetime.fromisoformat(item[name]) if item.get(name) else None
        return cls(table=item["table"], export_time=datetime.fromisoformat(item["export_time"]),
                   run_id=item["run_id"], bucket=item["bucket"], prefix=item["prefix"], owner=item.get("owner", ""),
                   status=item["status"], export_arn=item.get("export_arn", ""), started_at=when("started_at"),
                   finished_at=when("finished_at"), item_count=int(item.get("item_count", 0)),
                   size_bytes=int(item.get("size_bytes", 0)), failure_code=item.get("failure_code", ""),
                   error=item.get("error", ""), expires=item.get("expires", ""),
                   kept_because=list(item.get("kept_because", [])), locked_until=item.get("locked_until", ""),
                   deleted=bool(item.get("deleted", False)), schema=dict(item.get("schema", {})),
                   export_type=item.get("export_type", FULL), from_time=when("from_time"))

    def link(self) -> Link:
        """What the chain rules (export_rules.next_export, restore_chain) need of it."""
        return Link(self.run_id, self.export_time, self.export_type, self.from_time, self.status, self.deleted)

    @property
    def export_id(self) -> str:
        """AWS's id of the export (the end of its ARN): its objects are under ``<prefix>/AWSDynamoDB/<id>/``."""
        return self.export_arn.rsplit("/", 1)[-1]

    def view(self) -> dict[str, Any]:
        """What the API shows of an export."""
        return {"kind": "export", "table": self.table, "export_time": self.export_time.isoformat(),
                "status": self.status, "export_arn": self.export_arn or None,
                "location": f"s3://{self.bucket}/{self.prefix}/", "bucket_owner": self.owner or None,
                "item_count": self.item_count, "size_bytes": self.size_bytes, "error": self.error or None,
                "expires": self.expires or None, "kept_because": self.kept_because,
                "locked_until": self.locked_until or None, "deleted": self.deleted,
                "run_id": self.run_id, "export_type": self.export_type,
                "from_time": self.from_time.isoformat() if self.from_time else None}


@dataclass
class ExportRun:
    run_id: str
    export_time: datetime
    tables: list[str]
    status: str = RUNNING
    poll: int = 0
    bucket_alerted: bool = False

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> ExportRun:
        return cls(run_id=item["run_id"], export_time=datetime.fromisoformat(item["export_time"]),
                   tables=list(item.get("tables", [])), status=item["status"], poll=int(item.get("poll", 0)),
                   bucket_alerted=bool(item.get("bucket_alerted", False)))

    def view(self) -> dict[str, Any]:
        """What the API lists of an export run beside the backup runs (its exports: GET /backups/runs/<run_id>)."""
        return {"run_id": self.run_id, "kind": "export", "status": self.status,
                "export_time": self.export_time.isoformat(), "table_count": len(self.tables),
                "href": f"/backups/runs/{self.run_id}"}


class ExportStore(StateStore):
    """Export runs and exports in the state table (see the module's docstring)."""

    @staticmethod
    def _run_key(run_id: str) -> dict[str, Any]:
        return {"PK": {"S": RUN_PARTITION}, "SK": {"S": run_id}}

    @staticmethod
    def _key(table: str, run_id: str) -> dict[str, Any]:
        return {"PK": {"S": export_partition(table)}, "SK": {"S": run_id}}

    def _put_new(self, item: dict[str, Any]) -> bool:
        """Write ``item`` unless its key exists; False when it does (a repeat of this run, or of this export)."""
        try:
            retry_transient(lambda: self._ddb.put_item(
                TableName=self._table, Item=ddb.serialize(item), ConditionExpression="attribute_not_exists(PK)"),
                self._sleep)
            return True
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            return False

    def create_run(self, run: ExportRun) -> bool:
        return self._put_new({"PK": RUN_PARTITION, "SK": run.run_id, "run_id": run.run_id,
                              "export_time": run.export_time.isoformat(), "tables": run.tables,
                              "status": run.status, "poll": run.poll, "bucket_alerted": False})

    def get_run(self, run_id: str) -> ExportRun | None:
        item = self._items.read(self._run_key(run_id))
        return ExportRun.from_item(item) if item else None

    def latest_run(self) -> ExportRun | None:
        """The newest export run (one Query)."""
        response = retry_transient(lambda: self._ddb.query(
            TableName=self._table, KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": RUN_PARTITION}}, ScanIndexForward=False, Limit=1), self._sleep)
        items = response.get("Items", [])
        return ExportRun.from_item(ddb.deserialize(items[0])) if items else None

    def recent_runs(self, limit: int) -> list[ExportRun]:
        """The newest ``limit`` export runs, newest first (one Query)."""
        response = retry_transient(lambda: self._ddb.query(
            TableName=self._table, KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": RUN_PARTITION}}, ScanIndexForward=False, Limit=limit), self._sleep)
        return [ExportRun.from_item(ddb.deserialize(i)) for i in response.get("Items", [])]

    def create(self, export: Export) -> bool:
        """Record a new export; False when this table's export at this time is recorded already (a repeat: the
        caller reads it and goes on from where it is)."""
        return self._put_new(export.to_item())

    def get(self, table: str, run_id: str) -> Export | None:
        item = self._items.read(self._key(table, run_id))
        return Export.from_item(item) if item else None

    def of_table(self, table: str) -> list[Export]:
        """Every export of ``table``, oldest first (one Query, every page)."""
        found: list[Export] = []
        kwargs: dict[str, Any] = {"TableName": self._table, "KeyConditionExpression": "PK = :pk",
                                  "ExpressionAttributeValues": {":pk": {"S": export_partition(table)}}}
        while True:
            page = retry_transient(lambda: self._ddb.query(**kwargs), self._sleep)
            found.extend(Export.from_item(ddb.deserialize(i)) for i in page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def started(self, export: Export) -> bool:
        """PENDING -> IN_PROGRESS with its ARN (or a PENDING one's outcome: REFUSED, FAILED to start)."""
        done, _ = self._items.update(
            self._key(export.table, export.run_id),
            "SET #s = :status, export_arn = :arn, started_at = :started, #e = :error, failure_code = :code, "
            "#schema = :schema", "#s = :pending", {"#s": "status", "#e": "error", "#schema": "schema"},
            {":status": export.status, ":arn": export.export_arn, ":pending": PENDING, ":error": export.error,
             ":schema": export.schema,
             ":code": export.failure_code, ":started": export.started_at.isoformat() if export.started_at else ""})
        return done

    def settle(self, export: Export) -> bool:
        """IN_PROGRESS -> its outcome, with what DescribeExport told; False when another delivery settled it."""
        done, _ = self._items.update(
            self._key(export.table, export.run_id),
            "SET #s = :status, finished_at = :finished, item_count = :items, size_bytes = :size, #e = :error, "
            "failure_code = :code", "#s = :in_progress", {"#s": "status", "#e": "error"},
            {":status": export.status, ":finished": export.finished_at.isoformat() if export.finished_at else "",
             ":items": export.item_count, ":size": export.size_bytes, ":error": export.error,
             ":code": export.failure_code, ":in_progress": IN_PROGRESS})
        return done

    def unsettle(self, export: Export) -> None:
        """Undo ``settle`` when its alert could not be sent, so the next poll settles and alerts again."""
        self._items.update(self._key(export.table, export.run_id), "SET #s = :in_progress", "#s = :status",
                           {"#s": "status"}, {":in_progress": IN_PROGRESS, ":status": export.status})

    def plan(self, export: Export) -> None:
        """Record its planned expiry, why it is kept, its lock and whether its objects are deleted."""
        self._items.update(
            self._key(export.table, export.run_id),
            "SET expires = :expires, kept_because = :kept, locked_until = :locked, deleted = :deleted",
            "attribute_exists(PK)", None,
            {":expires": export.expires, ":kept": export.kept_because, ":locked": export.locked_until,
             ":deleted": export.deleted})

    def claim_poll(self, run_id: str, poll: int) -> ExportRun | None:
        """Claim poll ``poll`` of a RUNNING run (the run as claimed), None when another delivery has it."""
        done, item = self._items.update(
            self._run_key(run_id), "SET poll = :next", "#s = :running AND poll = :poll", {"#s": "status"},
            {":next": poll + 1, ":poll": poll, ":running": RUNNING}, returning=True)
        return ExportRun.from_item(item) if done and item else None

    def claim_bucket_alert(self, run_id: str) -> bool:
        done, _ = self._items.update(self._run_key(run_id), "SET bucket_alerted = :yes", "bucket_alerted = :no",
                                     None, {":yes": True, ":no": False})
        return done

    def release_bucket_alert(self, run_id: str) -> None:
        self._items.update(self._run_key(run_id), "SET bucket_alerted = :no", "bucket_alerted = :yes",
                           None, {":yes": True, ":no": False})

    def complete(self, run_id: str) -> bool:
        done, _ = self._items.update(self._run_key(run_id), "SET #s = :complete", "#s = :running", {"#s": "status"},
                                     {":complete": COMPLETE, ":running": RUNNING})
        return done
