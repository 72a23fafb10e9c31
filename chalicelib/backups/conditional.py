"""Conditional writes of the state table's items that recognise their own earlier attempt (RunStore, RestoreStore,
both a ``StateStore``).

Every such write is retried on transient errors (retry.py) and stamps the item with a fresh ``write_id``.
When its condition fails, the item is read again: if it holds this write's ``write_id``, the write was this
caller's own earlier attempt whose response was lost (or botocore's retry of it), and it counts as done;
otherwise another worker's write stands in the way.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.aws import Deps, Sleep
from chalicelib.backups.retry import retry_transient
from chalicelib.expression import Condition, Update, render, value
from chalicelib.throttle import error_code


def conditional_failed(exc: ClientError) -> bool:
    """The write's condition failed (a single write's, or one of a transaction's)."""
    if error_code(exc) == "ConditionalCheckFailedException":
        return True
    reasons = exc.response.get("CancellationReasons") or []
    return error_code(exc) == "TransactionCanceledException" and any(
        r.get("Code") == "ConditionalCheckFailed" for r in reasons)


class ConditionalItems:
    """The items of one table, read consistently and updated under a condition."""

    def __init__(self, dynamodb: Any, table: str, sleep: Sleep) -> None:
        self._ddb = dynamodb
        self._table = table
        self._sleep = sleep

    def read(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item (a consistent read), or None."""
        item = retry_transient(lambda: self._ddb.get_item(
            TableName=self._table, Key=key, ConsistentRead=True), self._sleep).get("Item")
        return ddb.deserialize(item) if item else None

    def holds(self, key: dict[str, Any], write_id: str) -> bool:
        """After a failed condition: the item holds this very write (its earlier attempt was applied)."""
        response = retry_transient(lambda: self._ddb.get_item(
            TableName=self._table, Key=key, ConsistentRead=True, ProjectionExpression="write_id"), self._sleep)
        return bool(response.get("Item", {}).get("write_id", {}).get("S") == write_id)

    def update(self, key: dict[str, Any], update: str, condition: str, names: dict[str, str] | None = None,
               values: dict[str, Any] | None = None, returning: bool = False) -> tuple[bool, dict[str, Any]]:
        """``update`` ("SET ..." with an optional " REMOVE ...") of the item if ``condition`` holds, or held
        for this very write; False when another worker's write stands in the way. With ``returning``, also
        the item as written (read again when the write that stands was this caller's earlier attempt)."""
        write_id = uuid.uuid4().hex
        sets, _, removes = update.partition(" REMOVE ")
        return self._send(key, write_id, f"{sets}, write_id = :write_id" + (f" REMOVE {removes}" if removes else ""),
                          condition, names or {}, {**(values or {}), ":write_id": write_id}, returning)

    def apply(self, key: dict[str, Any], update: Update, condition: Condition | None, params: Mapping[str, Any],
              returning: bool = False) -> tuple[bool, dict[str, Any]]:
        """``update`` if ``condition`` holds (built: chalicelib/expression.py, with ``params``) of the item, as
        ``update`` does it."""
        write_id = uuid.uuid4().hex
        rendered = render(update.set("write_id", value(write_id)), condition, params)
        return self._send(key, write_id, rendered.update or "", rendered.condition or "", rendered.names,
                          rendered.values, returning)

    def _send(self, key: dict[str, Any], write_id: str, expression: str, condition: str, names: dict[str, str],
              values: dict[str, Any], returning: bool) -> tuple[bool, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self._table, "Key": key, "UpdateExpression": expression,
            "ExpressionAttributeValues": {k: ddb.value(v) for k, v in values.items()},
        }
        if condition:
            kwargs["ConditionExpression"] = condition
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if returning:
            kwargs["ReturnValues"] = "ALL_NEW"
        try:
            response = retry_transient(lambda: self._ddb.update_item(**kwargs), self._sleep)
            return True, ddb.deserialize(response["Attributes"]) if returning else {}
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
        if not returning:
            return self.holds(key, write_id), {}
        item = self.read(key)
        return (True, item) if item is not None and item.get("write_id") == write_id else (False, {})


class StateStore:
    """What a store of the state table's items starts from: the client, the table, the sleep between retries,
    and its conditional writes (``_items``)."""

    def __init__(self, deps: Deps) -> None:
        self._ddb = deps.clients.dynamodb
        self._table = deps.settings.state_table
        self._sleep = deps.sleep
        self._items = ConditionalItems(self._ddb, self._table, self._sleep)
