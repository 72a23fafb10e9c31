"""The offline runtime keeps up with load: SQS pollers follow the backlog, TTL and Scheduler find what is
due without reading everything each tick.  No moto, no real time (threads wait on events only)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any, ClassVar

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
        self.receives = 0
        self.drained = threading.Event()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.receives += 1
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


def test_an_empty_queue_has_one_poller() -> None:
    stop = threading.Event()
    sqs = BacklogSqs(0, stop)
    poller = _backlog_poller(sqs, lambda event: None, limit=8)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: sqs.receives >= 20)
        assert poller.peak_pollers == 1 and poller.pollers == 1
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
    """A write feed as moto's (local.moto_speed.watch_writes): listeners hear each write."""

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


# --- Scheduler: due schedules found without listing every schedule each tick ------------------

class ManySchedules:
    """An EventBridge Scheduler client over many one-time schedules; counts listings and reads."""

    def __init__(self, count: int, first: datetime) -> None:
        self.schedules = {f"s{n}": self._schedule(f"s{n}", first + timedelta(seconds=n * 60 / count))
                          for n in range(count)}
        self.listings = 0
        self.reads = 0
        self.monotonic: list[float] | None = None

    @staticmethod
    def _schedule(name: str, at: datetime) -> dict[str, Any]:
        return {"Name": name, "GroupName": "g", "Arn": f"arn:aws:scheduler:us-east-1:123456789012:schedule/g/{name}",
                "ScheduleExpression": f"at({at:%Y-%m-%dT%H:%M:%S})", "ScheduleExpressionTimezone": "UTC",
                "LastModificationDate": at - timedelta(minutes=5), "State": "ENABLED",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "Target": {"Arn": "arn:aws:sqs:us-east-1:123456789012:due", "Input": name}}

    def get_paginator(self, name: str) -> Any:
        outer = self

        class Pages:
            def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
                if name == "list_schedule_groups":
                    return [{"ScheduleGroups": [{"Name": "g"}]}]
                outer.listings += 1
                if outer.monotonic is not None:
                    outer.monotonic[0] += 1.0   # a listing of thousands takes a second
                summaries = [{k: s[k] for k in ("Name", "GroupName", "Arn", "LastModificationDate")}
                             for s in outer.schedules.values()]
                return [{"Schedules": summaries[i:i + 100]} for i in range(0, len(summaries), 100)]
        return Pages()

    def get_schedule(self, Name: str, GroupName: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        self.reads += 1
        if Name not in self.schedules:
            raise ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "gone"}}, "GetSchedule")
        return dict(self.schedules[Name])


class Submitted:
    def __init__(self) -> None:
        self.deliveries: list[Any] = []

    def submit(self, fn: Any, delivery: Any) -> None:
        self.deliveries.append(delivery)


def _scheduler_poller(client: ManySchedules, clock: FakeClock, feed: Any) -> Any:
    from local.sources.scheduler import SchedulerPoller

    monotonic = [0.0]
    client.monotonic = monotonic
    poller = SchedulerPoller(client, None, None, Invoker(Chalice(app_name="tiny"), Reporter(lambda line: None, clock)),  # type: ignore[arg-type]
                             Submitted(), clock,  # type: ignore[arg-type]
                             jitter_seconds=0, changes=feed, monotonic=lambda: monotonic[0])
    poller.monotonic_now = monotonic  # type: ignore[attr-defined]
    poller.listen()
    return poller


def _tick(poller: Any, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds=seconds)
    poller.monotonic_now[0] += seconds
    poller.update()
    poller.dispatch()


class ScheduleFeed:
    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def __call__(self, listener: Any) -> Any:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def changed(self, name: str) -> None:
        for listener in self.listeners:
            listener("g", name)


