"""Task items (tasks table) and task records, status index and claims (state table).

Writes that must agree go in one ``TransactWriteItems`` (both tables are in
the same account and region): creating a task writes its item, record and
index entry; cancelling deletes the item and moves the record and the index
entry; finishing updates item, record and index together.  A transaction whose
condition fails returns False: another request or delivery got there first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks import items
from chalicelib.tasks.model import Status, TaskKey, iso
from chalicelib.throttle import error_code

BATCH_GET_LIMIT = 100


def _expression_args(names: Mapping[str, str] | None, values: Mapping[str, Any] | None) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if names:
        args["ExpressionAttributeNames"] = dict(names)
    if values:
        args["ExpressionAttributeValues"] = {k: ddb.value(v) for k, v in values.items()}
    return args


def put(table: str, item: Mapping[str, Any], condition: str | None = None,
        names: Mapping[str, str] | None = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A TransactWriteItems Put."""
    op: dict[str, Any] = {"TableName": table, "Item": ddb.serialize(item), **_expression_args(names, values)}
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
    """An UpdateExpression that sets ``attributes`` and removes ``remove``, with its names and values."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    sets: list[str] = []
    for i, (name, value) in enumerate(attributes.items()):
        names[f"#a{i}"] = name
        values[f":a{i}"] = value
        sets.append(f"#a{i} = :a{i}")
    removes: list[str] = []
    for i, name in enumerate(n for n in remove if n not in attributes):
        names[f"#r{i}"] = name
        removes.append(f"#r{i}")
    expression = ("SET " + ", ".join(sets)) if sets else ""
    if removes:
        expression += (" " if expression else "") + "REMOVE " + ", ".join(removes)
    return expression, names, values


ACTED = "ACTED"  # claim state: the action ran, its outcome is on the claim but not yet recorded on the task


@dataclass(frozen=True)
class Outcome:
    """What running a task's action came to: DONE with its result, or FAILED with the last error."""

    status: Status
    attempts: int
    result: dict[str, Any] | None = None
    error: str | None = None

    def plain(self) -> dict[str, Any]:
        return {"status": self.status.value, "attempts": self.attempts, "result": self.result, "error": self.error}

    @classmethod
    def of(cls, plain: Mapping[str, Any]) -> Outcome:
        result, error = plain.get("result"), plain.get("error")
        return cls(Status(str(plain["status"])), int(plain.get("attempts", 0)),
                   result if isinstance(result, dict) else None, str(error) if error is not None else None)


@dataclass(frozen=True)
class Claim:
    """The outcome of claiming one execution: ``won``, or held by another worker, or already settled.

    A claim won from a worker that had already run the action (state ACTED) carries that ``outcome``,
    and whether its failure was already dead-lettered and alerted: only what is left is done."""

    won: bool
    state: str = ""            # the claim's state: RUNNING | ACTED | DONE | FAILED | SKIPPED
    claimed_at: float = 0.0
    owner: str = ""
    outcome: Outcome | None = None
    dead_lettered: bool = False
    alerted: bool = False


