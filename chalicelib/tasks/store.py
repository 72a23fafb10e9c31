"""Task items (tasks table) and task records with their execution state (state table).

The API's writes that must agree go in one ``TransactWriteItems`` (both tables
are in the same account and region): creating a task writes its item and
record; cancelling deletes the item and marks the record; rescheduling moves
the due time on both.  A transaction whose condition fails returns False:
another request or delivery got there first.

The executor never writes a one-time task's item and makes no transaction: it
claims an execution and settles it with one conditional UpdateItem each on the
task's record, which also keeps the outcome ``GET /tasks/{id}`` shows (or, for
an action whose target drops a repeat, settles it with one: ``settle_once``).

Every write of a task's record is here: for each transition of ``chalicelib.tasks.lifecycle``, the method
``lifecycle.WRITERS`` names (the API's return the item of its transaction rather than writing).  The
record's ``status_key`` (``<status>#<shard>``, written with every ``status``:
``items.status_fields``) and ``listed`` are the keys of the sparse status index
(a GSI) that ``GET /tasks`` pages through, so a task's outcome moves it in the
listing without another write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import history, items
from chalicelib.tasks.model import TASK_ID, InvalidTask, Status, Task, TaskKey, iso
from chalicelib.throttle import error_code

BATCH_GET_LIMIT = 100
LIST_QUERY_THREADS = 8  # a status's shards queried at once by a listing (the client keeps 10 connections or more)


def _expression_args(names: Mapping[str, str] | None, values: Mapping[str, Any] | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if names:
        args["ExpressionAttributeNames"] = dict(names)
    if values:
        args["ExpressionAttributeValues"] = {k: ddb.value(v) for k, v in values.items()}
    return args


def put(table: str, item: Mapping[str, Any], condition: str | None = None,
        names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A TransactWriteItems Put (of the attributes not ``items.ABSENT``)."""
    op: dict[str, Any] = {"TableName": table, "Item": ddb.serialize(items.present(dict(item))), **_expression_args(names, values)}
    if condition:
        op["ConditionExpression"] = condition
    return {"Put": op}


