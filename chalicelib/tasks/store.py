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

Every write of a task's record is here, one method per transition of ``chalicelib.tasks.lifecycle`` (the
method ``lifecycle.WRITERS`` names), each built from the transition's declaration (``record_write``: its guard,
the status and exec_state it sets); the API's return the item of its transaction rather than writing.  The
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
from chalicelib.expression import (
    Condition,
    Rendered,
    Update,
    any_of,
    attr,
    conditions,
    if_not_exists,
    list_append,
    param,
    render,
    value,
)
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import history, items, lifecycle
from chalicelib.tasks.lifecycle import RETRYING, State
from chalicelib.tasks.model import TASK_ID, InvalidTask, Task, TaskKey, iso
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
    for i, (name, given) in enumerate(attributes.items()):
        if given is items.ABSENT:
            continue
        names[f"#a{i}"] = name
        values[f":a{i}"] = given
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


SETTLED = (State.DONE.value, State.FAILED.value)
# exec_state of an execution waiting to be retried (``settle_retry``, ``redrive``): the record is PENDING at its due
# time, ``retry_due`` names that due time and ``retry_at_ms`` when a claim of it may start again.
RETRY_ATTRIBUTES = ("retry_due", "retry_at", "retry_at_ms", "retry_from")  # retry_id stays: a repeat is known


def record_write(name: str, task_id: str, payload: Update | None = None, params: Mapping[str, Any] | None = None,
                 also: Condition | None = None) -> Rendered:
    """The write of the transition ``name`` on a task's record, built from its declaration
    (``lifecycle.transition``: UndeclaredTransition for a name it lacks): the ``status`` its target sets, with the
    status index's ``status_key`` (``items.status_fields``: removed for a status the index does not carry), and its
    ``exec_state``, then ``payload`` (which never writes those: an overlap is refused); its guard, with ``also``
    (a condition of the write's own, such as its history's). Pure."""
    transition = lifecycle.transition(name)
    update = Update()
    status = transition.status()
    if status is not None:
        update = update.set_values(items.status_fields(task_id, status), items.ABSENT)
    if transition.exec_state is not None:
        update = update.set("exec_state", value(transition.exec_state))
    if payload is not None:
        update = update.then(payload)
    return render(update if update.paths() else None, conditions([transition.guard, also]), params)


