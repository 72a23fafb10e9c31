"""The cost bench's DynamoDB meter (bench/capacity.py) counts what AWS bills: checked against units worked out
another way over a real run of the task path, and its rules one by one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from bench import capacity, task_cost
from bench.capacity import Index, Table, index_write_units, write_units
from tests.aws_limits import item_size

# --- the run: every unit the meter counted, against units worked out from whole-table snapshots ------------------


class TableDiff:
    """Write and read units of the calls a DynamoDB client makes, worked out from snapshots of the tables the call
    names, each taken whole (a Scan) before and after a write: the table's items, and each index's entries as moto
    itself keeps them (a Scan of the index, its key and projection as DescribeTable says); a read's, from the items
    it names before it (GetItem, BatchGetItem) or those it answered (Query, Scan).  An index pays for the
    entries that appeared (a put), disappeared (a delete) or changed (an update: a moved key shows as a delete
    and a put).  The client's calls are made one at a time, so that a snapshot's changes are the call's own."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.write_units = 0.0
        self.index_write_units = 0.0
        self.read_units = 0.0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._described: dict[str, dict[str, Any]] = {}

    def attach(self, client: Any) -> None:
        client.meta.events.register("provide-client-params.dynamodb.*", self._params)
        client.meta.events.register("before-call.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)
        client.meta.events.register("after-call-error.dynamodb.*", lambda **_: self._lock.release())

    def _scan(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        while True:
            page = self.reader.scan(**kwargs)
            yield from page["Items"]
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _describe(self, table: str) -> dict[str, Any]:
        """DescribeTable's answer, asked once a table (the run changes no table's keys or indexes)."""
        if table not in self._described:
            self._described[table] = self.reader.describe_table(TableName=table)["Table"]
        return self._described[table]

    def _snapshot(self, table: str, indexes: bool = True) -> dict[str, dict[Any, dict[str, Any]]]:
        """The table's items by key, and (``indexes``) each index's entries by their item's key:
        ``{"": items, index: entries}``."""
        described = self._describe(table)
        keys = [k["AttributeName"] for k in described["KeySchema"]]

        def by_key(items: Iterator[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
            return {tuple(sorted((k, str(item[k])) for k in keys)): item for item in items}

        snapshot = {"": by_key(self._scan(TableName=table))}
        if not indexes:
            return snapshot
        for index in described.get("GlobalSecondaryIndexes", []) + described.get("LocalSecondaryIndexes", []):
            snapshot[index["IndexName"]] = by_key(self._scan(TableName=table, IndexName=index["IndexName"]))
        return snapshot

    @staticmethod
    def _tables(params: dict[str, Any]) -> set[str]:
        if "TransactItems" in params:
            return {op["TableName"] for entry in params["TransactItems"] for op in entry.values()}
        if "RequestItems" in params:
            return set(params["RequestItems"])
        return {params["TableName"]}

    def _params(self, params: dict[str, Any], **_: Any) -> None:
        self._local.params = params

    def _before(self, model: Any, **_: Any) -> None:
        """The snapshots the call's units are worked out from: a write's, whole (its indexes too), before and after
        it; a GetItem's or BatchGetItem's, of the tables' items before it; none for a Query or Scan (its answer's
        items are what it read)."""
        self._lock.acquire()
        tables = self._tables(self._local.params)
        if model.name in capacity.WRITES:
            self._local.before = {t: self._snapshot(t) for t in tables}
        elif model.name in ("GetItem", "BatchGetItem"):
            self._local.before = {t: self._snapshot(t, indexes=False) for t in tables}
        else:
            self._local.before = {}

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        try:
            params, before = self._local.params, self._local.before
            if model.name in capacity.WRITES:
                after = {t: self._snapshot(t) for t in before}
                self._writes(model.name, params, before, after, str(parsed.get("Error", {}).get("Code", "")))
            elif http_response.status_code < 300:
                self._reads(model.name, params, parsed, before)
        finally:
            self._lock.release()

    def _writes(self, name: str, params: dict[str, Any], before: Any, after: Any, error: str) -> None:
        if error and error not in ("ConditionalCheckFailedException", "TransactionCanceledException"):
            return
        named: list[tuple[str, dict[str, Any], int]] = []  # (table, key or item, times a unit counts)
        if name == "TransactWriteItems":
            named = [(op["TableName"], op.get("Key") or op["Item"], 2)
                     for entry in params["TransactItems"] for op in entry.values()]
        elif name == "BatchWriteItem":
            named = [(t, (r.get("PutRequest") or r["DeleteRequest"]).get("Key") or r["PutRequest"]["Item"], 1)
                     for t, requests in params["RequestItems"].items() for r in requests]
        else:
            named = [(params["TableName"], params.get("Key") or params["Item"], 1)]
        for table, named_item, times in named:
            keys = [k["AttributeName"] for k in self._describe(table)["KeySchema"]]
            key = tuple(sorted((k, str(named_item[k])) for k in keys))
            old, new = before[table][""].get(key), after[table][""].get(key)
            largest = max(item_size(old or {}), item_size(new or {}))
            self.write_units += times * max(1, -(-largest // 1024))
        if error:
            return  # nothing changed: no index entry moved
        for table in before:
            for index in before[table]:
                if not index:
                    continue
                old_entries, new_entries = before[table][index], after[table][index]
                for key in old_entries.keys() | new_entries.keys():
                    old, new = old_entries.get(key), new_entries.get(key)
                    self.index_write_units += self._entry_units(old, new, index, table)

    def _entry_units(self, old: dict[str, Any] | None, new: dict[str, Any] | None, index: str, table: str) -> int:
        if old == new:
            return 0
        kb = [max(1, -(-item_size(e) // 1024)) for e in (old, new) if e is not None]
        if len(kb) == 1:
            return kb[0]
        described = self._describe(table)
        schema = next(i["KeySchema"] for i in described.get("GlobalSecondaryIndexes", [])
                      + described.get("LocalSecondaryIndexes", []) if i["IndexName"] == index)
        assert old is not None and new is not None
        if any(old[k["AttributeName"]] != new[k["AttributeName"]] for k in schema):
            return kb[0] + kb[1]
        return max(kb)

    def _reads(self, name: str, params: dict[str, Any], parsed: dict[str, Any], before: Any) -> None:
        def size(table: str, key: dict[str, Any]) -> int:
            keys = [k["AttributeName"] for k in self._describe(table)["KeySchema"]]
            return item_size(before[table][""].get(tuple(sorted((k, str(key[k])) for k in keys))) or {})

        share = {True: 1.0, False: 0.5}
        if name == "GetItem":
            self.read_units += share[bool(params.get("ConsistentRead"))] * max(
                1, -(-size(params["TableName"], params["Key"]) // 4096))
        elif name == "BatchGetItem":
            for table, request in params["RequestItems"].items():
                assert not parsed.get("UnprocessedKeys"), "the run's batches are small: moto answers them whole"
                for key in request["Keys"]:
                    self.read_units += share[bool(request.get("ConsistentRead"))] * max(
                        1, -(-size(table, key) // 4096))
        elif name in ("Query", "Scan"):
            assert "FilterExpression" not in params and "ProjectionExpression" not in params, params
            total = sum(item_size(i) for i in parsed.get("Items", []))
            self.read_units += share[bool(params.get("ConsistentRead"))] * max(1, -(-total // 4096))
        else:
            raise AssertionError(f"the run made a {name}: price it here too")

    @property
    def total_write_units(self) -> float:
        return self.write_units + self.index_write_units


#: A few tasks of each path: one message at a time, full batches of 10 (BatchGetItem), Scheduler, the sweeper,
#: interval, lazy.
RUN = ("exact via SQS delay", "exact via Scheduler", task_cost.SWEPT, task_cost.DENSE, "interval", "lazy")


def cheap(workload: task_cost.Workload) -> task_cost.Workload:
    """The sweeper's row over fewer minutes and shards: the units a write or a query bills do not depend on them."""
    if workload.name != task_cost.SWEPT:
        return workload
    return replace(workload, spread=timedelta(minutes=1), settings=(*workload.settings, ("sweep_shards", 2)))


@pytest.fixture(scope="module")
def run() -> list[tuple[task_cost.Measured, TableDiff]]:
    diffs: dict[str, TableDiff] = {}

    def observe(workload: task_cost.Workload, clients: Any, stage: Any) -> None:
        diff = TableDiff(stage.setup.session.client("dynamodb", region_name=stage.settings.region))
        diff.attach(clients.dynamodb)
        diffs[workload.name] = diff

    measured = task_cost.measure([cheap(w) for w in task_cost.WORKLOADS if w.name in RUN], 3, observe)
    assert {m.workload.name for m in measured} == set(diffs) == set(RUN)
    return [(m, diffs[m.workload.name]) for m in measured]


def test_the_meter_counts_the_write_and_read_units_that_whole_table_snapshots_show_every_index_included(
        run: list[tuple[task_cost.Measured, TableDiff]]) -> None:
    for measured, diff in run:
        name, invocations = measured.workload.name, measured.invocations
        assert measured.executed and all(c == 1 for c in measured.executed.values()), name
        assert sum(invocations.write_units.values()) == pytest.approx(diff.total_write_units), name
        assert sum(invocations.read_units.values()) == pytest.approx(diff.read_units), name
    # the indexes are priced: the tasks' records enter the state table's indexes (or the tasks table's)
    assert sum(diff.index_write_units for _, diff in run) > 0


def test_the_storage_counts_each_records_index_entries(run: list[tuple[task_cost.Measured, TableDiff]]) -> None:
    for measured, _ in run:
        assert measured.stored_bytes >= measured.record_bytes + capacity.ENTRY_OVERHEAD_BYTES, measured.workload.name


def test_each_invocation_logs_lambdas_start_end_and_report_lines(
        run: list[tuple[task_cost.Measured, TableDiff]]) -> None:
    for measured, _ in run:
        invocations = sum(measured.invocations.count[f] for f in measured.invocations.count
                          if f in measured.workload.functions)
        # START and END about 100 bytes, REPORT about 160 without its Init Duration
        assert measured.platform_log_bytes >= 250 * invocations, measured.workload.name
        usage = measured.measured_usage()  # as measured (the sweeper's row shares its fixed minute otherwise)
        assert usage.log_bytes * measured.tasks == pytest.approx(measured.app_log_bytes + measured.platform_log_bytes)


# --- the rules, one by one -------------------------------------------------------------------------------------

S = {"PK": {"S": "TASK#1"}, "SK": {"S": "RECORD"}}
STATUS = Index("status-index", ("status", "listed"), "KEYS_ONLY")
TABLE = Table("state", ("PK", "SK"), (STATUS,))


def _item(**attributes: str) -> dict[str, Any]:
    return {**S, **{k: {"S": v} for k, v in attributes.items()}}


@pytest.mark.parametrize(("before", "after", "units"), [
    (None, _item(status="PENDING", listed="a"), 1),                        # enters the index: a put
    (_item(status="PENDING", listed="a"), None, 1),                        # leaves it: a delete
    (_item(status="PENDING", listed="a"), _item(status="DONE", listed="a"), 2),  # its key changes: delete + put
    (_item(status="PENDING", listed="a", x="1"), _item(status="PENDING", listed="a", x="2"), 0),  # not projected
    (_item(x="1"), _item(x="2"), 0),                                       # sparse: never in it
    (_item(x="1"), _item(x="2", status="DONE"), 0),                        # half its key: still not in it
    (_item(status="DONE", listed="a"), _item(status="DONE"), 1),           # leaves a sparse index
])
def test_an_index_pays_for_the_entry_a_write_puts_moves_or_removes(
        before: dict[str, Any] | None, after: dict[str, Any] | None, units: int) -> None:
    assert index_write_units(STATUS, TABLE.keys, before, after) == units


def test_an_index_projecting_an_attribute_pays_for_its_change_and_a_large_entry_per_kilobyte() -> None:
    include = Index("i", ("status",), "INCLUDE", ("note",))
    assert index_write_units(include, TABLE.keys, _item(status="A", note="1"), _item(status="A", note="2")) == 1
    assert index_write_units(include, TABLE.keys, _item(status="A", x="1"), _item(status="A", x="2")) == 0
    every = Index("all", ("status",), "ALL")
    assert index_write_units(every, TABLE.keys, None, _item(status="A", x="y" * 3000)) == 3


def test_a_write_costs_the_larger_image_per_kilobyte_twice_in_a_transaction_and_a_failed_condition_no_index() -> None:
    small, large = _item(status="PENDING", listed="a"), _item(status="DONE", listed="a", body="b" * 1500)
    assert write_units(TABLE, small, large) == (2, 2)
    assert write_units(TABLE, large, small, transactional=True) == (4, 2)
    assert write_units(TABLE, None, small, failed=True) == (1, 0)


def test_a_table_read_from_describe_table_keeps_every_index_with_its_projection() -> None:
    described = {"TableName": "t", "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}],
                 "GlobalSecondaryIndexes": [{"IndexName": "g", "KeySchema": [{"AttributeName": "a", "KeyType": "HASH"}],
                                             "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["n"]}}],
                 "LocalSecondaryIndexes": [{"IndexName": "l", "KeySchema": [
                     {"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "b", "KeyType": "RANGE"}],
                     "Projection": {"ProjectionType": "KEYS_ONLY"}}]}
    table = Table.described(described)
    assert table.keys == ("PK",)
    assert table.indexes == (Index("g", ("a",), "INCLUDE", ("n",)), Index("l", ("PK", "b"), "KEYS_ONLY"))
    item = {"PK": {"S": "1"}, "a": {"S": "x"}, "n": {"S": "y"}, "z": {"S": "w"}}
    assert table.indexes[0].entry(item, table.keys) == {"PK": {"S": "1"}, "a": {"S": "x"}, "n": {"S": "y"}}
    assert table.indexes[1].entry(item, table.keys) is None
    assert capacity.stored_bytes(table, item) == item_size(item) + 100 + item_size({"PK": {"S": "1"}, "a": {"S": "x"},
                                                                                       "n": {"S": "y"}}) + 100


def test_a_strongly_consistent_read_costs_a_full_unit_per_4_kb_an_eventually_consistent_half() -> None:
    assert capacity.read_units(100, True) == 1.0 and capacity.read_units(100, False) == 0.5
    assert capacity.read_units(4097, True) == 2.0


def test_a_querys_evaluated_items_are_asked_again_without_what_only_narrows_the_answer() -> None:
    params = {"TableName": "t", "KeyConditionExpression": "#p = :p", "FilterExpression": "#s = :s",
              "ProjectionExpression": "#p", "ExpressionAttributeNames": {"#p": "PK", "#s": "status"},
              "ExpressionAttributeValues": {":p": {"S": "1"}, ":s": {"S": "DONE"}}, "Limit": 5}
    assert capacity.unfiltered(params) == {"TableName": "t", "KeyConditionExpression": "#p = :p", "Limit": 5,
                                           "ExpressionAttributeNames": {"#p": "PK"},
                                           "ExpressionAttributeValues": {":p": {"S": "1"}}}


def test_lambdas_own_lines_have_the_documented_format_and_a_cold_starts_init_duration() -> None:
    warm, cold = task_cost.platform_log_lines(0.0612, 128, False), task_cost.platform_log_lines(0.0612, 128, True)
    start, end, report = warm.splitlines()
    assert start.startswith("START RequestId: ") and start.endswith(" Version: $LATEST")
    assert end.startswith("END RequestId: ")
    assert "\tDuration: 61.20 ms\tBilled Duration: 62 ms\tMemory Size: 128 MB\tMax Memory Used: " in report
    assert "Init Duration: " in cold and "Init Duration" not in warm
    assert 250 <= len(warm.encode()) < len(cold.encode()) <= 320