def update(table: str, key: Mapping[str, str], expression: str, condition: str | None = None,
           names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A TransactWriteItems Update."""
    op: dict[str, Any] = {"TableName": table, "Key": ddb.serialize(key), "UpdateExpression": expression,
                          **_expression_args(names, values)}
    if condition:
        op["ConditionExpression"] = condition
    return {"Update": op}


def delete(table: str, key: Mapping[str, str], condition: str | None = None,
           names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A TransactWriteItems Delete."""
    op: dict[str, Any] = {"TableName": table, "Key": ddb.serialize(key), **_expression_args(names, values)}
    if condition:
        op["ConditionExpression"] = condition
    return {"Delete": op}


def set_attributes(attributes: Mapping[str, Any], remove: Iterable[str] = ()) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An UpdateExpression that sets ``attributes`` (removes those ``items.ABSENT``) and removes ``remove``, with its
    names and values."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    sets: list[str] = []
    for i, (name, value) in enumerate(attributes.items()):
        if value is items.ABSENT:
            continue
        names[f"#a{i}"] = name
        values[f":a{i}"] = value
        sets.append(f"#a{i} = :a{i}")
    removes: list[str] = []
    absent = [name for name, value in attributes.items() if value is items.ABSENT]
    for i, name in enumerate(dict.fromkeys([*absent, *(n for n in remove if n not in attributes)])):
        names[f"#r{i}"] = name
        removes.append(f"#r{i}")
    expression = ("SET " + ", ".join(sets)) if sets else ""
    if removes:
        expression += (" " if expression else "") + "REMOVE " + ", ".join(removes)
    return expression, names, values


RUNNING = Status.RUNNING.value
SETTLED = (Status.DONE.value, Status.FAILED.value)
# exec_state of an execution waiting to be retried (``settle_retry``, ``redrive``): the record is PENDING at its due
# time, ``retry_due`` names that due time and ``retry_at_ms`` when a claim of it may start again.
RETRYING = "RETRYING"
RETRY_ATTRIBUTES = ("retry_due", "retry_at", "retry_at_ms", "retry_from")  # retry_id stays: a repeat is known
PAUSED = "PAUSED"


@dataclass(frozen=True)
class Outcome:
    """What running a task's action came to: DONE with its result, or FAILED with the last error."""

    status: Status  # DONE, FAILED, or PENDING: to be retried at ``retry_at``
    attempts: int
    result: dict[str, Any] | None = None
    error: str | None = None
    retry_at: datetime | None = None


@dataclass(frozen=True)
class Execution:
    """The execution state a task's record keeps (state table, ``TASK#<id>`` / ``RECORD``): the latest due time
    claimed (``exec_due``, and ``exec_due_ms`` as epoch milliseconds, which orders occurrences), its state
    (RUNNING, DONE, FAILED), the claiming worker's token and time, how often a claim of it was taken over
    (``exec_takeovers``), and for a failure whether it was dead-lettered and alerted yet."""

    due: str | None = None
    state: str = ""
    owner: str = ""
    claimed_at: float = 0.0
    next_run_at: str | None = None
    dead_lettered: bool = False
    alerted: bool = False
    status: str = ""
    run_at: str | None = None
    moved_from: str | None = None
    attempts: int = 0
    error: str | None = None
    due_ms: int | None = None
    takeovers: int = 0
    retry_due: str | None = None
    retry_at_ms: int | None = None
    retry_from: str | None = None
    occurrences: int = 0  # a recurring task's runs so far (its end: max_occurrences)
    result: Any = None  # last_result
    callback_of: str = ""  # the execution ("<due> <owner>") whose callback ran (``mark_callback``)
    history: tuple[dict[str, Any], ...] = ()  # the record's history entries (chalicelib.tasks.history)
    history_count: int = 0

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> Execution:
        record = record or {}
        next_run = record.get("next_run_at")
        ran = record.get("callback")
        return replace(cls(_text(record.get("exec_due")), str(record.get("exec_state", "")), str(record.get("exec_owner", "")),
                   float(record.get("claimed_at", 0) or 0), str(next_run) if next_run else None,
                   record.get("dead_lettered") is True, record.get("alerted") is True,
                   str(record.get("status", "")), _text(record.get("run_at")), _text(record.get("moved_from")),
                   int(record.get("attempts", 0) or 0), _text(record.get("last_error")),
                   int(record["exec_due_ms"]) if record.get("exec_due_ms") is not None else None,
                   int(record.get("exec_takeovers", 0) or 0), _text(record.get("retry_due")),
                   int(record["retry_at_ms"]) if record.get("retry_at_ms") is not None else None,
                   _text(record.get("retry_from"))),
                       occurrences=int(record.get("occurrences", 0) or 0),
                       result=record.get("last_result"),
                       callback_of=f"{ran.get('run_at')} {ran.get('owner')}" if isinstance(ran, dict) else "",
                       history=tuple(history.entries_of(record)), history_count=history.count_of(record))

    def with_entry(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """The record's history attributes with ``entry`` added (``history.appended``)."""
        return history.appended({history.HISTORY: list(self.history), history.COUNT: self.history_count}, entry)

    def callback_ran(self) -> bool:
        """True when the callback of this execution (its due time, settled by its owner) ran already."""
        return self.callback_of == f"{self.due} {self.owner}"

    def attempts_before(self, due: str) -> int:
        """Attempts already made of the execution at ``due``: those a retry of it counts on (0 for a new one)."""
        return self.attempts if self.retry_due == due else 0

    def of_due(self, due: str) -> bool:
        return self.due == due


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None


def _written(found: Execution, due: str, owner: str, outcome: Outcome) -> bool:
    """True when the record ``found`` holds ``outcome`` of ``due`` by ``owner``: an earlier attempt of this very
    write whose response was lost (botocore's retry then failed its condition). Pure."""
    written = RETRYING if outcome.retry_at is not None else outcome.status.value
    return found.of_due(due) and found.owner == owner and found.state == written


def _applied(write: Callable[[], object]) -> bool:
    """True when a conditional write was applied, False when its condition failed (another write got there
    first); any other error raises."""
    try:
        write()
        return True
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming one execution (task, due time): ``won`` (``takeovers``: how often a claim of it
    was taken over, this one included), or why not (``lost``: running -- held by a live worker --, done, failed,
    cancelled, rescheduled, superseded -- a later due time was claimed), with the execution state as found."""

    won: bool
    lost: str = ""
    found: Execution = Execution()
    takeovers: int = 0


class TaskStore:
    def __init__(self, deps: Deps) -> None:
        self._ddb = deps.clients.dynamodb
        self.tasks_table = deps.settings.tasks_table
        self.state_table = deps.settings.state_table
        self._settings = deps.settings

    def table_of(self, key: TaskKey) -> str:
        """The table of a task's item: the tasks table, or its source's (a user's table)."""
        if not key.source:
            return self.tasks_table
        source = self._settings.source(key.source)
        if source is None:
            raise InvalidTask("source", f"no task source {key.source!r} is declared (TASK_SOURCES)")
        return source.table

    # --- reads ---------------------------------------------------------------

    def _get(self, table: str, key: Mapping[str, str]) -> dict[str, Any] | None:
        response = self._ddb.get_item(TableName=table, Key=ddb.serialize(key), ConsistentRead=True)
        item = response.get("Item")
        return ddb.deserialize(item) if item else None

    def get_item(self, key: TaskKey) -> dict[str, Any] | None:
        if key.source:
            response = self._ddb.get_item(TableName=self.table_of(key), Key=key.dynamo(), ConsistentRead=True)
            item = response.get("Item")
            return ddb.deserialize(item) if item else None
        return self._get(self.tasks_table, {"PK": key.pk, "SK": key.sk})

    def get_items(self, keys: Iterable[TaskKey], attempts: int = 3) -> dict[TaskKey, dict[str, Any] | None]:
        """Task items by key, in BatchGetItem calls of 100 keys (strongly consistent); a key missing from the
        answer (its keys left unprocessed after ``attempts`` tries) is for the caller to read alone."""
        wanted = list(dict.fromkeys(keys))  # BatchGetItem refuses a key twice in one request
        found: dict[TaskKey, dict[str, Any] | None] = {}
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            chunk = wanted[start:start + BATCH_GET_LIMIT]
            request: dict[str, Any] = {self.tasks_table: {"Keys": [k.dynamo() for k in chunk], "ConsistentRead": True}}
            for _ in range(attempts):
                response = self._ddb.batch_get_item(RequestItems=request)
                for row in response.get("Responses", {}).get(self.tasks_table, []):
                    plain = ddb.deserialize(row)
                    found[TaskKey(str(plain["PK"]), str(plain["SK"]))] = plain
                request = dict(response.get("UnprocessedKeys", {}))
                if not request:
                    break
            unprocessed = {(k["PK"]["S"], k["SK"]["S"]) for k in request.get(self.tasks_table, {}).get("Keys", [])}
            for key in chunk:
                if key not in found and (key.pk, key.sk) not in unprocessed:
                    found[key] = None  # read, and not there
        return found

    def get_record(self, task_id: str) -> dict[str, Any] | None:
        return self._get(self.state_table, items.record_key(task_id))

    def get_many(self, task_ids: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(items by task id, records by task id), in BatchGetItem calls of 100 keys: the items of API tasks, the
        records of all."""
        wanted: list[tuple[str, dict[str, str]]] = []
        for task_id in task_ids:
            if TASK_ID.fullmatch(task_id):  # an API task's item (the others are shown from their records)
                task_key = TaskKey.for_id(task_id)
                wanted.append((self.tasks_table, {"PK": task_key.pk, "SK": task_key.sk}))
            wanted.append((self.state_table, items.record_key(task_id)))
        found_items: dict[str, dict[str, Any]] = {}
        found_records: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            request: dict[str, Any] = {}
            for table, key in wanted[start:start + BATCH_GET_LIMIT]:
                request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(ddb.serialize(key))
            while request:
                response = self._ddb.batch_get_item(RequestItems=request)
                for table, rows in response.get("Responses", {}).items():
                    for row in rows:
                        plain = ddb.deserialize(row)
                        if table == self.tasks_table:
                            found_items[TaskKey(plain["PK"], plain["SK"]).task_id] = plain
                        else:
                            found_records[plain["PK"][len(items.RECORD_PREFIX):]] = plain
                request = dict(response.get("UnprocessedKeys", {}))
        return found_items, found_records

    def query_index(self, status: Status, after: str | None, limit: int,
                    source: str | None = None) -> tuple[list[str], str | None]:
        """(task ids, the ``listed`` to continue after -- None: no more) of one page of a status in the status
        index (a sparse GSI of the state table over the records that carry ``listed``: ``status_key``,
        ``listed``): each of the status's shards queried from ``after`` on, their pages merged by ``listed``
        (``items.merge_shards``; ``LIST_QUERY_THREADS`` queries at a time): the API's tasks oldest first, then
        the others by source; ``source`` (``items.listed_prefix``) narrows the key condition to one source's."""
        with ThreadPoolExecutor(max_workers=LIST_QUERY_THREADS, thread_name_prefix="task-list") as pool:
            pages = list(pool.map(lambda key: self._query_shard(key, after, limit, source),
                                  items.status_keys(status.value)))
        return items.merge_shards(pages, limit)

    def list_status(self, status: Status, after: str | None, limit: int,
                    source: str | None = None) -> tuple[list[str], str | None]:
        """One page of a status, from the status index for a status it carries (``query_index``), else from the
        state table's own keys (``scan_status``)."""
        if status.value in items.INDEXED_STATUSES:
            return self.query_index(status, after, limit, source)
        return self.scan_status(status, after, limit, source)

    def scan_status(self, status: Status, after: str | None, limit: int,
                    source: str | None = None) -> tuple[list[str], str | None]:
        """(task ids, the task id to continue after -- None: no more) of one page of a status the status index
        does not carry (PENDING, DONE): the state table's listed records in that status, in its own key order,
        from the record of ``after`` on (one Scan page after another, filtered: the records read are priced, not
        the ones shown). A page is full unless the status is done, and its token is given only when one more
        record was found after it."""
        prefix = items.listed_prefix(source) if source is not None else None
        condition = "#s = :s AND attribute_exists(#l)"
        values: dict[str, Any] = {":s": {"S": status.value}}
        if source is not None and prefix is None:
            condition += " AND #l < :mark"
            values[":mark"] = {"S": items.LISTED_SOURCE_MARK}
        elif prefix is not None:
            condition += " AND begins_with(#l, :prefix)"
            values[":prefix"] = {"S": prefix}
        kwargs: dict[str, Any] = {
            "TableName": self.state_table, "FilterExpression": condition, "ProjectionExpression": "PK",
            "ExpressionAttributeNames": {"#s": "status", "#l": items.LISTED}, "ExpressionAttributeValues": values}
        if after is not None:
            kwargs["ExclusiveStartKey"] = ddb.serialize(items.record_key(after))
        ids: list[str] = []
        while True:
            response = self._ddb.scan(**kwargs)
            for row in response.get("Items", []):
                pk = str(row["PK"]["S"])
                if pk.startswith(items.RECORD_PREFIX):
                    ids.append(pk[len(items.RECORD_PREFIX):])
                if len(ids) > limit:  # one more than the page: the status goes on after it
                    return ids[:limit], ids[limit - 1]
            last = response.get("LastEvaluatedKey")
            if last is None:
                return ids, None
            kwargs["ExclusiveStartKey"] = last

    def _query_shard(self, key: str, after: str | None, limit: int,
                     source: str | None) -> tuple[list[tuple[str, str]], bool]:
        """((listed, task id) rows in order, whether more follow) of one status-index partition key, after
        ``after``: a range given as BETWEEN (inclusive) drops the row equal to ``after``."""
        condition, values = "#k = :key", {":key": {"S": key}}
        prefix = items.listed_prefix(source) if source is not None else None
        if source is None:
            if after is not None:
                condition += " AND #l > :after"
                values[":after"] = {"S": after}
        elif prefix is None:  # the API's tasks: their listed starts with the time created, before the mark
            if after is None:
                condition += " AND #l < :mark"
            else:
                condition += " AND #l BETWEEN :after AND :mark"
                values[":after"] = {"S": after}
            values[":mark"] = {"S": items.LISTED_SOURCE_MARK}
        elif after is None:
            condition += " AND begins_with(#l, :prefix)"
            values[":prefix"] = {"S": prefix}
        else:  # after <= listed <= the prefix's next string: the prefix's keys (none equals that string)
            condition += " AND #l BETWEEN :after AND :end"
            values.update({":after": {"S": max(after, prefix)}, ":end": {"S": prefix[:-1] + chr(ord(prefix[-1]) + 1)}})
        kwargs: dict[str, Any] = {
            "TableName": self.state_table, "IndexName": items.STATUS_INDEX, "KeyConditionExpression": condition,
            "ExpressionAttributeNames": {"#k": items.STATUS_KEY, **({"#l": items.LISTED} if "#l" in condition else {})},
            "ExpressionAttributeValues": values, "Limit": limit + (1 if after is not None else 0),
        }
        rows: list[tuple[str, str]] = []
        more = True
        while more and len(rows) < limit:
            response = self._ddb.query(**kwargs)
            for row in response.get("Items", []):
                plain = ddb.deserialize(row)
                listed = str(plain[items.LISTED])
                if listed != after:
                    rows.append((listed, str(plain["PK"])[len(items.RECORD_PREFIX):]))
            last = response.get("LastEvaluatedKey")
            more = last is not None
            if last is not None:
                kwargs["ExclusiveStartKey"] = last
        return rows, more

    # --- writes --------------------------------------------------------------

    def transact(self, operations: list[dict[str, Any]]) -> bool:
        """Write all or nothing; False when a condition failed (someone else changed the task first)."""
        try:
            self._ddb.transact_write_items(TransactItems=operations)  # type: ignore[arg-type]
            return True
        except ClientError as exc:
            if error_code(exc) == "TransactionCanceledException":
                reasons: list[dict[str, Any]] = cast(Any, exc.response).get("CancellationReasons", [])
                if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
                    return False
            raise

    def update_item(self, key: TaskKey, attributes: Mapping[str, Any], condition: str,
                    names: Mapping[str, str], values: Mapping[str, Any], remove: Iterable[str] = ()) -> bool:
        expression, set_names, set_values = set_attributes(attributes, remove)
        return _applied(lambda: self._ddb.update_item(
            TableName=self.table_of(key), Key=key.dynamo(), UpdateExpression=expression,
            ConditionExpression=condition, **_expression_args({**set_names, **names}, {**set_values, **values})))

    # --- the API's transitions: items of its transactions (lifecycle: create, cancel, reschedule) ------

    def create(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``create``: the new task's record (``items.record_of``), written with its item or not at all."""
        return put(self.state_table, record, "attribute_not_exists(PK)")

    def cancel(self, record: Mapping[str, Any], stuck: bool) -> dict[str, Any]:
        """``cancel``: the record as CANCELLED (``record``: all of it, its status CANCELLED), on the condition
        that no executor claimed its due time since it was read (``stuck``: or that claim is one a dead-lettered
        due message left RUNNING)."""
        condition, names, values = not_executing(str(record.get("run_at")), stuck)
        return put(self.state_table, record, condition, names, values)

    def reschedule(self, key: TaskKey, changes: Mapping[str, Any], moved_from: str, stuck: bool) -> dict[str, Any]:
        """``reschedule``: the record's new due time and action (``changes``) and ``moved_from``, so that an
        executor that read the item before this write cannot claim the old time after it (docs/executor.md);
        the old time's dead-letter note goes. Same condition as ``cancel``."""
        expression, names, values = set_attributes({**changes, "moved_from": moved_from}, ["dead_letter"])
        condition, condition_names, condition_values = not_executing(moved_from, stuck)
        return update(self.state_table, items.record_key(key.task_id), expression,
                      condition.replace(":due", ":old_due"), {**names, **condition_names},
                      {**values, **{k.replace(":due", ":old_due"): v for k, v in condition_values.items()}})

    # --- the operator's transitions: retry a failure, pause and resume (chalicelib.tasks.operations) ------------

    def redrive(self, key: TaskKey, due: datetime, run_at: datetime, retry_id: str, token: str, now: datetime,
                lease_seconds: int, kept: Mapping[str, Any] | None = None) -> bool:
        """``redrive``: a FAILED or DEAD_LETTERED execution of ``due`` runs again, fresh (no attempts counted, its
        age from ``run_at``): the record PENDING, RETRYING until ``run_at``, the retry's ``retry_id`` kept (and
        ``retry_token``, this request's).  Refused (False) unless the record is FAILED at that due time, or
        DEAD_LETTERED at it without a live claim -- and never when it carries this ``retry_id`` already: a repeat
        of the retry (its answer lost, two requests at once) re-arms nothing, whatever became of the retry since.
        True also when the write found is this request's own (``token``: an earlier attempt whose answer was lost).
        ``kept``: the record's history with the retry's entry (``history.appended`` of the record read), written
        on the condition that no entry was added since that read.  One conditional UpdateItem; the caller sends
        the due message."""
        due_text = iso(due)
        attributes: dict[str, Any] = {
            **items.status_fields(key.task_id, Status.PENDING.value), "exec_state": RETRYING, "exec_due": due_text,
            "exec_due_ms": due_ms(due),
            "retry_due": due_text, "retry_at": iso(run_at), "retry_at_ms": due_ms(run_at), "retry_from": iso(run_at),
            "retry_id": retry_id, "retry_token": token, "attempts": 0, "exec_takeovers": 0, "redriven_at": iso(now),
            **(kept or {})}
        expression, names, values = set_attributes(attributes, [
            "dead_letter", "dead_lettered", "alerted", "finished_at", "exec_owner", "claimed_at", STATE_TTL_ATTRIBUTE])
        names.update({"#rs": "status", "#rr": "run_at", "#rd": "exec_due", "#re": "exec_state", "#rc": "claimed_at",
                      "#ri": "retry_id"})
        values.update({":r_failed": Status.FAILED.value, ":r_dead": Status.DEAD_LETTERED.value, ":r_due": due_text,
                       ":r_running": RUNNING, ":r_stale": now.timestamp() - lease_seconds, ":r_id": retry_id})
        condition = ("((#rs = :r_failed AND #rd = :r_due) OR (#rs = :r_dead AND #rr = :r_due AND (attribute_not_exists(#re)"
                     " OR #re <> :r_running OR #rd <> :r_due OR #rc < :r_stale)))"
                     " AND (attribute_not_exists(#ri) OR #ri <> :r_id)")
        if kept:
            seen, seen_names, seen_values = _history_seen(int(kept[history.COUNT]) - 1)
            condition += f" AND {seen}"
            names.update(seen_names)
            values.update(seen_values)
        if _applied(lambda: self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
                UpdateExpression=expression, ConditionExpression=condition, **_expression_args(names, values))):
            return True
        found = self.get_record(key.task_id) or {}
        return found.get("retry_id") == retry_id and found.get("retry_token") == token

    def pause(self, key: TaskKey, record: Mapping[str, Any], due: str, now: datetime,
              kept: Mapping[str, Any] | None = None) -> bool:
        """``pause``: the record PAUSED (``record``: what a task without one gets -- ``items.record_of``), on the
        condition that it is PENDING (or has no record yet) and no executor claimed its due time ``due`` since it
        was read, so a pause and a claim never both win (``kept``: the history with the pause's entry). False when
        that condition failed. One UpdateItem."""
        sets = {**items.status_fields(key.task_id, Status.PAUSED.value), "paused_at": iso(now), **(kept or {})}
        creates = {k: v for k, v in record.items() if k not in ("PK", "SK", *sets) and v is not None}
        expression, names, values = set_attributes(sets)
        for i, (name, value) in enumerate(creates.items()):
            names[f"#c{i}"], values[f":c{i}"] = name, value
            expression += f", #c{i} = if_not_exists(#c{i}, :c{i})"
        condition, condition_names, condition_values = not_executing(due, False)
        names.update({**condition_names, "#ps": "status"})
        values.update({**condition_values, ":p_pending": Status.PENDING.value})
        return _applied(lambda: self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)), UpdateExpression=expression,
            ConditionExpression=f"(attribute_not_exists(#ps) OR #ps = :p_pending) AND ({condition})",
            **_expression_args(names, values)))

    def resume(self, key: TaskKey, run_at: str, moved_from: str | None,
               kept: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``resume``: the record PENDING again at ``run_at`` (the next occurrence after now; ``moved_from``: the
        due time it had, when that one passed while paused), as an item of the API's transaction with the item's
        new due time; on the condition that it is still PAUSED (``kept``: the history with the resume's entry)."""
        changes: dict[str, Any] = {**items.status_fields(key.task_id, Status.PENDING.value), "run_at": run_at,
                                   **(kept or {})}
        if moved_from is not None:
            changes["moved_from"] = moved_from
        expression, names, values = set_attributes(changes, ["paused_at"])
        names["#ps"] = "status"
        values[":p_paused"] = Status.PAUSED.value
        return update(self.state_table, items.record_key(key.task_id), expression, "#ps = :p_paused", names, values)

    # --- executions: the claim and the outcome, on the task's record -----------------------------

    def claim(self, key: TaskKey, due: datetime, now: datetime, lease_seconds: int, owner: str,
              shape: Mapping[str, Any] | None = None) -> Claim:
        """Claim the execution of the task at ``due`` for ``owner`` (a token of this attempt), on its record:
        new (a later due time than any claimed before, or none yet), or taken over from a worker whose lease
        ran out (counted in ``exec_takeovers``).  Lost when it is running under a live lease, settled already,
        older than a due time claimed since (an earlier occurrence's message coming back), cancelled at that
        time, or moved away from it by the API.  One UpdateItem (two for a takeover): a condition that fails
        returns the record as it was, and an earlier attempt of this very write (its response lost, botocore's
        retry failing its condition) is recognised by the owner token.  ``shape`` (the task's strategy and
        action) goes on the record too, so GET still shows what the task was once its item is gone (a lazy
        task's, deleted by its TTL)."""
        due_text, stamp = iso(due), now.timestamp()
        stale = stamp - lease_seconds
        names = {"#s": "status", "#sk": items.STATUS_KEY}  # PENDING is not in the status index: its key goes
        values = {":due": due_text, ":due_ms": due_ms(due), ":running": RUNNING, ":owner": owner, ":now": stamp,
                  ":cancelled": Status.CANCELLED.value, ":pending": Status.PENDING.value, ":zero": 0,
                  ":id": key.task_id, ":pk": key.pk, ":sk": key.sk, ":by_item": items.BY_ITEM,
                  ":retrying": RETRYING, ":now_ms": due_ms(now), ":paused": PAUSED}
        listed, listed_values = _listed_update(key)
        values.update(listed_values)
        shown = "".join(f", #shape{i} = :shape{i}" for i in range(len(shape or {}))) + listed
        names.update({f"#shape{i}": name for i, name in enumerate(shape or {})})
        values.update({f":shape{i}": value for i, value in enumerate((shape or {}).values())})
        request: dict[str, Any] = {
            "TableName": self.state_table, "Key": ddb.serialize(items.record_key(key.task_id)),
            "UpdateExpression": "SET exec_due = :due, exec_due_ms = :due_ms, exec_state = :running, "
                                "exec_owner = :owner, claimed_at = :now, exec_takeovers = :zero, "
                                "id = if_not_exists(id, :id), task_pk = if_not_exists(task_pk, :pk), "
                                "task_sk = if_not_exists(task_sk, :sk), run_at = :due, "
                                f"#s = :pending{shown} REMOVE #sk, "
                                f"dead_lettered, alerted, next_run_at, {items.CANCELLED_BY}, {STATE_TTL_ATTRIBUTE}",
            "ConditionExpression": CLAIMABLE, "ReturnValues": "ALL_OLD",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD", **_expression_args(names, values)}
        claim = self._claim_write(key, request, due, owner, stale)
        if claim.won or claim.lost != "released":
            return claim
        previous = claim.found.takeovers
        takeover: dict[str, Any] = {  # its worker died: take it over, once per lease, counted
            "TableName": self.state_table, "Key": ddb.serialize(items.record_key(key.task_id)),
            "UpdateExpression": "SET exec_owner = :owner, claimed_at = :now, exec_due_ms = :due_ms, "
                                f"#s = :pending{listed} REMOVE #sk ADD exec_takeovers :one",
            "ConditionExpression": TAKEOVER, "ReturnValues": "ALL_OLD", "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_expression_args({"#s": "status", "#sk": items.STATUS_KEY}, {
                ":due": due_text, ":running": RUNNING, ":owner": owner, ":now": stamp, ":stale": stale,
                ":previous": claim.found.owner, ":cancelled": Status.CANCELLED.value, ":one": 1,
                ":due_ms": due_ms(due), ":by_item": items.BY_ITEM, ":pending": Status.PENDING.value, **listed_values})}
        claim = self._claim_write(key, takeover, due, owner, stale)
        return replace(claim, takeovers=previous + 1) if claim.won else claim

    def _claim_write(self, key: TaskKey, request: dict[str, Any], due: datetime, owner: str,
                     stale: float) -> Claim:
        due_text, due_at_ms = iso(due), due_ms(due)
        try:
            response = self._ddb.update_item(**request)
            return Claim(True, found=Execution.of(ddb.deserialize(response.get("Attributes") or {})))
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                found = Execution.of(ddb.deserialize(cast(Any, exc.response).get("Item") or {}))
            else:  # a hard error: the write may have been applied all the same
                found = Execution.of(self.get_record(key.task_id))
                if not (found.of_due(due_text) and found.owner == owner and found.state == RUNNING):
                    raise
        if found.of_due(due_text) and found.owner == owner and found.state == RUNNING:
            return Claim(True, found=found)
        return Claim(False, lost_reason(found, due_text, stale, due_at_ms), found)

    def settle(self, key: TaskKey, due: datetime, owner: str, outcome: Outcome, now: datetime,
               next_due: datetime | None, occurrences: int | None = None,
               kept: Mapping[str, Any] | None = None) -> bool:
        """Write the outcome of this worker's claim on the task's record (status, attempts, result or error; a
        recurring task's next due time, and its ``occurrences``: its runs, this one counted; ``kept``: the
        record's history with this execution's entry, ``Execution.with_entry`` of the claim's record -- set
        whole, so a repeat of this write adds nothing, and only this claim's owner writes the record meanwhile).
        True when it is there (this write, or an earlier attempt of it whose
        response was lost); False when the claim is no longer this worker's (its lease ran out and another
        worker took it over) or the API cancelled or moved the task since (a claim its dead-lettered due message
        left RUNNING)."""
        due_text = iso(due)
        sets, removed = self._outcome(key, due, outcome, now, next_due)
        sets.update(kept or {})
        if occurrences is not None:
            sets["occurrences"] = occurrences
            if next_due is None and outcome.retry_at is None:  # its last occurrence: none follows
                removed.append("next_run_at")
        expression, names, values = set_attributes(sets, removed)
        alias = {name: placeholder for placeholder, name in names.items()}  # one placeholder per attribute
        status, run_at = alias.get("status", "#st"), alias.get("run_at", "#ra")
        names.update({"#ed": "exec_due", "#eo": "exec_owner", "#es": "exec_state", status: "status", run_at: "run_at"})
        values.update({":due": due_text, ":me": owner, ":running": RUNNING, ":pending": Status.PENDING.value,
                       ":dead_lettered": Status.DEAD_LETTERED.value})
        found = self._update_or_found(key, expression, SETTLEABLE.format(status=status, run_at=run_at), names, values)
        return found is None or _written(found, due_text, owner, outcome)

    def settle_once(self, key: TaskKey, due: datetime, owner: str, outcome: Outcome, now: datetime,
                    lease_seconds: int, shape: Mapping[str, Any] | None = None,
                    entry: Mapping[str, Any] | None = None) -> Claim:
        """``settle_once_done``, ``_retry``, ``_failed``: the outcome of a one-time task's execution run without a
        claim (its action's target drops a repeat: ``executor.settles_once``), written as ``settle`` writes it,
        with what a claim would have written (``exec_due``, ``exec_due_ms``, ``run_at``, this worker's token, the
        task's ``shape``), on the claim's condition for a new execution (``NEW_EXECUTION``): no execution of this
        due time nor of a later one on the record, the task not paused, not cancelled at this time by the API nor
        moved from it.  One conditional UpdateItem; won when the outcome is there (this write, or an earlier
        attempt of it whose response was lost), else lost with the reason (``lost_reason``: done or failed -- a
        duplicate delivery --, retrying, running, cancelled, rescheduled, paused, superseded) and the record as
        found.  ``entry``: the execution's history entry, appended to the record's history (``list_append``: the
        record is not read) while it holds fewer than ``history.KEEP`` entries; a full one is written whole
        (``history.appended``) by a second write, on the condition that no entry was added since."""
        due_text = iso(due)
        sets, removed = self._outcome(key, due, outcome, now, None)  # a one-time task's (executor.settles_once)
        sets.update({"exec_due": due_text, "exec_due_ms": due_ms(due), "exec_owner": owner, "run_at": due_text,
                     **(shape or {})})
        listed = items.listed_of(key)
        if listed is not None:
            sets[items.LISTED] = listed
        removed += ["dead_lettered", "alerted", "claimed_at", "exec_takeovers", "next_run_at", items.CANCELLED_BY,
                    STATE_TTL_ATTRIBUTE]
        expression, names, values = set_attributes(sets, removed)
        for i, (name, value) in enumerate((("id", key.task_id), ("task_pk", key.pk), ("task_sk", key.sk))):
            names[f"#k{i}"], values[f":k{i}"] = name, value
            expression = expression.replace("SET ", f"SET #k{i} = if_not_exists(#k{i}, :k{i}), ", 1)
        status = {name: placeholder for placeholder, name in names.items()}["status"]
        values.update({":due": due_text, ":due_ms": due_ms(due), ":paused": PAUSED,
                       ":cancelled": Status.CANCELLED.value, ":by_item": items.BY_ITEM})
        condition = NEW_EXECUTION.replace("#s", status)
        if entry is None:
            found = self._update_or_found(key, expression, condition, names, values)
        else:
            names.update({"#hh": history.HISTORY, "#hn": history.COUNT})
            appended = expression.replace("SET ", "SET #hh = list_append(if_not_exists(#hh, :h_none), :h_entry), ", 1)
            found = self._update_or_found(
                key, appended + " ADD #hn :h_one", f"{condition} AND (attribute_not_exists(#hh) OR size(#hh) < :h_keep)",
                names, {**values, ":h_none": [], ":h_entry": [dict(entry)], ":h_one": 1, ":h_keep": history.KEEP})
            if found is not None and not _written(found, due_text, owner, outcome) and len(found.history) >= history.KEEP:
                whole = found.with_entry(entry)  # a full history: written whole, if no entry was added since
                found = self._update_or_found(
                    key, expression.replace("SET ", "SET #hh = :h_all, #hn = :h_count, ", 1),
                    f"{condition} AND #hn = :h_seen", names,
                    {**values, ":h_all": whole[history.HISTORY], ":h_count": whole[history.COUNT],
                     ":h_seen": found.history_count})
        if found is None or _written(found, due_text, owner, outcome):
            return Claim(True, found=found or Execution())
        return Claim(False, lost_reason(found, due_text, now.timestamp() - lease_seconds, due_ms(due)), found)

    def _outcome(self, key: TaskKey, due: datetime, outcome: Outcome, now: datetime,
                 next_due: datetime | None) -> tuple[dict[str, Any], list[str]]:
        """(attributes to set, to remove) of an execution's outcome on its record: status, attempts, result or
        error; a retry's time (RETRYING); a recurring task's next due time; a finished one's expiry."""
        due_text, stamp = iso(due), iso(now)
        retry = outcome.retry_at is not None
        attributes: dict[str, Any] = {"exec_state": RETRYING if retry else outcome.status.value,
                                      "attempts": outcome.attempts, "last_run_at": stamp}
        removed: list[str] = [] if retry else list(RETRY_ATTRIBUTES)
        for name, value in (("last_result", outcome.result), ("last_error", outcome.error)):
            if value is not None:
                attributes[name] = value
            else:
                removed.append(name)
        if outcome.retry_at is not None:  # settle_retry: PENDING at this due time, claimable again from retry_at
            attributes.update({**items.status_fields(key.task_id, Status.PENDING.value), "retry_due": due_text,
                               "retry_at": iso(outcome.retry_at),
                               "retry_at_ms": due_ms(outcome.retry_at)})
        elif next_due is not None and outcome.status is Status.DONE:
            attributes.update({**items.status_fields(key.task_id, Status.PENDING.value), "run_at": iso(next_due),
                               "next_run_at": iso(next_due)})
        else:  # finished: the claim's lease and takeovers are read no more, and the record is kept 30 days
            attributes.update({**items.status_fields(key.task_id, outcome.status.value), "finished_at": stamp,
                               STATE_TTL_ATTRIBUTE: items.record_expiry(now, self._settings)})
            removed += ["claimed_at", "exec_takeovers"]
        return attributes, removed

    def _update_or_found(self, key: TaskKey, expression: str, condition: str, names: Mapping[str, str],
                         values: Mapping[str, Any]) -> Execution | None:
        """One conditional UpdateItem of the task's record: None when applied, else the record as it was."""
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
                UpdateExpression=expression, ConditionExpression=condition,
                ReturnValuesOnConditionCheckFailure="ALL_OLD", **_expression_args(names, values))
            return None
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return Execution.of(ddb.deserialize(cast(Any, exc.response).get("Item") or {}))

    def mark(self, key: TaskKey, flag: str) -> None:
        """``mark_dead_lettered``, ``mark_alerted``: note on the record that a step after a failure
        (``dead_lettered``, ``alerted``) is done."""
        self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
            UpdateExpression="SET #f = :true", **_expression_args({"#f": flag}, {":true": True}))

    def mark_callback(self, key: TaskKey, due: str, owner: str, note: Mapping[str, Any]) -> bool:
        """``mark_callback``: note on the record that the callback of the execution at ``due`` settled by
        ``owner`` ran (``note``: which, its status, result or error), on the condition that the record still
        holds that execution (a later occurrence's claim, a redrive's, is not marked).  False when it no longer
        does, or the record has left the state the settle left (DONE, FAILED; PENDING at a recurring task's next
        time): cancelled, paused or dead-lettered since."""
        return _applied(lambda: self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
            UpdateExpression="SET #cb = :note",
            ConditionExpression="exec_due = :due AND exec_owner = :owner AND #s IN (:pending, :done, :failed)",
            **_expression_args({"#cb": "callback", "#s": "status"}, {
                ":note": {**note, "run_at": due, "owner": owner}, ":due": due, ":owner": owner,
                ":pending": Status.PENDING.value, ":done": Status.DONE.value, ":failed": Status.FAILED.value})))

    def put_back(self, image: Mapping[str, Any], changes: Mapping[str, Any], key: TaskKey | None = None) -> bool:
        """Put a lazy task's item back (DynamoDB JSON as it was, binary as bytes) with ``changes`` (DynamoDB
        JSON): False when an item with its key exists again (written by its program meanwhile)."""
        return _applied(lambda: self._ddb.put_item(
            TableName=self.table_of(key) if key else self.tasks_table, Item={**image, **changes},
            ConditionExpression="attribute_not_exists(#k)",
            ExpressionAttributeNames={"#k": key.key_attribute if key else "PK"}))

    # --- due messages SQS gave up on ------------------------------------------------

    def note_dead_letter(self, key: TaskKey, due: datetime, note: Mapping[str, Any], attempts: int | None = None) -> None:
        """``note_dead_letter``: the task is DEAD_LETTERED, its record keeping why its due message for ``due`` was
        dead-lettered (``note``) -- and ``attempts``, when given: the deliveries that may have run the action of a
        task that runs without a claim, which recorded none; a task written by another program gets a record for
        it (listed by the status index like any other). A claim, a retry, a cancel or a reschedule leaves the
        state."""
        listed, listed_values = _listed_update(key)
        counted, counted_values = ("", {}) if attempts is None else (", attempts = :attempts", {":attempts": attempts})
        self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
            UpdateExpression="SET dead_letter = :note, id = if_not_exists(id, :id), "
                             "task_pk = if_not_exists(task_pk, :pk), task_sk = if_not_exists(task_sk, :sk), "
                             f"run_at = if_not_exists(run_at, :due), #s = :dead_lettered, #sk = :dead_key{listed}{counted}",
            **_expression_args({"#s": "status", "#sk": items.STATUS_KEY}, {
                ":dead_key": items.status_key(key.task_id, Status.DEAD_LETTERED.value),
                ":note": dict(note), ":id": key.task_id, ":pk": key.pk, ":sk": key.sk,
                ":due": iso(due), ":dead_lettered": Status.DEAD_LETTERED.value, **listed_values,
                **counted_values}))

    def note_stream_dead_letter(self, key: TaskKey, note: Mapping[str, Any], name: str) -> None:
        """``note_stream_dead_letter``: keep ``note`` (as ``name``) on the task's record, unless a note of a later
        stream record is there (``chalicelib.tasks.stream_dead_letters``); a task written by another program gets
        a record for it. A task with no record, PENDING (not running) or DEAD_LETTERED is DEAD_LETTERED, so the
        status index lists it so; any other keeps its state (``note_stream_dead_letter_kept``: a second write,
        only then). One conditional UpdateItem."""
        names = {"#n": name, "#q": "sequence", "#s": "status", "#sk": items.STATUS_KEY}
        values: dict[str, Any] = {":note": dict(note), ":q": note["sequence"], ":id": key.task_id, ":pk": key.pk,
                                  ":sk": key.sk}
        sets = ["#n = :note", "id = if_not_exists(id, :id)", "task_pk = if_not_exists(task_pk, :pk)",
                "task_sk = if_not_exists(task_sk, :sk)"]
        if note.get("run_at"):
            values[":due"] = note["run_at"]
            sets.append("run_at = if_not_exists(run_at, :due)")
        listed, listed_values = _listed_update(key)
        if listed:
            sets.append(listed.lstrip(", "))
            values.update(listed_values)
        newer = "(attribute_not_exists(#n) OR #n.#q < :q)"
        dead = {":dead_lettered": Status.DEAD_LETTERED.value, ":pending": Status.PENDING.value, ":running": RUNNING,
                ":dead_key": items.status_key(key.task_id, Status.DEAD_LETTERED.value)}
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
                UpdateExpression="SET " + ", ".join([*sets, "#s = :dead_lettered", "#sk = :dead_key"]),
                ConditionExpression=f"{newer} AND (attribute_not_exists(#s) OR #s = :dead_lettered OR (#s = :pending"
                                    " AND (attribute_not_exists(exec_state) OR exec_state <> :running"
                                    " OR exec_due <> run_at)))",
                **_expression_args(names, {**values, **dead}))
            return
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
        values[":pending"] = Status.PENDING.value
        del names["#sk"]  # a record with a status has the status_key of it already; a new one is PENDING: none
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
                UpdateExpression="SET " + ", ".join([*sets, "#s = if_not_exists(#s, :pending)"]),
                ConditionExpression=newer, **_expression_args(names, values))
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    # --- the stream's transition: a task's item deleted by a user, or no longer a task -------------

    def cancel_by_item(self, task: Task, at: str, now: datetime) -> bool:
        """``cancel_by_item``: record ``task`` CANCELLED at ``at`` with what it was (due time, strategy, action)
        and ``cancelled_by: "item"`` (the stream saw its item deleted by a user, or a lazy item lose its TTL), so
        GET tells a cancelled task from one that never existed; the record expires as the finished ones do.
        Written when there is no record yet, it is PENDING (not RUNNING: a claim that runs settles it), or
        cancelled by an item before -- never over a finished task or the API's cancel. False when the record
        was not in one of those states. One conditional UpdateItem."""
        attributes: dict[str, Any] = {**items.status_fields(task.id, Status.CANCELLED.value), "finished_at": at,
                                      "id": task.id,
                                      "task_pk": task.key.pk, "task_sk": task.key.sk, "run_at": iso(task.due),
                                      "strategy": task.strategy.value, "action": task.action,
                                      items.CANCELLED_BY: items.BY_ITEM,
                                      STATE_TTL_ATTRIBUTE: items.record_expiry(now, self._settings)}
        attributes.update({k: v for k, v in (("recurrence", task.recurrence), ("timezone", task.timezone)) if v})
        listed = items.listed_of(task.key)
        if listed is not None:
            attributes[items.LISTED] = listed
        expression, names, values = set_attributes(attributes)
        alias = {name: placeholder for placeholder, name in names.items()}
        status, run_at, by = alias["status"], alias["run_at"], alias[items.CANCELLED_BY]
        names.update({"#es": "exec_state", "#ed": "exec_due"})
        values.update({":pending": Status.PENDING.value, ":running": RUNNING, ":by_item_c": items.BY_ITEM,
                       ":cancelled_c": Status.CANCELLED.value})
        condition = (f"attribute_not_exists(PK) OR ({status} = :pending AND (attribute_not_exists(#es) OR "
                     f"#es <> :running OR #ed <> {run_at})) OR ({status} = :cancelled_c AND {by} = :by_item_c)")
        # False: finished, cancelled by the API, or running (its own transition decides)
        return _applied(lambda: self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(task.id)), UpdateExpression=expression,
            ConditionExpression=condition, **_expression_args(names, values)))

    # --- images of lazy items too large for a due message -------------------------

    def put_image(self, task_id: str, due: datetime, image: Mapping[str, Any], now: datetime) -> None:
        """Keep ``image`` (DynamoDB JSON, binary as bytes) until the task runs."""
        self._ddb.put_item(TableName=self.state_table, Item={
            **ddb.serialize(items.image_key(task_id, due)), "image": {"M": dict(image)},
            STATE_TTL_ATTRIBUTE: {"N": str(int((now + items.IMAGE_RETENTION).timestamp()))}})

    def get_image(self, task_id: str, due: datetime) -> dict[str, Any] | None:
        """The kept image (DynamoDB JSON, binary as bytes), or None when it is gone."""
        response = self._ddb.get_item(TableName=self.state_table, Key=ddb.serialize(items.image_key(task_id, due)),
                                      ConsistentRead=True)
        image = response.get("Item", {}).get("image", {}).get("M")
        return dict(image) if image is not None else None


