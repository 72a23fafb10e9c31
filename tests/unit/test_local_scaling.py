"""The offline runtime keeps up with load: SQS pollers follow the backlog, TTL and Scheduler find what is
due without reading everything each tick.  No moto, no real time (threads wait on events only)."""

from __future__ import annotations

import threading
from typing import Any

from chalice.app import Chalice, SQSEventConfig

from local.invoker import Invoker, Reporter
from local.sources.sqs import QueuePoller
from tests.fixtures import FakeClock

WAIT_SECONDS = 30.0  # for events other threads cause (xdist on 2 cores: generous, returns when they happen)


def wait_for(condition: Any, timeout: float = WAIT_SECONDS) -> bool:
    pause = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return bool(condition())


# --- SQS: concurrent invocations follow the backlog ---------------------------------------

class BacklogSqs:
    """A thread-safe SQS queue of ``count`` messages; an empty receive is a (short) long poll that a stop ends."""

    def __init__(self, count: int, stop: threading.Event) -> None:
        self.messages = [{"MessageId": f"m{n}", "ReceiptHandle": f"h{n}", "Body": str(n),
                          "Attributes": {"ApproximateReceiveCount": "1"}} for n in range(count)]
        self.count = count
        self.stop = stop
        self.lock = threading.Lock()
        self.deleted: list[str] = []
        self.drained = threading.Event()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            size = kwargs["MaxNumberOfMessages"]
            taken, self.messages = self.messages[:size], self.messages[size:]
        if not taken:
            self.stop.wait(kwargs["WaitTimeSeconds"] / 20)
        return {"Messages": taken}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        with self.lock:
            self.deleted += [e["ReceiptHandle"] for e in Entries]
            if len(self.deleted) >= self.count:
                self.drained.set()
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}


def _backlog_poller(sqs: BacklogSqs, handler: Any, limit: int) -> QueuePoller:
    app = Chalice(app_name="tiny")
    app.on_sqs_message(queue="work", batch_size=10, name="work")(handler)
    config = app.event_sources[0]
    assert isinstance(config, SQSEventConfig)
    poller = QueuePoller(config, Invoker(app, Reporter(lambda line: None, FakeClock())), sqs,  # type: ignore[arg-type]
                         region="us-east-1", account="123456789012", max_concurrency=limit)
    poller._resolve = lambda stop: True  # type: ignore[method-assign]
    poller.queue_url = "http://sqs/work"
    return poller


def test_sqs_pollers_scale_with_the_backlog_up_to_the_limit_and_back_to_one() -> None:
    stop = threading.Event()
    sqs = BacklogSqs(60, stop)
    lock = threading.Lock()
    running, peak = [0], [0]
    crowd = threading.Event()   # set once ``limit`` batches run at once

    def work(event: Any) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] >= 4:
                crowd.set()
        crowd.wait(2.0)          # a batch is held until four run at once (a single poller never gets there)
        with lock:
            running[0] -= 1

    poller = _backlog_poller(sqs, work, limit=4)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert sqs.drained.wait(WAIT_SECONDS)
        assert crowd.is_set() and peak[0] == 4 and poller.peak_pollers == 4   # never more than the limit
        assert sorted(sqs.deleted) == sorted(f"h{n}" for n in range(60))    # each batch deleted once
        assert wait_for(lambda: poller.pollers == 1)                         # the queue is quiet: one poller
    finally:
        stop.set()
        thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    assert wait_for(lambda: poller.pollers == 0)                             # every poller ended on the stop


def test_a_quiet_queue_has_one_poller() -> None:
    stop = threading.Event()
    sqs = BacklogSqs(5, stop)
    poller = _backlog_poller(sqs, lambda event: None, limit=8)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert sqs.drained.wait(WAIT_SECONDS)
        assert poller.peak_pollers == 1          # a batch short of the batch size is no backlog
    finally:
        stop.set()
        thread.join(WAIT_SECONDS)


# --- TTL: what is due comes from the index, not from a scan each tick ------------------------

