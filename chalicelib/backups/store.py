"""Backup runs in the state table: a run item that counts, and the tables' outcomes in pages.

Run item: PK="BACKUP_RUN", SK=<run id> (run ids start with the UTC start time, so
a query in reverse order lists recent runs first). Its ``tables`` attribute counts
(``count``, ``pages``, ``backups`` started, ``failed`` to start); it never lists
tables, so its size does not depend on how many a run backs up.

Table pages: PK="BACKUP_RUN#<run id>", SK=<page number, 5 digits>, each holding the
results of up to ``PAGE_TABLES`` tables in its ``tables`` map (about 300 bytes a
table: some 30 KB a page, far from DynamoDB's 400 KB at any table count). Pages
are written whole, 25 to a BatchWriteItem (unprocessed ones retried), when a run's
tables are chosen and when its backups have started; the monitor settles a page's
tables with one UpdateItem per page. So a run's state writes grow linearly with
its tables: a few per 100 tables, each of a bounded item.

Every state change that decides something (who starts, who polls, who alerts,
who finishes) is a conditional write, so duplicate deliveries find the work done
and stop: each one a transition of lifecycle.py's ``RUN``, ``TABLE`` or
``VERIFICATION``, its expressions built from the declaration (``_write``).
Every such write is retried on transient errors (retry.py) and stamps the item
with a fresh ``write_id``. When a write's condition fails, the item is read
again: if it holds this write's ``write_id``, the write was this worker's own
earlier attempt whose response was lost (or botocore's retry of it), and it
counts as done; otherwise another worker got there first (conditional.py, which
RestoreStore shares).

Restore verifications (verify.py): PK="BACKUP_RUN#<run id>", SK="verify#<table>", one small
item each (at most 50 a run), written when the run's verification starts and settled one
conditional write each; the run's page Query reads them with the pages. The run item keeps
the plan (``verify_plan``: the tables chosen when the run was created).

Items of runs recorded before pages existed keep their tables in the run item's
``tables`` map (page -1 below); they are read and settled in place.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.backups import lifecycle
from chalicelib.backups.conditional import StateStore, conditional_failed
from chalicelib.backups.lifecycle import RUN, TABLE, VERIFICATION, Machine
from chalicelib.backups.retry import retry_transient

PARTITION = "BACKUP_RUN"
PAGES_PARTITION = "BACKUP_RUN#"   # + run id: the run's table pages
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[a-z0-9-]{1,40}$")
PAGE_TABLES = 100   # tables per page item: ~300 B each, ~30 KB a page
BATCH_WRITE = 25    # DynamoDB's BatchWriteItem limit
BATCH_ATTEMPTS = 8  # BatchWriteItem calls for one batch while some of it comes back unprocessed
INLINE = -1         # the page of a table kept in the run item itself (runs recorded before pages)

# The run's states (lifecycle.RUN); VERIFYING: backups settled and retention done, restore verification under way
# (verify.py). RELEASED: a FINISHING claim handed on, older than any lease.
STARTING, RUNNING, FINISHING, VERIFYING, COMPLETE = (
    lifecycle.STARTING, lifecycle.RUNNING, lifecycle.FINISHING, lifecycle.VERIFYING, lifecycle.COMPLETE)
RELEASED = lifecycle.RELEASED
POLLED = (RUNNING, VERIFYING)  # the statuses a poll message is claimed in
VERIFY_KEY = "verify#"   # + table: a verification's sort key in the run's page partition
RESTORING, PASSED, SKIPPED = lifecycle.RESTORING, lifecycle.PASSED, lifecycle.SKIPPED  # a verification's (and FAILED)


@dataclass
class TableResult:
    table: str
    status: str                 # PENDING | AVAILABLE | FAILED | STUCK
    backup_arn: str = ""
    backup_name: str = ""
    error: str = ""
    alerted: bool = False
    page: int = 0               # the page item holding it (INLINE: the run item)
    tried: bool = True          # CreateBackup may have been called (trusted only after a hand-off)
    pitr: str = ""              # point-in-time recovery when the run started: ENABLED, DISABLED, "" unknown

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"status": self.status, "backup_arn": self.backup_arn, "backup_name": self.backup_name,
                                "error": self.error, "alerted": self.alerted}
        if not self.tried:
            item["untried"] = True
        if self.pitr:
            item["pitr"] = self.pitr
        return item

    @classmethod
    def from_item(cls, table: str, item: dict[str, Any], page: int = INLINE) -> TableResult:
        return cls(table=table, status=item["status"], backup_arn=item.get("backup_arn", ""),
                   backup_name=item.get("backup_name", ""), error=item.get("error", ""),
                   alerted=bool(item.get("alerted", False)), page=page, tried=not item.get("untried", False),
                   pitr=str(item.get("pitr", "")))


@dataclass
class Verification:
    """One table's restore verification (verify.py): RESTORING, then PASSED or FAILED (or SKIPPED: the
    table had no AVAILABLE backup), its temporary table deleted after."""

    table: str
    status: str
    backup_arn: str = ""
    restore_table: str = ""
    started_at: str = ""
    error: str = ""
    problems: list[str] = field(default_factory=list)
    recorded_items: int | None = None
    restored_items: int | None = None
    scan_complete: bool = False
    table_deleted: bool = False

    @property
    def done(self) -> bool:
        return self.status == SKIPPED or (self.status in (PASSED, "FAILED") and self.table_deleted)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {"table": self.table, "status": self.status, "backup_arn": self.backup_arn,
                                "restore_table": self.restore_table, "started_at": self.started_at,
                                "error": self.error, "problems": list(self.problems),
                                "scan_complete": self.scan_complete, "table_deleted": self.table_deleted}
        if self.recorded_items is not None:
            item["recorded_items"] = self.recorded_items
        if self.restored_items is not None:
            item["restored_items"] = self.restored_items
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Verification:
        def count(name: str) -> int | None:
            return int(item[name]) if item.get(name) is not None else None
        return cls(table=item["table"], status=item["status"], backup_arn=item.get("backup_arn", ""),
                   restore_table=item.get("restore_table", ""), started_at=item.get("started_at", ""),
                   error=item.get("error", ""), problems=list(item.get("problems", [])),
                   recorded_items=count("recorded_items"), restored_items=count("restored_items"),
                   scan_complete=bool(item.get("scan_complete", False)),
                   table_deleted=bool(item.get("table_deleted", False)))

    def view(self) -> dict[str, Any]:
        return {"table": self.table, "status": self.status, "backup_arn": self.backup_arn or None,
                "restore_table": self.restore_table or None, "started_at": self.started_at or None,
                "error": self.error or None, "problems": list(self.problems),
                "recorded_items": self.recorded_items, "restored_items": self.restored_items,
                "scan_complete": self.scan_complete, "restore_table_deleted": self.table_deleted}


def _is_inline(tables: Any) -> bool:
    """A run item's ``tables`` as older versions wrote it: every table's result in the item."""
    return isinstance(tables, dict) and all(isinstance(v, dict) and "status" in v for v in tables.values()) \
        and not {"count", "pages"} <= tables.keys()


@dataclass
class Run:
    run_id: str
    started_at: datetime
    trigger: str
    status: str = STARTING
    tables: dict[str, TableResult] = field(default_factory=dict)
    poll: int = 0                      # the monitor message number the run expects next
    poll_queued: bool = False          # that message has been sent (the trigger's poll 0)
    poll_message: str = ""             # the SQS message id of the delivery that claimed the last poll
    advanced_at: datetime | None = None  # when ``poll`` last changed
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    handed_off: bool = False           # its starter ran out of time and handed the rest on (see ``hand_off``)
    counts: dict[str, int] = field(default_factory=dict)  # the run item's ``tables``: count, pages, backups, failed
    verify_plan: list[str] = field(default_factory=list)  # the tables to verify once the backups are settled
    verifications: dict[str, Verification] = field(default_factory=dict)  # read with the pages
    # Retention carried over from one invocation to the next (monitor._carry_over): passes handed on, backups
    # they deleted, and whether the last listed in windows.
    retention_passes: int = 0
    retention_deleted: int = 0
    retention_windowed: bool = False
    # Tries at starting it that failed with an error (``release_start``), and whether the last one let its claim go.
    start_failures: int = 0
    released: bool = False

    def paginate(self) -> None:
        """Give each table its page (PAGE_TABLES a page, in the run's order) and count them."""
        for i, result in enumerate(self.tables.values()):
            result.page = i // PAGE_TABLES
        self.recount()

    def recount(self) -> None:
        results = self.tables.values()
        pages = {r.page for r in results}
        self.counts = {"count": len(self.tables), "pages": len(pages),
                       "backups": sum(1 for r in results if r.backup_arn),
                       "failed": sum(1 for r in results if r.status == "FAILED" and not r.backup_arn)}

    def pages(self) -> dict[int, dict[str, TableResult]]:
        out: dict[int, dict[str, TableResult]] = {}
        for result in self.tables.values():
            out.setdefault(result.page, {})[result.table] = result
        return out

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            "PK": PARTITION, "SK": self.run_id, "run_id": self.run_id,
            "started_at": self.started_at.isoformat(), "trigger": self.trigger, "status": self.status,
            "tables": dict(self.counts), "poll": self.poll,
            "poll_queued": self.poll_queued, "summary": self.summary,
        }
        if self.poll_message:
            item["poll_message"] = self.poll_message
        if self.verify_plan:
            item["verify_plan"] = list(self.verify_plan)
        if self.handed_off:
            item["handed_off"] = True
        if self.claimed_at:
            item["claimed_at"] = self.claimed_at.isoformat()
        if self.advanced_at:
            item["advanced_at"] = self.advanced_at.isoformat()
        if self.finished_at:
            item["finished_at"] = self.finished_at.isoformat()
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Run:
        tables = item.get("tables", {})
        inline = _is_inline(tables)
        return cls(
            run_id=item["run_id"],
            started_at=datetime.fromisoformat(item["started_at"]),
            trigger=item.get("trigger", ""),
            status=item["status"],
            tables={t: TableResult.from_item(t, r) for t, r in tables.items()} if inline else {},
            poll=int(item.get("poll", 0)),
            poll_queued=bool(item.get("poll_queued", False)),
            poll_message=str(item.get("poll_message", "")),
            handed_off=bool(item.get("handed_off", False)),
            advanced_at=datetime.fromisoformat(item["advanced_at"]) if item.get("advanced_at") else None,
            claimed_at=datetime.fromisoformat(item["claimed_at"]) if item.get("claimed_at") else None,
            finished_at=datetime.fromisoformat(item["finished_at"]) if item.get("finished_at") else None,
            summary=item.get("summary", {}),
            counts={} if inline else {k: int(v) for k, v in tables.items()},
            verify_plan=list(item.get("verify_plan", [])),
            retention_passes=int(item.get("retention_passes", 0)),
            retention_deleted=int(item.get("retention_deleted", 0)),
            retention_windowed=bool(item.get("retention_windowed", False)),
            start_failures=int(item.get("start_failures", 0)),
            released=bool(item.get("released", False)),
        )

    @property
    def paged(self) -> bool:
        """The run's tables are in page items (not inline in the run item)."""
        return bool(self.counts)

    def view(self, with_tables: bool = True) -> dict[str, Any]:
        """What the API shows of a run: with each table's result, or (a listing of runs) their number
        and the run's own address, where they are shown."""
        view: dict[str, Any] = {
            "run_id": self.run_id, "status": self.status, "trigger": self.trigger,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "table_count": self.counts.get("count", len(self.tables)),
        }
        if with_tables:
            view["tables"] = [
                {"table": r.table, "status": r.status, "backup_arn": r.backup_arn or None,
                 "backup_name": r.backup_name or None, "error": r.error or None,
                 "pitr": r.pitr.lower() if r.pitr else None}
                for r in sorted(self.tables.values(), key=lambda r: (r.page, r.table))
            ]
            view["verify_plan"] = list(self.verify_plan)
            view["verifications"] = [v.view() for _, v in sorted(self.verifications.items())]
        else:
            view["href"] = f"/backups/runs/{self.run_id}"
        view["summary"] = self.summary
        return view