# A claim is new when the record has no execution of this due time nor of a later one, and the task was neither
# cancelled at that time (but by the stream, for an item deleted then: one written again runs) nor moved away from
# it by the API (PATCH) since it was read.  An earlier due time than the one claimed last is an old occurrence's
# message coming back (a duplicate, a redelivery): it never runs again.
NOT_CANCELLED_OR_MOVED = ("(attribute_not_exists(#s) OR #s <> :cancelled OR attribute_not_exists(run_at) OR run_at <> :due"
                          " OR cancelled_by = :by_item)"
                          " AND (attribute_not_exists(moved_from) OR moved_from <> :due)")
# A retry of the execution at this due time (settle_retry, redrive) is claimable from its retry time on; a paused
# task's occurrences are not claimed at all (skipped).
CLAIMABLE = ("(attribute_not_exists(exec_due) OR exec_due_ms < :due_ms OR (exec_due = :due AND exec_state = :retrying"
             " AND retry_due = :due AND retry_at_ms <= :now_ms)) AND (attribute_not_exists(#s) OR #s <> :paused) AND "
             + NOT_CANCELLED_OR_MOVED)
# A settle without a claim (settle_once): the claim's condition for a new execution, checked when the outcome is
# written (no retry clause: a retry of the execution takes the claim).
NEW_EXECUTION = ("(attribute_not_exists(exec_due) OR exec_due_ms < :due_ms) AND (attribute_not_exists(#s) OR #s <> :paused)"
                 " AND " + NOT_CANCELLED_OR_MOVED)