def record_item(name: str, record: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> tuple[
        dict[str, Any], Rendered]:
    """(the whole record a put of the transition ``name`` writes, its condition): ``record`` with the status its
    target sets (``items.status_fields``), which ``record`` may hold already but not otherwise. Pure."""
    transition = lifecycle.transition(name)
    status = transition.status()
    item = dict(record)
    if status is not None:
        fields = items.status_fields(str(record["PK"])[len(items.RECORD_PREFIX):], status)
        if any(name in item and item[name] != v for name, v in fields.items()):
            raise ValueError(f"{transition.name} writes status {status}, not {item.get('status')}")
        item.update(fields)
    return item, render(condition=transition.guard, params=params)


def _without_status(changes: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``changes`` without the status fields the transition ``name`` writes itself (``record_write``), which they
    may hold, equal. Pure."""
    status = lifecycle.transition(name).status()
    kept = {k: v for k, v in changes.items() if k not in ("status", items.STATUS_KEY)}
    if "status" in changes and changes["status"] != status:
        raise ValueError(f"{name} writes status {status}, not {changes['status']}")
    return kept


def _put_op(table: str, item: Mapping[str, Any], rendered: Rendered) -> dict[str, Any]:
    """A TransactWriteItems Put of a record (its attributes not ``items.ABSENT``) on a built condition."""
    return {"Put": {"TableName": table, "Item": ddb.serialize(items.present(dict(item))), **rendered.arguments()}}


def _update_op(table: str, key: Mapping[str, str], rendered: Rendered) -> dict[str, Any]:
    """A TransactWriteItems Update of a record, built (``record_write``)."""
    return {"Update": {"TableName": table, "Key": ddb.serialize(key), **rendered.arguments()}}


def _assign(attributes: Mapping[str, Any], remove: Iterable[str] = ()) -> Update:
    """SET ``attributes`` (REMOVE those ``items.ABSENT``), and REMOVE each of ``remove`` not among them (set, it
    stays)."""
    return Update().set_values(attributes, items.ABSENT).remove(
        *dict.fromkeys(name for name in remove if name not in attributes))


def _if_absent(names: Mapping[str, Any]) -> Update:
    """SET each attribute to its value where the record has none yet."""
    update = Update()
    for name, v in names.items():
        update = update.set(name, if_not_exists(attr(name), value(v)))
    return update


@dataclass(frozen=True)
class Outcome:
    """What running a task's action came to: DONE with its result, or FAILED with the last error."""

    status: State  # DONE, FAILED, or PENDING: to be retried at ``retry_at``
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
    recorded: State = State.NONE  # the record's state (``lifecycle.state_of``)

    @classmethod
    def of(cls, record: Mapping[str, Any] | None) -> Execution:
        record = record or {}
        next_run = record.get("next_run_at")
        ran = record.get("callback")
        return replace(cls(_text(record.get("exec_due")), str(record.get("exec_state", "")), str(record.get("exec_owner", "")),
                   float(record.get("claimed_at", 0) or 0), str(next_run) if next_run else None,
                   record.get("dead_lettered") is True, record.get("alerted") is True,
                   _text(record.get("run_at")), _text(record.get("moved_from")),
                   int(record.get("attempts", 0) or 0), _text(record.get("last_error")),
                   int(record["exec_due_ms"]) if record.get("exec_due_ms") is not None else None,
                   int(record.get("exec_takeovers", 0) or 0), _text(record.get("retry_due")),
                   int(record["retry_at_ms"]) if record.get("retry_at_ms") is not None else None,
                   _text(record.get("retry_from"))),
                       occurrences=int(record.get("occurrences", 0) or 0),
                       result=record.get("last_result"),
                       callback_of=f"{ran.get('run_at')} {ran.get('owner')}" if isinstance(ran, dict) else "",
                       history=tuple(history.entries_of(record)), history_count=history.count_of(record),
                       recorded=lifecycle.state_of(record))

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

    def query_index(self, status: State, after: str | None, limit: int,
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

    def list_status(self, status: State, after: str | None, limit: int,
                    source: str | None = None) -> tuple[list[str], str | None]:
        """One page of a status, from the status index for a status it carries (``query_index``), else from the
        state table's own keys (``scan_status``)."""
        if status.value in items.INDEXED_STATUSES:
            return self.query_index(status, after, limit, source)
        return self.scan_status(status, after, limit, source)

    def scan_status(self, status: State, after: str | None, limit: int,
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
        item, rendered = record_item("create", record)
        return _put_op(self.state_table, item, rendered)

    def cancel(self, record: Mapping[str, Any], stuck: bool) -> dict[str, Any]:
        """``cancel``: the record as CANCELLED (``record``: all of it, its status CANCELLED), on the condition
        that no executor claimed its due time since it was read (``stuck``: or that claim is one a dead-lettered
        due message left RUNNING)."""
        item, rendered = record_item("cancel", record, {"due": str(record.get("run_at")), "stuck": stuck})
        return _put_op(self.state_table, item, rendered)

    def reschedule(self, key: TaskKey, changes: Mapping[str, Any], moved_from: str, stuck: bool) -> dict[str, Any]:
        """``reschedule``: the record's new due time and action (``changes``) and ``moved_from``, so that an
        executor that read the item before this write cannot claim the old time after it (docs/executor.md);
        the old time's dead-letter note goes. Same condition as ``cancel``."""
        payload = _assign({**_without_status(changes, "reschedule"), "moved_from": moved_from}, ["dead_letter"])
        return _update_op(self.state_table, items.record_key(key.task_id), record_write(
            "reschedule", key.task_id, payload, {"old_due": moved_from, "stuck": stuck}))

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
            "exec_due": due_text, "exec_due_ms": due_ms(due),
            "retry_due": due_text, "retry_at": iso(run_at), "retry_at_ms": due_ms(run_at), "retry_from": iso(run_at),
            "retry_id": retry_id, "retry_token": token, "attempts": 0, "exec_takeovers": 0, "redriven_at": iso(now),
            **(kept or {})}
        payload = _assign(attributes, [
            "dead_letter", "dead_lettered", "alerted", "finished_at", "exec_owner", "claimed_at", STATE_TTL_ATTRIBUTE])
        rendered = record_write("redrive", key.task_id, payload, {
            "due": due_text, "stale": now.timestamp() - lease_seconds, "retry_id": retry_id},
            _history_seen(int(kept[history.COUNT]) - 1) if kept else None)
        if self._record_update(key, rendered):
            return True
        found = self.get_record(key.task_id) or {}
        return found.get("retry_id") == retry_id and found.get("retry_token") == token

    def pause(self, key: TaskKey, record: Mapping[str, Any], due: str, now: datetime,
              kept: Mapping[str, Any] | None = None) -> bool:
        """``pause``: the record PAUSED (``record``: what a task without one gets -- ``items.record_of``), on the
        condition that it is PENDING (or has no record yet) and no executor claimed its due time ``due`` since it
        was read, so a pause and a claim never both win (``kept``: the history with the pause's entry). False when
        that condition failed. One UpdateItem."""
        sets = {"paused_at": iso(now), **(kept or {})}
        creates = {k: v for k, v in record.items()
                   if k not in ("PK", "SK", "status", items.STATUS_KEY, *sets) and v is not None}
        payload = Update().set_values(sets, items.ABSENT).then(_if_absent(creates))
        return self._record_update(key, record_write("pause", key.task_id, payload, {"due": due}))

    def resume(self, key: TaskKey, run_at: str, moved_from: str | None,
               kept: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``resume``: the record PENDING again at ``run_at`` (the next occurrence after now; ``moved_from``: the
        due time it had, when that one passed while paused), as an item of the API's transaction with the item's
        new due time; on the condition that it is still PAUSED (``kept``: the history with the resume's entry)."""
        changes: dict[str, Any] = {"run_at": run_at, **(kept or {})}
        if moved_from is not None:
            changes["moved_from"] = moved_from
        payload = _assign(changes, ["paused_at"])
        return _update_op(self.state_table, items.record_key(key.task_id), record_write("resume", key.task_id, payload))

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
        params = {"due": due_text, "due_ms": due_ms(due), "now_ms": due_ms(now), "owner": owner, "now": stamp}
        payload = (Update().set("exec_due", param("due")).set("exec_due_ms", param("due_ms"))
                   .set("exec_owner", param("owner")).set("claimed_at", param("now")).set("exec_takeovers", value(0))
                   .then(_if_absent({"id": key.task_id, "task_pk": key.pk, "task_sk": key.sk}))
                   .set("run_at", param("due")).set_values({**(shape or {}), **_listed(key)})
                   .remove("dead_lettered", "alerted", "next_run_at", items.CANCELLED_BY, STATE_TTL_ATTRIBUTE))
        request: dict[str, Any] = {
            "TableName": self.state_table, "Key": ddb.serialize(items.record_key(key.task_id)),
            "ReturnValues": "ALL_OLD", "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **record_write("claim", key.task_id, payload, params).arguments()}
        claim = self._claim_write(key, request, due, owner, stale)
        if claim.won or claim.lost != "released":
            return claim
        previous = claim.found.takeovers
        takeover = (Update().set("exec_owner", param("owner")).set("claimed_at", param("now"))
                    .set("exec_due_ms", param("due_ms")).set_values(_listed(key)).add("exec_takeovers", value(1)))
        request = {  # its worker died: take it over, once per lease, counted
            "TableName": self.state_table, "Key": ddb.serialize(items.record_key(key.task_id)),
            "ReturnValues": "ALL_OLD", "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **record_write("takeover", key.task_id, takeover,
                           {**params, "stale": stale, "previous": claim.found.owner}).arguments()}
        claim = self._claim_write(key, request, due, owner, stale)
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
                if not (found.of_due(due_text) and found.owner == owner and found.state == State.RUNNING):
                    raise
        if found.of_due(due_text) and found.owner == owner and found.state == State.RUNNING:
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
        name, sets, removed = self._outcome(due, outcome, now, next_due)
        sets.update(kept or {})
        if occurrences is not None:
            sets["occurrences"] = occurrences
            if next_due is None and outcome.retry_at is None:  # its last occurrence: none follows
                removed.append("next_run_at")
        rendered = record_write("settle_" + name, key.task_id, _assign(sets, removed),
                                {"due": due_text, "me": owner})
        found = self._update_or_found(key, rendered)
        return found is None or _written(found, due_text, owner, outcome)

    def settle_once(self, key: TaskKey, due: datetime, owner: str, outcome: Outcome, now: datetime,
                    lease_seconds: int, shape: Mapping[str, Any] | None = None,
                    entry: Mapping[str, Any] | None = None) -> Claim:
        """``settle_once_done``, ``_retry``, ``_failed``: the outcome of a one-time task's execution run without a
        claim (its action's target drops a repeat: ``executor.settles_once``), written as ``settle`` writes it,
        with what a claim would have written (``exec_due``, ``exec_due_ms``, ``run_at``, this worker's token, the
        task's ``shape``), on the claim's condition for a new execution (``lifecycle``: its guard): no execution of this
        due time nor of a later one on the record, the task not paused, not cancelled at this time by the API nor
        moved from it.  One conditional UpdateItem; won when the outcome is there (this write, or an earlier
        attempt of it whose response was lost), else lost with the reason (``lost_reason``: done or failed -- a
        duplicate delivery --, retrying, running, cancelled, rescheduled, paused, superseded) and the record as
        found.  ``entry``: the execution's history entry, appended to the record's history (``list_append``: the
        record is not read) while it holds fewer than ``history.KEEP`` entries; a full one is written whole
        (``history.appended``) by a second write, on the condition that no entry was added since."""
        due_text = iso(due)
        name, sets, removed = self._outcome(due, outcome, now, None)  # a one-time task's (executor.settles_once)
        sets.update({"exec_due": due_text, "exec_due_ms": due_ms(due), "exec_owner": owner, "run_at": due_text,
                     **(shape or {}), **_listed(key)})
        removed += ["dead_lettered", "alerted", "claimed_at", "exec_takeovers", "next_run_at", items.CANCELLED_BY,
                    STATE_TTL_ATTRIBUTE]
        name = "settle_once_" + name
        created = _if_absent({"id": key.task_id, "task_pk": key.pk, "task_sk": key.sk})
        outcome_update = _assign(sets, removed)
        params = {"due": due_text, "due_ms": due_ms(due)}
        if entry is None:
            found = self._update_or_found(key, record_write(name, key.task_id, created.then(outcome_update), params))
        else:
            hh = attr(history.HISTORY)
            appended = Update().set(hh, list_append(if_not_exists(hh, value([])), value([dict(entry)])))
            found = self._update_or_found(key, record_write(
                name, key.task_id, appended.then(created).then(outcome_update).add(history.COUNT, value(1)), params,
                also=any_of(hh.missing(), hh.size().lt(value(history.KEEP)))))
            if found is not None and not _written(found, due_text, owner, outcome) and len(found.history) >= history.KEEP:
                whole = found.with_entry(entry)  # a full history: written whole, if no entry was added since
                found = self._update_or_found(key, record_write(
                    name, key.task_id, Update().set_values(whole).then(created).then(outcome_update), params,
                    also=attr(history.COUNT).eq(value(found.history_count))))
        if found is None or _written(found, due_text, owner, outcome):
            return Claim(True, found=found or Execution())
        return Claim(False, lost_reason(found, due_text, now.timestamp() - lease_seconds, due_ms(due)), found)

    def _outcome(self, due: datetime, outcome: Outcome, now: datetime,
                 next_due: datetime | None) -> tuple[str, dict[str, Any], list[str]]:
        """(the settle it is -- ``done``, ``next``, ``retry``, ``failed`` --, attributes to set, to remove) of an
        execution's outcome on its record (its status and exec_state are the transition's): attempts, result or
        error; a retry's time (RETRYING); a recurring task's next due time; a finished one's expiry."""
        due_text, stamp = iso(due), iso(now)
        retry = outcome.retry_at is not None
        attributes: dict[str, Any] = {"attempts": outcome.attempts, "last_run_at": stamp}
        removed: list[str] = [] if retry else list(RETRY_ATTRIBUTES)
        for name, v in (("last_result", outcome.result), ("last_error", outcome.error)):
            if v is not None:
                attributes[name] = v
            else:
                removed.append(name)
        if outcome.retry_at is not None:  # settle_retry: PENDING at this due time, claimable again from retry_at
            attributes.update({"retry_due": due_text, "retry_at": iso(outcome.retry_at),
                               "retry_at_ms": due_ms(outcome.retry_at)})
            return "retry", attributes, removed
        if next_due is not None and outcome.status is State.DONE:
            attributes.update({"run_at": iso(next_due), "next_run_at": iso(next_due)})
            return "next", attributes, removed
        # finished: the claim's lease and takeovers are read no more, and the record is kept 30 days
        attributes.update({"finished_at": stamp, STATE_TTL_ATTRIBUTE: items.record_expiry(now, self._settings)})
        removed += ["claimed_at", "exec_takeovers"]
        return {State.DONE: "done", State.FAILED: "failed"}[outcome.status], attributes, removed

    def _record_update(self, key: TaskKey, rendered: Rendered) -> bool:
        """One built UpdateItem of the task's record (``record_write``): False when its condition failed."""
        return _applied(lambda: self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)), **rendered.arguments()))

    def _update_or_found(self, key: TaskKey, rendered: Rendered) -> Execution | None:
        """One built UpdateItem of the task's record: None when applied, else the record as it was."""
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
                ReturnValuesOnConditionCheckFailure="ALL_OLD", **rendered.arguments())
            return None
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return Execution.of(ddb.deserialize(cast(Any, exc.response).get("Item") or {}))

    def mark(self, key: TaskKey, flag: str) -> None:
        """``mark_dead_lettered``, ``mark_alerted``: note on the record that a step after a failure
        (``dead_lettered``, ``alerted``) is done."""
        self._record_update(key, record_write("mark_" + flag, key.task_id, Update().set(flag, value(True))))

    def mark_callback(self, key: TaskKey, due: str, owner: str, note: Mapping[str, Any]) -> bool:
        """``mark_callback``: note on the record that the callback of the execution at ``due`` settled by
        ``owner`` ran (``note``: which, its status, result or error), on the condition that the record still
        holds that execution (a later occurrence's claim, a redrive's, is not marked).  False when it no longer
        does, or the record has left the state the settle left (DONE, FAILED; PENDING at a recurring task's next
        time): cancelled, paused or dead-lettered since."""
        return self._record_update(key, record_write(
            "mark_callback", key.task_id, Update().set("callback", param("note")),
            {"note": {**note, "run_at": due, "owner": owner}, "due": due, "owner": owner}))

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
        payload = (Update().set("dead_letter", param("note"))
                   .then(_if_absent({"id": key.task_id, "task_pk": key.pk, "task_sk": key.sk, "run_at": iso(due)}))
                   .set_values({**_listed(key), **({} if attempts is None else {"attempts": attempts})}))
        self._record_update(key, record_write("note_dead_letter", key.task_id, payload, {"note": dict(note)}))

    def note_stream_dead_letter(self, key: TaskKey, note: Mapping[str, Any]) -> None:
        """``note_stream_dead_letter``: keep ``note`` (as ``lifecycle.STREAM_NOTE``) on the task's record, unless a note of a later
        stream record is there (``chalicelib.tasks.stream_dead_letters``); a task written by another program gets
        a record for it. A task with no record, PENDING (not running) or DEAD_LETTERED is DEAD_LETTERED, so the
        status index lists it so; any other keeps its state (``note_stream_dead_letter_kept``: a second write,
        only then). One conditional UpdateItem."""
        name = lifecycle.STREAM_NOTE
        created = {"id": key.task_id, "task_pk": key.pk, "task_sk": key.sk,
                   **({"run_at": note["run_at"]} if note.get("run_at") else {})}
        payload = Update().set(name, param("note")).then(_if_absent(created)).set_values(_listed(key))
        params = {"note": dict(note), "sequence": note["sequence"]}
        if self._record_update(key, record_write("note_stream_dead_letter", key.task_id, payload, params)):
            return
        # a record with a status has the status_key of it already; a new one is PENDING: none
        kept = payload.set("status", if_not_exists(attr("status"), value(State.PENDING.value)))
        self._record_update(key, record_write("note_stream_dead_letter_kept", key.task_id, kept, params))

    # --- the stream's transition: a task's item deleted by a user, or no longer a task -------------

    def cancel_by_item(self, task: Task, at: str, now: datetime) -> bool:
        """``cancel_by_item``: record ``task`` CANCELLED at ``at`` with what it was (due time, strategy, action)
        and ``cancelled_by: "item"`` (the stream saw its item deleted by a user, or a lazy item lose its TTL), so
        GET tells a cancelled task from one that never existed; the record expires as the finished ones do.
        Written when there is no record yet, it is PENDING (not RUNNING: a claim that runs settles it), or
        cancelled by an item before -- never over a finished task or the API's cancel. False when the record
        was not in one of those states. One conditional UpdateItem."""
        attributes: dict[str, Any] = {"finished_at": at, "id": task.id,
                                      "task_pk": task.key.pk, "task_sk": task.key.sk, "run_at": iso(task.due),
                                      "strategy": task.strategy.value, "action": task.action,
                                      items.CANCELLED_BY: items.BY_ITEM,
                                      STATE_TTL_ATTRIBUTE: items.record_expiry(now, self._settings)}
        attributes.update({k: v for k, v in (("recurrence", task.recurrence), ("timezone", task.timezone)) if v})
        attributes.update(_listed(task.key))
        # False: finished, cancelled by the API, or running (its own transition decides)
        return self._record_update(task.key, record_write("cancel_by_item", task.id, Update().set_values(attributes)))

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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _listed(key: TaskKey) -> dict[str, Any]:
    """What lists a task not made by the API in the status index (its ``listed``, ``items.listed_of``: fixed by
    its key, so writing it again changes nothing); nothing for an API task (its ``listed`` is written once, by
    ``create``)."""
    listed = items.listed_of(key)
    return {} if listed is None else {items.LISTED: listed}


def _history_seen(count: int) -> Condition:
    """The record's history has ``count`` entries written (as read)."""
    return attr(history.COUNT).missing() if count <= 0 else attr(history.COUNT).eq(value(count))


def awaits_retry(record: Mapping[str, Any] | None, retry_id: str) -> bool:
    """True when the record is still as the redrive of ``retry_id`` left it: PENDING, RETRYING at the due time it
    retries, no attempt of it made (never claimed since: its due message may still be sent). Pure."""
    found = Execution.of(record)
    return ((record or {}).get("retry_id") == retry_id and found.recorded is State.PENDING
            and found.state == RETRYING and found.due is not None and found.retry_due == found.due == found.run_at
            and found.retry_at_ms is not None and found.attempts == 0)


def due_ms(due: datetime) -> int:
    """A due time as whole epoch milliseconds (the precision of ``iso``), exactly: occurrences compare by it. Pure."""
    return (due.astimezone(UTC) - _EPOCH) // timedelta(milliseconds=1)


def lost_reason(found: Execution, due: str, stale: float, due_at_ms: int | None = None) -> str:
    """Why a claim of ``due`` (``due_at_ms``) was refused, from the record as it was. Pure."""
    if found.moved_from == due:
        return "rescheduled"
    if found.recorded is State.CANCELLED and found.run_at == due:
        return "cancelled"
    if found.recorded is State.PAUSED:
        return "paused"
    if found.of_due(due) and found.state == RETRYING:
        return "retrying"
    if found.of_due(due) and found.state == State.RUNNING:
        return "running" if found.claimed_at >= stale else "released"
    if found.of_due(due) and found.state in SETTLED:
        return found.state.lower()
    if due_at_ms is not None and found.due_ms is not None and found.due_ms > due_at_ms:
        return "superseded"
    return "changed"