class TtlDynamo:
    """A DynamoDB client over one table with TTL on ``expires``; counts scans, deletes conditionally."""

    def __init__(self, items: dict[str, int]) -> None:
        self.items = dict(items)          # PK -> TTL epoch seconds
        self.scans = 0
        self.deleted: list[str] = []
        self.monotonic: list[float] | None = None

    def get_paginator(self, name: str) -> Any:
        assert name == "list_tables"
        return type("P", (), {"paginate": lambda _self: [{"TableNames": ["t"]}]})()

    def describe_time_to_live(self, TableName: str) -> dict[str, Any]:
        return {"TimeToLiveDescription": {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires"}}

    def describe_table(self, TableName: str) -> dict[str, Any]:
        return {"Table": {"KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}]}}

    def scan(self, **kwargs: Any) -> dict[str, Any]:
        self.scans += 1
        if self.monotonic is not None:
            self.monotonic[0] += 1.0   # a scan takes a second
        return {"Items": [{"PK": {"S": k}, "expires": {"N": str(v)}} for k, v in self.items.items()]}

    def delete_item(self, TableName: str, Key: dict[str, Any], ConditionExpression: str,
                    ExpressionAttributeNames: Any, ExpressionAttributeValues: dict[str, Any]) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        pk = Key["PK"]["S"]
        if str(self.items.get(pk)) != ExpressionAttributeValues[":seen"]["N"]:
            raise ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}}, "DeleteItem")
        del self.items[pk]
        return {}


class Feed:
    """A write feed as moto's (local.moto_corrections.watch_writes): listeners hear each write."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def __call__(self, listener: Any) -> Any:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def put(self, dynamo: TtlDynamo, pk: str, expires: int) -> None:
        dynamo.items[pk] = expires
        for listener in self.listeners:
            listener("t", {"PK": {"S": pk}}, lambda name: {"N": str(expires)} if name == "expires" else None)


def _sweeper(dynamo: TtlDynamo, clock: FakeClock, feed: Feed | None) -> Any:
    from local.sources.ttl import TtlLedger, TtlSweeper

    monotonic = [1000.0]
    sweeper = TtlSweeper(dynamo, TtlLedger(), Reporter(lambda line: None, clock), clock,  # type: ignore[arg-type]
                         lag_seconds=5, writes=feed, monotonic=lambda: monotonic[0])
    sweeper.monotonic_now = monotonic  # type: ignore[attr-defined]
    dynamo.monotonic = monotonic
    sweeper.listen()
    return sweeper


def test_the_ttl_sweeper_learns_items_from_writes_and_scans_a_table_once() -> None:
    clock = FakeClock()
    now = int(clock().timestamp())
    dynamo = TtlDynamo({f"old{n}": now + 3600 for n in range(1000)} | {"early": now - 10})
    feed = Feed()
    sweeper = _sweeper(dynamo, clock, feed)
    assert sweeper.sweep() == 1 and dynamo.deleted == [] and "early" not in dynamo.items   # the first scan
    feed.put(dynamo, "soon", now + 3)
    feed.put(dynamo, "moved", now + 2)
    feed.put(dynamo, "moved", now + 600)            # written again later: its first time no longer counts
    for _ in range(10):                             # ten ticks: nothing due until 3 s + the 5 s lag
        clock.advance(seconds=0.5)
        sweeper.monotonic_now[0] += 0.5
        assert sweeper.sweep() == 0
    clock.advance(seconds=3.5)
    sweeper.monotonic_now[0] += 3.5
    assert sweeper.sweep() == 1 and "soon" not in dynamo.items and "moved" in dynamo.items
    for _ in range(20):
        sweeper.monotonic_now[0] += 1
        sweeper.sweep()
    assert dynamo.scans == 1                        # 1,000 items, 32 ticks, one scan
    assert sweeper.index.due("t", now + 601) == [({"PK": {"S": "moved"}}, {"N": str(now + 600)})]


def test_without_a_write_feed_the_ttl_sweeper_scans_again_only_after_a_pause() -> None:
    clock = FakeClock()
    now = int(clock().timestamp())
    dynamo = TtlDynamo({"a": now + 100})
    sweeper = _sweeper(dynamo, clock, None)
    sweeper.sweep()                                 # a scan: a second
    dynamo.items["b"] = now - 10                    # written without a feed
    for _ in range(9):                              # 9 s: less than ten times the scan
        sweeper.monotonic_now[0] += 1
        sweeper.sweep()
    assert dynamo.scans == 1 and "b" in dynamo.items
    sweeper.monotonic_now[0] += 1
    sweeper.sweep()
    assert dynamo.scans == 2 and "b" not in dynamo.items and "a" in dynamo.items