class RunStore(StateStore):
    """Backup runs in the state table (see the module's docstring)."""

    def _key(self, run_id: str, page: int | str = INLINE) -> dict[str, Any]:
        if isinstance(page, str):  # a verification's sort key
            return {"PK": {"S": PAGES_PARTITION + run_id}, "SK": {"S": page}}
        if page == INLINE:
            return {"PK": {"S": PARTITION}, "SK": {"S": run_id}}
        return {"PK": {"S": PAGES_PARTITION + run_id}, "SK": {"S": f"{page:05d}"}}

    def create(self, run: Run) -> bool:
        """Store a new run and its table pages; False when a run with this id exists already (a duplicate
        trigger). A starter that dies between the two leaves a run with fewer tables than it counts:
        ``get`` reads what is there, and the start's takeover chooses the tables again."""
        run.paginate()
        write_id = uuid.uuid4().hex
        item = ddb.serialize({**run.to_item(), "write_id": write_id})
        new = RUN.condition("create", {})
        try:
            retry_transient(lambda: self._ddb.put_item(
                TableName=self._table, Item=item, **new.arguments()), self._sleep)
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
            if not self._items.holds(self._key(run.run_id), write_id):
                return False
        self.write_pages(run)
        return True

    def write_pages(self, run: Run, pages: Iterable[int] | None = None) -> None:
        """Write the run's table pages whole (all, or ``pages``), BATCH_WRITE items a BatchWriteItem."""
        by_page = run.pages()
        wanted = sorted(by_page if pages is None else set(pages) & by_page.keys())
        requests = [{"PutRequest": {"Item": ddb.serialize({
            "PK": PAGES_PARTITION + run.run_id, "SK": f"{page:05d}", "run_id": run.run_id,
            "tables": {t: r.to_item() for t, r in by_page[page].items()}})}} for page in wanted if page != INLINE]
        for i in range(0, len(requests), BATCH_WRITE):
            self._batch_write(requests[i:i + BATCH_WRITE])

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """One BatchWriteItem, its unprocessed items sent again with backoff until none is left."""
        pending: Any = {self._table: requests}
        for attempt in range(BATCH_ATTEMPTS):
            response = retry_transient(lambda items=pending: self._ddb.batch_write_item(  # type: ignore[misc]
                RequestItems=items), self._sleep)
            pending = response.get("UnprocessedItems") or {}
            if not pending:
                return
            self._sleep(min(5.0, 0.05 * 2 ** attempt))
        raise RuntimeError(f"BatchWriteItem left {sum(len(v) for v in pending.values())} items unprocessed "
                           f"after {BATCH_ATTEMPTS} attempts")

    def get(self, run_id: str, with_tables: bool = True) -> Run | None:
        """The run, with every table's result (``with_tables``: read from its pages), or None."""
        if not RUN_ID.fullmatch(run_id):
            return None
        response = retry_transient(lambda: self._ddb.get_item(
            TableName=self._table, Key=self._key(run_id), ConsistentRead=True), self._sleep)
        item = response.get("Item")
        if not item:
            return None
        run = Run.from_item(ddb.deserialize(item))
        if with_tables:
            self.load_tables(run)
        return run

    def load_tables(self, run: Run) -> None:
        """Read the run's table pages into ``run.tables`` (a run with inline tables has them already)."""
        if not run.paged:
            return
        kwargs: dict[str, Any] = {
            "TableName": self._table, "KeyConditionExpression": "PK = :pk", "ConsistentRead": True,
            "ExpressionAttributeValues": {":pk": {"S": PAGES_PARTITION + run.run_id}}}
        tables: dict[str, TableResult] = {}
        while True:
            response = retry_transient(lambda: self._ddb.query(**kwargs), self._sleep)
            for raw in response.get("Items", []):
                page = ddb.deserialize(raw)
                if str(page["SK"]).startswith(VERIFY_KEY):
                    verification = Verification.from_item(page)
                    run.verifications[verification.table] = verification
                    continue
                number = int(page["SK"])
                for table, result in page.get("tables", {}).items():
                    tables[table] = TableResult.from_item(table, result, number)
            if "LastEvaluatedKey" not in response:
                break
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        run.tables = tables

    def load_verifications(self, run: Run) -> None:
        """Read the run's verification items (only them: a Query on their sort key prefix)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table, "KeyConditionExpression": "PK = :pk AND begins_with(SK, :v)",
            "ConsistentRead": True,
            "ExpressionAttributeValues": {":pk": {"S": PAGES_PARTITION + run.run_id}, ":v": {"S": VERIFY_KEY}}}
        while True:
            response = retry_transient(lambda: self._ddb.query(**kwargs), self._sleep)
            for raw in response.get("Items", []):
                verification = Verification.from_item(ddb.deserialize(raw))
                run.verifications[verification.table] = verification
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def add_verifications(self, run_id: str, verifications: Iterable[Verification]) -> None:
        """Write new verification items (BATCH_WRITE a call): only ones the run does not have yet."""
        requests = [{"PutRequest": {"Item": ddb.serialize({
            "PK": PAGES_PARTITION + run_id, "SK": VERIFY_KEY + v.table, "run_id": run_id, **v.to_item()})}}
            for v in verifications]
        for i in range(0, len(requests), BATCH_WRITE):
            self._batch_write(requests[i:i + BATCH_WRITE])

    def settle_verification(self, run_id: str, v: Verification) -> bool:
        """RESTORING -> PASSED or FAILED with what was found; False if another delivery settled it first."""
        return self._done(VERIFICATION, ("settle_verification",), run_id, {
            "error": v.error, "problems": list(v.problems), "recorded": v.recorded_items,
            "restored": v.restored_items, "scan_complete": v.scan_complete}, page=VERIFY_KEY + v.table, target=v.status)

    def unsettle_verification(self, run_id: str, v: Verification) -> None:
        """Undo ``settle_verification`` when its alert could not be sent, so a redelivery retries both."""
        self._write(VERIFICATION, ("unsettle_verification",), run_id, {}, page=VERIFY_KEY + v.table, source=v.status)

    def restore_table_deleted(self, run_id: str, v: Verification) -> None:
        """The verification's temporary table is deleted (or being deleted)."""
        self._write(VERIFICATION, ("restore_table_deleted",), run_id, {}, page=VERIFY_KEY + v.table)

    def verifying(self, run_id: str, now: datetime, summary: dict[str, Any]) -> bool:
        """FINISHING -> VERIFYING with the backups' summary: polls go on (``poll`` as it is), verifying restores."""
        return self._done(RUN, ("verifying",), run_id, {"summary": summary, "now": now.isoformat()})

    def verified(self, run_id: str, now: datetime, counts: dict[str, int]) -> bool:
        """VERIFYING -> COMPLETE, the verifications counted in the summary."""
        return self._done(RUN, ("verified",), run_id, {"now": now.isoformat(), "counts": counts})

    def recent(self, limit: int, with_tables: bool = True) -> list[Run]:
        """The newest ``limit`` runs (``with_tables``: each with its tables, a Query per paged run)."""
        response = retry_transient(lambda: self._ddb.query(
            TableName=self._table, KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": PARTITION}}, ScanIndexForward=False, Limit=limit), self._sleep)
        runs = [Run.from_item(ddb.deserialize(i)) for i in response.get("Items", [])]
        if with_tables:
            for run in runs:
                self.load_tables(run)
        return runs

    def runs_started(self, first: datetime, last: datetime) -> list[Run]:
        """The runs that started from ``first`` to ``last`` (whole seconds), without their tables: one Query of
        the runs' partition on their ids' time prefix (paged; a run item without its tables is small)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table, "KeyConditionExpression": "PK = :pk AND SK BETWEEN :a AND :b",
            "ExpressionAttributeValues": {":pk": {"S": PARTITION}, ":a": {"S": f"{first:%Y%m%dT%H%M%SZ}"},
                                          ":b": {"S": f"{last:%Y%m%dT%H%M%SZ}-~"}},
            "ProjectionExpression": "run_id, started_at, #t, #s, verify_plan",
            "ExpressionAttributeNames": {"#t": "trigger", "#s": "status"}}
        runs: list[Run] = []
        while True:
            response = retry_transient(lambda: self._ddb.query(**kwargs), self._sleep)
            runs.extend(Run.from_item(ddb.deserialize(i)) for i in response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return runs
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def verifications_of(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Verification]:
        """The restore verifications of (run id, table) pairs that exist: BatchGetItem, 100 keys a call."""
        keys = [self._key(run_id, VERIFY_KEY + table) for run_id, table in dict.fromkeys(pairs)]
        found: dict[tuple[str, str], Verification] = {}
        for start in range(0, len(keys), 100):
            pending: dict[str, Any] = {self._table: {"Keys": keys[start:start + 100]}}
            for _ in range(BATCH_ATTEMPTS):
                response = retry_transient(lambda keys=pending: self._ddb.batch_get_item(  # type: ignore[misc]
                    RequestItems=keys), self._sleep)
                for raw in response.get("Responses", {}).get(self._table, []):
                    item = ddb.deserialize(raw)
                    found[(item["PK"].removeprefix(PAGES_PARTITION), item["table"])] = Verification.from_item(item)
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
        return found

    def _write(self, machine: Machine, transitions: tuple[str, ...], run_id: str,
               params: dict[str, Any] | list[dict[str, Any]], page: int | str = INLINE, source: str = "",
               target: str = "", returning: bool = False) -> tuple[bool, dict[str, Any]]:
        """Every conditional write of the store: one of ``machine``'s ``transitions`` (lifecycle.py; an undeclared
        one is refused) of the run item (or of its ``page``) with ``params`` (a list: the one transition of
        several records of the page at once). True if its condition held, or held for this very write (see the
        module's docstring); False when another worker's write stands in the way. With ``returning``, the item
        as written."""
        if isinstance(params, list):
            write = machine.write_each(transitions[0], params)
        else:
            write = machine.write(transitions, params, source, target)
        return self._items.apply(self._key(run_id, page), write.update, write.condition, write.params, returning)

    def _done(self, machine: Machine, transitions: tuple[str, ...], run_id: str, params: dict[str, Any],
              page: int | str = INLINE, source: str = "", target: str = "") -> bool:
        return self._write(machine, transitions, run_id, params, page, source, target)[0]

    def reclaim_start(self, run_id: str, claimed_before: datetime, now: datetime) -> bool:
        """Take over a run whose starter died while STARTING (claimed before ``claimed_before``), or whose last
        try failed and let its claim go (``release_start``)."""
        return self._done(RUN, ("reclaim_start",), run_id,
                           {"now": now.isoformat(), "stale": claimed_before.isoformat()})

    def record_tables(self, run: Run) -> bool:
        """A new run's tables, chosen after its first write: its pages, then its counts and verification plan on
        the run item, while the run is still this starter's (claimed at ``run.claimed_at``)."""
        run.paginate()
        self.write_pages(run)
        return self._done(RUN, ("record_tables",), run.run_id,
                           {"tables": dict(run.counts), "plan": list(run.verify_plan), "claimed": _claimed(run)})

    def release_start(self, run: Run) -> int | None:
        """A try at starting ``run`` failed: its claim (at ``run.claimed_at``) let go for the next try to take at
        once (``reclaim_start``), the failure counted. The failures so far, or None when the run is no longer this
        try's (taken over, started, closed)."""
        done, item = self._write(RUN, ("release_start",), run.run_id, {"claimed": _claimed(run)}, returning=True)
        return int(item.get("start_failures", 0)) if done else None

    def hand_off(self, run: Run, expired: datetime) -> bool:
        """A starter out of time: record its progress (the pages, which tables were tried) and let its
        claim lapse (``expired``: past the lease), marked handed off; False if it was taken over."""
        self.write_pages(run)
        return self._done(RUN, ("hand_off",), run.run_id, {"expired": expired.isoformat(), "claimed": _claimed(run)})

    def take_handoff(self, run: Run, now: datetime) -> bool:
        """Claim a run handed off at ``run.claimed_at`` (as read with its pages): its pages' ``tried``
        flags are then exact. False if it is no longer so (another worker took it first)."""
        return self._done(RUN, ("take_handoff",), run.run_id, {"now": now.isoformat(), "claimed": _claimed(run)})

    def started(self, run: Run, now: datetime) -> bool:
        """Record the tables' first results (their pages, whole) and move STARTING -> RUNNING, expecting
        monitor message 0; only while the run is still this worker's (claimed at ``run.claimed_at``:
        not taken over). The pages are written first: a RUNNING run always has its ARNs."""
        if run.paged:
            run.recount()
            self.write_pages(run)
            tables: dict[str, Any] = dict(run.counts)
        else:  # a run recorded inline by an older version: kept inline
            tables = {t: r.to_item() for t, r in run.tables.items()}
        return self._done(RUN, ("started",), run.run_id,
                           {"tables": tables, "now": now.isoformat(), "claimed": _claimed(run)})

    def abandon(self, run_id: str, claimed_at: datetime, now: datetime, note: str) -> bool:
        """A run whose starter died while STARTING: close it (the next run backs up afresh)."""
        return self._done(RUN, ("abandon",), run_id, {
            "now": now.isoformat(), "claimed": claimed_at.isoformat(),
            "summary": {"backed_up": 0, "failed": 0, "stuck": 0, "deleted": 0, "note": note}})

    def unabandon(self, run_id: str, claimed_at: datetime) -> None:
        """Undo ``abandon`` when its alert could not be sent, so the next trigger retries both."""
        self._write(RUN, ("unabandon",), run_id, {"claimed": claimed_at.isoformat()})

    def claim_stale_poll(self, run_id: str, poll: int, advanced_at: datetime, now: datetime) -> bool:
        """Take over a RUNNING (or VERIFYING) run whose poll has not moved since ``advanced_at`` (its message is lost)."""
        return self._done(RUN, ("claim_stale_poll",), run_id,
                           {"now": now.isoformat(), "poll": poll, "seen": advanced_at.isoformat()})

    def mark_queued(self, run_id: str, poll: int) -> None:
        """The message for ``poll`` is in the queue."""
        self._write(RUN, ("mark_queued",), run_id, {"poll": poll})

    def claim_resend(self, run_id: str, poll: int, advanced_at: datetime | None, now: datetime) -> bool:
        """Take over sending the message for ``poll`` from a worker that advanced to it and died."""
        return self._done(RUN, ("claim_resend",), run_id, {
            "now": now.isoformat(), "poll": poll, "seen": advanced_at.isoformat() if advanced_at else ""})

    def settle_table(self, run_id: str, result: TableResult) -> bool:
        """PENDING -> a final outcome for one table; False if another delivery got there first."""
        return self._done(TABLE, ("settle_table",), run_id,
                           {"table": result.table, "error": result.error, "alerted": result.alerted},
                           page=result.page, target=result.status)

    def settle_available(self, run_id: str, results: list[TableResult]) -> list[TableResult]:
        """PENDING -> AVAILABLE for ``results`` (all of one page) in one write, or table by table when
        another delivery settled some of them first; the ones this call settled."""
        if len(results) == 1:
            return results if self.settle_table(run_id, results[0]) else []
        if self._write(TABLE, ("settle_available",), run_id, [{"table": r.table} for r in results],
                       page=results[0].page)[0]:
            return results
        return [r for r in results if self.settle_table(run_id, r)]

    def claim_alert(self, run_id: str, result: TableResult) -> bool:
        """A table that failed to start, not yet alerted -> alerted; False if another worker claimed it."""
        return self._done(TABLE, ("claim_alert",), run_id, {"table": result.table}, page=result.page)

    def release_alert(self, run_id: str, result: TableResult) -> None:
        """Undo ``claim_alert`` when the alert could not be sent, so the next poll retries it."""
        self._write(TABLE, ("release_alert",), run_id, {"table": result.table}, page=result.page)

    def unsettle_table(self, run_id: str, result: TableResult) -> None:
        """Undo ``settle_table`` when its alert could not be sent, so a redelivery retries it."""
        self._write(TABLE, ("unsettle_table",), run_id, {"table": result.table}, page=result.page)

    def claim_poll(self, run_id: str, poll: int, now: datetime, message_id: str) -> Run | None:
        """Claim poll ``poll`` of a RUNNING or VERIFYING run for SQS message ``message_id`` (only one delivery
        of the poll's message wins and may send the next one) and read the run item in the same write; None
        when the run is not at that poll (or does not exist). A RUNNING run may be claimed at a later poll
        than it expects (polls that found every backup CREATING went unclaimed: monitor.py), never an earlier."""
        if not RUN_ID.fullmatch(run_id):
            return None
        done, item = self._write(RUN, ("claim_poll", "claim_verifying_poll"), run_id, {
            "next": poll + 1, "poll": poll, "now": now.isoformat(), "message": message_id}, returning=True)
        return Run.from_item(item) if done and item else None

    def claim_finish(self, run_id: str, poll: int, now: datetime, stale_before: datetime) -> bool:
        """RUNNING (at this poll) -> FINISHING, or take over a FINISHING claim gone stale."""
        return self._done(RUN, ("finish", "take_finish"), run_id,
                           {"poll": poll, "now": now.isoformat(), "stale": stale_before.isoformat()})

    def release_finish(self, run_id: str, claimed_at: datetime, deleted: int, windowed: bool) -> bool:
        """FINISHING, claimed at ``claimed_at``, whose retention ran out of time: the claim released (stale at
        once, for the next monitor message to take), the backups deleted added up, the pass counted."""
        return self._done(RUN, ("release_finish",), run_id,
                           {"n": deleted, "windowed": windowed, "claimed": claimed_at.isoformat()})

    def complete(self, run_id: str, now: datetime, summary: dict[str, Any]) -> bool:
        return self._done(RUN, ("complete",), run_id, {"now": now.isoformat(), "summary": summary})


def _claimed(run: Run) -> str:
    """The claim ``run`` was read with ("" when it has none: no claim then holds)."""
    return run.claimed_at.isoformat() if run.claimed_at else ""