def test_with_a_change_feed_2000_schedules_are_listed_once_and_each_fires_once_on_time() -> None:
    clock = FakeClock()
    client = ManySchedules(2000, clock() + timedelta(seconds=1))
    feed = ScheduleFeed()
    poller = _scheduler_poller(client, clock, feed)
    executor = poller.executor
    poller.update()
    assert client.listings == 1 and client.reads == 2000
    client.schedules["late"] = client._schedule("late", clock() + timedelta(seconds=30))   # created later
    feed.changed("late")
    del client.schedules["s1999"]                                                           # deleted before its time
    feed.changed("s1999")
    fired: dict[str, list[datetime]] = {}
    for _ in range(65 * 5):                                                                 # 65 s, 5 ticks a second
        _tick(poller, clock, 0.2)
        for delivery in executor.deliveries:
            fired.setdefault(delivery.schedule["Name"], []).append(delivery.when)
        executor.deliveries.clear()
    assert client.listings == 1 and client.reads == 2000 + 2                               # no listing per tick
    assert set(fired) == {f"s{n}" for n in range(1999)} | {"late"}                          # each once, none gone
    for name, times in fired.items():
        due = datetime.strptime(client.schedules[name]["ScheduleExpression"][3:-1], "%Y-%m-%dT%H:%M:%S")
        assert len(times) == 1 and due.replace(tzinfo=times[0].tzinfo) <= times[0] <= due.replace(
            tzinfo=times[0].tzinfo) + timedelta(seconds=0.2), name                          # never early, a tick late at most


def test_without_a_change_feed_schedules_are_listed_again_after_ten_listings_time() -> None:
    clock = FakeClock()
    client = ManySchedules(10, clock() + timedelta(minutes=5))
    poller = _scheduler_poller(client, clock, None)
    poller.update()                                  # a listing: a second (the fake's)
    for _ in range(9):
        _tick(poller, clock, 1.0)
    assert client.listings == 1
    _tick(poller, clock, 1.0)
    assert client.listings == 2


def test_the_sqs_concurrency_limit_is_a_local_setting_that_reaches_every_sqs_source() -> None:
    import pytest

    from local.runtime import Runtime, RuntimeOptions
    from local.stage import LocalSettings, LocalSettingsError

    assert LocalSettings.from_env({}).sqs_max_concurrency == 8
    assert LocalSettings.from_env({"LOCAL_SQS_MAX_CONCURRENCY": "12"}).sqs_max_concurrency == 12
    for bad in ("0", "101", "many"):
        with pytest.raises(LocalSettingsError, match="LOCAL_SQS_MAX_CONCURRENCY"):
            LocalSettings.from_env({"LOCAL_SQS_MAX_CONCURRENCY": bad})
    app = Chalice(app_name="tiny")
    app.on_sqs_message(queue="a", name="a")(lambda event: None)
    app.on_sqs_message(queue="b", name="b")(lambda event: None)
    runtime = Runtime(app, "http://127.0.0.1:1", RuntimeOptions(sqs_max_concurrency=3), out=lambda line: None)
    pollers = [s for s in runtime.sources if isinstance(s, QueuePoller)]
    assert [p.max_concurrency for p in pollers] == [3, 3]
    assert "up to 3 at once" in runtime.banner()


def test_a_schedule_deleted_after_its_last_invocation_is_not_read_again() -> None:
    clock = FakeClock()
    client = ManySchedules(3, clock() + timedelta(seconds=1))
    feed = ScheduleFeed()

    class Sqs:
        sent: ClassVar[list[str]] = []

        def get_queue_url(self, **kwargs: Any) -> dict[str, Any]:
            return {"QueueUrl": "http://sqs/due"}

        def send_message(self, QueueUrl: str, MessageBody: str) -> dict[str, Any]:
            self.sent.append(MessageBody)
            return {"MessageId": MessageBody}

    def delete_schedule(Name: str, GroupName: str) -> None:
        del client.schedules[Name]
        feed.changed(Name)                     # moto announces it during the call

    client.delete_schedule = delete_schedule  # type: ignore[attr-defined]
    for schedule in client.schedules.values():
        schedule["ActionAfterCompletion"] = "DELETE"
    poller = _scheduler_poller(client, clock, feed)
    poller.sqs = Sqs()
    poller.executor = type("Run", (), {"submit": lambda self, fn, *args: fn(*args)})()
    poller.update()
    assert client.reads == 3
    for _ in range(65):
        _tick(poller, clock, 1.0)
    assert sorted(Sqs.sent) == ["s0", "s1", "s2"] and client.schedules == {}
    assert client.reads == 3 and poller.plans == {}      # gone without a GetSchedule each
