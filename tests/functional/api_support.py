"""Helpers of the API input tests: DynamoDB's key limits, which moto does not enforce, and table snapshots."""

from __future__ import annotations

import copy
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from tests.fixtures import ACCOUNT

MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024


class KeyLimits:
    """Makes moto's DynamoDB refuse a key over DynamoDB's limits (2048 bytes of UTF-8 for the partition key,
    1024 for the sort key) with a ValidationException, as DynamoDB does; each refusal is noted in ``refused``.

    A botocore hook on the bundle's client sees every key the app sends (items, start keys, batch and
    transaction keys)."""

    OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "BatchGetItem", "TransactWriteItems")

    def __init__(self, deps: Deps) -> None:
        self.refused: list[str] = []
        for operation in self.OPERATIONS:
            deps.clients.dynamodb.meta.events.register(f"provide-client-params.dynamodb.{operation}", self._check)

    def _check(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        for key in _keys(params):
            pk = key.get("PK", {}).get("S", "")
            sk = key.get("SK", {}).get("S", "")
            if len(pk.encode("utf-8", "surrogatepass")) > MAX_PARTITION_KEY_BYTES \
                    or len(sk.encode("utf-8", "surrogatepass")) > MAX_SORT_KEY_BYTES:
                self.refused.append(f"{model.name}: a key of {len(pk)} + {len(sk)} characters")
                raise ClientError({"Error": {"Code": "ValidationException",
                                             "Message": "One or more parameter values were invalid: "
                                                        "Aggregated size of all range keys has exceeded the size "
                                                        "limit of 1024 bytes"}}, model.name)


def _keys(params: dict[str, Any]) -> list[dict[str, Any]]:
    keys: list[dict[str, Any]] = []
    for name in ("Key", "Item", "ExclusiveStartKey"):
        if isinstance(params.get(name), dict):
            keys.append(params[name])
    for request in params.get("RequestItems", {}).values():
        keys.extend(request.get("Keys", []))
    for op in params.get("TransactItems", []):
        inner = next(iter(op.values()))
        keys.extend(k for k in (inner.get("Key"), inner.get("Item")) if isinstance(k, dict))
    return keys


def table_contents(deps: Deps) -> dict[str, list[dict[str, Any]]]:
    """Every item of the tasks and state tables, to compare before and after a request.

    Read from moto's backend (what a Scan of each would answer, as DynamoDB JSON): a fuzz test takes this
    snapshot around each of its hundreds of examples, and two Scans through botocore and moto took most of an
    example's time."""
    from moto.dynamodb.models import dynamodb_backends

    backend = dynamodb_backends[ACCOUNT][deps.settings.region]
    out: dict[str, list[dict[str, Any]]] = {}
    for table in (deps.settings.tasks_table, deps.settings.state_table):
        items = [copy.deepcopy(item.to_json()["Attributes"]) for item in backend.get_table(table).all_items()]
        out[table] = sorted(items, key=lambda item: (str(item.get("PK")), str(item.get("SK"))))
    return out