class TaskStore:
    def __init__(self, deps: Deps) -> None:
        self._ddb = deps.clients.dynamodb
        self.tasks_table = deps.settings.tasks_table
        self.state_table = deps.settings.state_table

    # --- reads ---------------------------------------------------------------

    def _get(self, table: str, key: Mapping[str, str]) -> dict[str, Any] | None:
        response = self._ddb.get_item(TableName=table, Key=ddb.serialize(key), ConsistentRead=True)
        item = response.get("Item")
        return ddb.deserialize(item) if item else None

    def get_item(self, key: TaskKey) -> dict[str, Any] | None:
        return self._get(self.tasks_table, {"PK": key.pk, "SK": key.sk})

    def get_record(self, task_id: str) -> dict[str, Any] | None:
        return self._get(self.state_table, items.record_key(task_id))

    def get_many(self, task_ids: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(items by task id, records by task id) of API tasks, in BatchGetItem calls of 100 keys."""
        wanted: list[tuple[str, dict[str, str]]] = []
        for task_id in task_ids:
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

    def query_index(self, status: Status, start_key: dict[str, str] | None,
                    limit: int) -> tuple[list[str], dict[str, str] | None]:
        """(task ids, key to continue from) of one page of the status index, oldest first."""
        kwargs: dict[str, Any] = {
            "TableName": self.state_table, "KeyConditionExpression": "PK = :pk",
            "ExpressionAttributeValues": {":pk": {"S": items.INDEX_PREFIX + status.value}}, "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = ddb.serialize(start_key)
        response = self._ddb.query(**kwargs)
        ids = [str(ddb.deserialize(row)["id"]) for row in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return ids, ({k: str(v) for k, v in ddb.deserialize(last).items()} if last else None)

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
        try:
            self._ddb.update_item(
                TableName=self.tasks_table, Key=ddb.serialize({"PK": key.pk, "SK": key.sk}),
                UpdateExpression=expression, ConditionExpression=condition,
                **_expression_args({**set_names, **names}, {**set_values, **values}))
            return True
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise

    # --- claims --------------------------------------------------------------

    def claim(self, task_id: str, due: datetime, now: datetime, lease_seconds: int, owner: str) -> Claim:
        """Claim the execution of ``task_id`` at ``due`` for ``owner`` (a token of this attempt): new, or taken
        over from a worker whose lease ran out (or who released it).  A claim taken over in state ACTED keeps it:
        its action is not run again.  A write that failed but was applied (its response lost, or botocore's retry
        of it failing its own condition) is recognised by the owner token on a consistent re-read."""
        key = items.claim_key(task_id, due)
        stamp = now.timestamp()
        try:
            response = self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(key),
                UpdateExpression=f"SET #s = if_not_exists(#s, :running), claimed_at = :now, #o = :owner, "
                                 f"{STATE_TTL_ATTRIBUTE} = :expires",
                ConditionExpression="attribute_not_exists(PK) OR (#s IN (:running, :acted) AND claimed_at < :stale)",
                ReturnValues="ALL_NEW",
                **_expression_args({"#s": "state", "#o": "owner"}, {
                    ":running": Status.RUNNING.value, ":acted": ACTED, ":now": stamp, ":stale": stamp - lease_seconds,
                    ":owner": owner, ":expires": int((now + items.CLAIM_RETENTION).timestamp())}))
            return _claim_of(True, ddb.deserialize(response.get("Attributes", {})))
        except ClientError as exc:
            current = self._reread(key, exc, lambda claim: claim.get("owner") == owner)
        if current.get("owner") == owner:
            return _claim_of(True, current)
        return _claim_of(False, current)  # (a hard error not explained by the claim was raised by _reread)

    def record_acted(self, task_id: str, due: datetime, owner: str, outcome: Outcome) -> bool:
        """Keep the action's outcome on the claim (state ACTED) before anything else is written, so a takeover
        only records it.  True when it is there (this write, or an earlier attempt of it whose response was lost);
        False when the claim is no longer this worker's (another took it over)."""
        key = items.claim_key(task_id, due)
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(key),
                UpdateExpression="SET #s = :acted, outcome = :outcome",
                ConditionExpression="#s = :running AND #o = :me",
                **_expression_args({"#s": "state", "#o": "owner"}, {
                    ":acted": ACTED, ":outcome": outcome.plain(), ":running": Status.RUNNING.value, ":me": owner}))
            return True
        except ClientError as exc:
            def applied(claim: Mapping[str, Any]) -> bool:
                return claim.get("owner") == owner and claim.get("state") != Status.RUNNING.value
            return applied(self._reread(key, exc, applied))

    def _reread(self, key: Mapping[str, str], failure: ClientError,
                applied: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any]:
        """After a claim write failed: the claim as it is now (a consistent read).  A condition that failed may
        be this worker's own write, applied by an attempt whose response was lost (botocore retried it); any
        other error may be a write applied whose response was lost.  ``applied`` tells this worker's write from
        the re-read; a hard error it does not explain is raised again."""
        current = self._get(self.state_table, key) or {}
        if error_code(failure) != "ConditionalCheckFailedException" and not applied(current):
            raise failure
        return current

    def mark_claim(self, task_id: str, due: datetime, flag: str) -> None:
        """Note on the claim that a step of finishing (``dead_lettered``, ``alerted``) is done."""
        self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.claim_key(task_id, due)),
            UpdateExpression="SET #f = :true", **_expression_args({"#f": flag}, {":true": True}))

    def release_claim(self, task_id: str, due: datetime, owner: str) -> None:
        """Let the next delivery take the claim over at once (this worker could not finish it)."""
        try:
            self._ddb.update_item(
                TableName=self.state_table, Key=ddb.serialize(items.claim_key(task_id, due)),
                UpdateExpression="SET claimed_at = :released", ConditionExpression="#o = :me",
                **_expression_args({"#o": "owner"}, {":released": 0, ":me": owner}))
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def get_claim(self, task_id: str, due: datetime) -> dict[str, Any] | None:
        return self._get(self.state_table, items.claim_key(task_id, due))

    def settle_claim(self, task_id: str, due: datetime, state: str, attempts: int) -> None:
        self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.claim_key(task_id, due)),
            UpdateExpression="SET #s = :state, attempts = :attempts",
            **_expression_args({"#s": "state"}, {":state": state, ":attempts": attempts}))

    def settle_op(self, task_id: str, due: datetime, owner: str, state: str, attempts: int) -> dict[str, Any]:
        """The TransactWriteItems Update that settles this worker's ACTED claim, in the outcome's transaction."""
        return update(self.state_table, items.claim_key(task_id, due), "SET #s = :state, attempts = :attempts",
                      "#s = :acted AND #o = :me", {"#s": "state", "#o": "owner"},
                      {":state": state, ":attempts": attempts, ":acted": ACTED, ":me": owner})

    # --- due messages SQS gave up on ------------------------------------------------

    def note_dead_letter(self, key: TaskKey, due: datetime, note: Mapping[str, Any]) -> None:
        """Keep on the task's record that its due message for ``due`` was dead-lettered (``note``); a task
        written by another program gets a record for it (the executor's next outcome replaces it)."""
        self._ddb.update_item(
            TableName=self.state_table, Key=ddb.serialize(items.record_key(key.task_id)),
            UpdateExpression="SET dead_letter = :note, id = if_not_exists(id, :id), "
                             "task_pk = if_not_exists(task_pk, :pk), task_sk = if_not_exists(task_sk, :sk), "
                             "run_at = if_not_exists(run_at, :due), #s = if_not_exists(#s, :pending)",
            **_expression_args({"#s": "status"}, {
                ":note": dict(note), ":id": key.task_id, ":pk": key.pk, ":sk": key.sk,
                ":due": iso(due), ":pending": Status.PENDING.value}))

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


def _claim_of(won: bool, claim: Mapping[str, Any]) -> Claim:
    outcome = claim.get("outcome")
    return Claim(won, str(claim.get("state", "")), float(claim.get("claimed_at", 0)), str(claim.get("owner", "")),
                 Outcome.of(outcome) if claim.get("state") == ACTED and isinstance(outcome, dict) else None,
                 claim.get("dead_lettered") is True, claim.get("alerted") is True)


def put_raw(table: str, image: Mapping[str, Any], condition: str | None = None) -> dict[str, Any]:
    """A TransactWriteItems Put of an item already in DynamoDB JSON (binary as bytes), kept exactly."""
    op: dict[str, Any] = {"TableName": table, "Item": dict(image)}
    if condition:
        op["ConditionExpression"] = condition
    return {"Put": op}