# A settle: the record is RUNNING (lifecycle.state_of) at this due time, under this worker's claim -- not
# cancelled or moved by the API since (which it may do to a claim its dead-lettered due message left RUNNING).
SETTLEABLE = ("#ed = :due AND #eo = :me AND #es = :running AND {status} IN (:pending, :dead_lettered)"
              " AND {run_at} = :due")
# A takeover: the execution of this due time is RUNNING under a lease that ran out, still held by the worker the
# claim found (so two takers cannot both win).
TAKEOVER = ("exec_due = :due AND exec_state = :running AND claimed_at < :stale AND exec_owner = :previous"
            " AND " + NOT_CANCELLED_OR_MOVED)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _listed_update(key: TaskKey) -> tuple[str, dict[str, Any]]:
    """The part of an UpdateExpression that lists a task not made by the API in the status index (its
    ``listed``, ``items.listed_of``: fixed by its key, so writing it again changes nothing), and its value;
    nothing for an API task (its ``listed`` is written once, by ``create``)."""
    listed = items.listed_of(key)
    return ("", {}) if listed is None else (f", {items.LISTED} = :listed", {":listed": listed})


def _history_seen(count: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A condition that the record's history has ``count`` entries written (as read), with its names and values."""
    if count <= 0:
        return "attribute_not_exists(#h_count)", {"#h_count": history.COUNT}, {}
    return "#h_count = :h_seen", {"#h_count": history.COUNT}, {":h_seen": count}


def not_executing(due: str, stuck: bool) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A condition on a task's record, with its names and values: no executor claimed its execution at ``due``
    (or it waits for a retry of it, RETRYING) -- or, for a task DEAD_LETTERED (``stuck``), the claim its dead-lettered
    due message left RUNNING -- so the API may still change the task."""
    values: dict[str, Any] = {":due": due, ":retrying": RETRYING}
    names: dict[str, str] = {}
    condition = ("attribute_not_exists(PK) OR attribute_not_exists(exec_due) OR exec_due <> :due"
                 " OR exec_state = :retrying")
    if stuck:
        values.update({":running": RUNNING, ":dead_lettered": Status.DEAD_LETTERED.value})
        names["#nx_status"] = "status"
        condition += " OR (exec_state = :running AND #nx_status = :dead_lettered)"
    return condition, names, values


def awaits_retry(record: Mapping[str, Any] | None, retry_id: str) -> bool:
    """True when the record is still as the redrive of ``retry_id`` left it: PENDING, RETRYING at the due time it
    retries, no attempt of it made (never claimed since: its due message may still be sent). Pure."""
    found = Execution.of(record)
    return ((record or {}).get("retry_id") == retry_id and found.status == Status.PENDING.value
            and found.state == RETRYING and found.due is not None and found.retry_due == found.due == found.run_at
            and found.retry_at_ms is not None and found.attempts == 0)


def due_ms(due: datetime) -> int:
    """A due time as whole epoch milliseconds (the precision of ``iso``), exactly: occurrences compare by it. Pure."""
    return (due.astimezone(UTC) - _EPOCH) // timedelta(milliseconds=1)


def lost_reason(found: Execution, due: str, stale: float, due_at_ms: int | None = None) -> str:
    """Why a claim of ``due`` (``due_at_ms``) was refused, from the record as it was. Pure."""
    if found.moved_from == due:
        return "rescheduled"
    if found.status == Status.CANCELLED.value and found.run_at == due:
        return "cancelled"
    if found.status == PAUSED:
        return "paused"
    if found.of_due(due) and found.state == RETRYING:
        return "retrying"
    if found.of_due(due) and found.state == RUNNING:
        return "running" if found.claimed_at >= stale else "released"
    if found.of_due(due) and found.state in SETTLED:
        return found.state.lower()
    if due_at_ms is not None and found.due_ms is not None and found.due_ms > due_at_ms:
        return "superseded"
    return "changed"
