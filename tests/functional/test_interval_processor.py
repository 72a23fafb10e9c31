"""The interval processor under moto: due buckets in the GSI in, due messages out, once each."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from unittest.mock import Mock

import pytest
from chalice.test import Client

from chalicelib.aws import Clients, Deps
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE
from chalicelib.tasks import interval
from chalicelib.tasks.buckets import due_bucket
from chalicelib.tasks.model import DueMessage, TaskKey
from deploy.provision import Provisioned, ensure_table, tasks_indexes
from tests import events
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import Table, stream


@pytest.fixture
def table(deps: Deps) -> Table:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP", bucket_shards=4)
    return Table(deps)


def filed(deps: Deps, key: TaskKey, due: datetime, **extra: Any) -> dict[str, Any]:
    """A seed-shaped interval item filed in its bucket, as the task API writes it."""
    settings = deps.settings
    return {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com",
            "strategy": "interval", DUE_EPOCH_ATTRIBUTE: int(due.timestamp()),
            settings.bucket_attribute: due_bucket(due, settings.bucket_minutes, settings.bucket_shards, key), **extra}


def tick(client: Client, clock: FakeClock) -> None:
    client.lambda_.invoke("interval_processor", events.scheduled_event(clock.now))


def sent(aws: Aws, deps: Deps, clock: FakeClock) -> list[DueMessage]:
    """The due messages sent since the last look; none of them may be early or delayed."""
    messages = []
    for body, delay in aws.sent(deps.settings.due_queue):
        message = DueMessage.from_json(body)
        assert delay == 0 and message.due <= clock.now, f"sent early: {message} at {clock.now}"
        messages.append(message)
    return messages


def test_three_missed_ticks_then_one_run_sends_every_due_task_once_and_none_early(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    tick(client, clock)  # 12:00:00, the first run: nothing due in the last hour
    assert sent(aws, deps, clock) == []
    start = clock.now
    dues = {TaskKey(f"USER#{i}", "REMINDER#x"): start + timedelta(seconds=30 + 20 * i) for i in range(12)}
    for key, due in dues.items():  # 12:00:30 .. 12:04:10, over every shard
        table.put(filed(deps, key, due))
    # Two items written by another program without a bucket: the stream step files them first.
    unfiled = {TaskKey("USER#x", "REMINDER#1"): start + timedelta(minutes=2, seconds=5),
               TaskKey("USER#y", "REMINDER#2"): start + timedelta(minutes=6)}
    records = [table.put({"PK": k.pk, "SK": k.sk, "REMINDER_TIMESTAMP": int(d.timestamp()),
                          "email": "y@example.com", "strategy": "interval"}) for k, d in unfiled.items()]
    assert stream(client, *records) == []
    dues.update(unfiled)

    clock.advance(minutes=4)  # the ticks at 12:01, 12:02 and 12:03 never ran
    tick(client, clock)
    first = sent(aws, deps, clock)
    expected = {k for k, d in dues.items() if d <= clock.now}
    assert sorted(m.key for m in first) == sorted(expected)
    assert all(m.due == dues[m.key] for m in first)

    clock.advance(minutes=1)  # 12:05: the rest of the 12:04 bucket
    tick(client, clock)
    second = sent(aws, deps, clock)
    assert sorted(m.key for m in second) == sorted(k for k, d in dues.items() if start + timedelta(minutes=4) < d <= clock.now)

    clock.advance(minutes=1)
    tick(client, clock)
    third = sent(aws, deps, clock)
    assert [m.key for m in third] == [TaskKey("USER#y", "REMINDER#2")]
    assert (len(first), len(second), len(third)) == (12, 1, 1)
    assert len(first) + len(second) + len(third) == len(dues)


def test_a_run_twice_in_the_same_second_sends_nothing_twice(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    table.put(filed(deps, TaskKey("USER#1", "R"), clock.now - timedelta(minutes=5)))
    tick(client, clock)
    tick(client, clock)
    assert [m.key for m in sent(aws, deps, clock)] == [TaskKey("USER#1", "R")]


def test_the_first_run_looks_back_one_hour(aws: Aws, deps: Deps, clock: FakeClock, client: Client,
                                            table: Table) -> None:
    table.put(filed(deps, TaskKey("USER#old", "R"), clock.now - timedelta(hours=2)))
    table.put(filed(deps, TaskKey("USER#recent", "R"), clock.now - timedelta(minutes=59)))
    tick(client, clock)
    assert [m.key for m in sent(aws, deps, clock)] == [TaskKey("USER#recent", "R")]


def test_more_than_ten_tasks_in_a_bucket_are_sent_in_batches(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    tick(client, clock)
    for i in range(37):
        table.put(filed(deps, TaskKey(f"USER#{i}", "R"), clock.now + timedelta(seconds=10 + i)))
    clock.advance(minutes=1)
    tick(client, clock)
    assert len({m.key for m in sent(aws, deps, clock)}) == 37


def test_progress_is_saved_only_up_to_what_was_sent(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    tick(client, clock)
    early, late = TaskKey("USER#early", "R"), TaskKey("USER#late", "R")
    table.put(filed(deps, early, clock.now + timedelta(seconds=30)))
    table.put(filed(deps, late, clock.now + timedelta(minutes=2, seconds=30)))
    clock.advance(minutes=3)
    calls = {"n": 0}

    def queue_down_for_the_second_bucket(params: dict[str, Any], **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("the due queue is unreachable")

    deps.clients.sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", queue_down_for_the_second_bucket)
    with pytest.raises(RuntimeError):
        tick(client, clock)
    assert [m.key for m in sent(aws, deps, clock)] == [early]
    deps.clients.sqs.meta.events.unregister("provide-client-params.sqs.SendMessageBatch",
                                            queue_down_for_the_second_bucket)
    tick(client, clock)
    assert [m.key for m in sent(aws, deps, clock)] == [late]


def test_seed_task_date_time_buckets_are_read_from_their_own_index(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    # A stage whose tasks table was provisioned with BUCKET_ATTRIBUTE=taskDateTime.
    use_settings(deps, bucket_attribute="taskDateTime", due_attribute="REMINDER_TIMESTAMP", bucket_shards=1)
    aws.clients.dynamodb.delete_table(TableName=deps.settings.tasks_table)
    ensure_table(aws.clients, deps.settings.tasks_table, Provisioned(), stream=True,
                 indexes=tasks_indexes(deps.settings))
    table = Table(deps)
    tick(client, clock)
    key = TaskKey("USER#ada", "REMINDER#2026-11-22T12:01")
    due = clock.now + timedelta(minutes=1, seconds=15)
    # The seed's item: a taskDateTime without a shard and no due_epoch; the stream step files it.
    seed = {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com",
            "strategy": "interval", "taskDateTime": "2026-11-22#12:01"}
    # Another with no due time at all and no strategy: due at its taskDateTime's minute.
    bare = TaskKey("USER#bob", "REMINDER#2026-11-22T12:02")
    assert stream(client, table.put(seed), table.put(
        {"PK": bare.pk, "SK": bare.sk, "email": "bob@example.com", "taskDateTime": "2026-11-22#12:02"})) == []
    stored = table.get(key)
    assert stored is not None and stored["taskDateTime"] == "2026-11-22#12:01#0"
    clock.advance(minutes=2)
    tick(client, clock)
    assert [m.key for m in sent(aws, deps, clock)] == [key, bare]


def test_failed_batch_entries_are_retried_until_sent(deps: Deps, clock: FakeClock) -> None:
    sqs = Mock()
    sqs.send_message_batch.side_effect = [
        {"Successful": [{"Id": "0"}], "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}]},
        {"Successful": [{"Id": "1"}]},
    ]
    clients = Mock(spec=Clients)
    clients.sqs = sqs
    bundle = replace(deps, clients=clients, _queue_urls={deps.settings.due_queue: "https://queue"})
    messages = [DueMessage(TaskKey(f"T#{i}", "TASK"), clock.now) for i in range(2)]
    assert interval.send_batch(bundle, messages) == 2
    retried = sqs.send_message_batch.call_args_list[1].kwargs["Entries"]
    assert retried == [{"Id": "1", "MessageBody": messages[1].to_json()}]
    assert clock.slept > 0


def test_entries_the_queue_refuses_fail_the_run(deps: Deps, clock: FakeClock) -> None:
    sqs = Mock()
    sqs.send_message_batch.return_value = {
        "Successful": [], "Failed": [{"Id": "0", "SenderFault": True, "Code": "InvalidMessageContents"}]}
    clients = Mock(spec=Clients)
    clients.sqs = sqs
    bundle = replace(deps, clients=clients, _queue_urls={deps.settings.due_queue: "https://queue"})
    with pytest.raises(interval.SendFailed, match="rejected"):
        interval.send_batch(bundle, [DueMessage(TaskKey("T#1", "TASK"), clock.now)])


def test_a_long_backlog_is_caught_up_over_several_runs(deps: Deps, clock: FakeClock) -> None:
    window = interval.plan_window(int(clock.now.timestamp()) - 86400, clock.now, minutes=1, shards=4, max_queries=400)
    assert window is not None and len(window.buckets) == 100
    assert window.last == int(window.buckets[-1].timestamp()) + 59
    assert interval.plan_window(int(clock.now.timestamp()), clock.now, minutes=1, shards=4) is None


def test_a_tick_in_the_middle_of_a_bucket_does_not_send_that_buckets_earlier_tasks_again(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    use_settings(deps, bucket_minutes=5)
    tick(client, clock)  # 12:00:00, the start of a five-minute bucket
    early, late = TaskKey("USER#early", "R"), TaskKey("USER#late", "R")
    table.put(filed(deps, early, clock.now + timedelta(minutes=1, seconds=30)))
    table.put(filed(deps, late, clock.now + timedelta(minutes=3, seconds=30)))
    clock.advance(minutes=2)
    tick(client, clock)  # 12:02:00, in the middle of the 12:00 bucket
    assert [m.key for m in sent(aws, deps, clock)] == [early]
    clock.advance(minutes=2)
    tick(client, clock)  # 12:04:00, the same bucket again: only what came due since
    assert [m.key for m in sent(aws, deps, clock)] == [late]


def test_interval_progress_never_moves_back_when_a_slower_run_saves_after_a_later_one(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    use_settings(deps, bucket_minutes=5)
    tick(client, clock)  # 12:00:00
    between = TaskKey("USER#between", "R")
    table.put(filed(deps, between, clock.now + timedelta(minutes=3)))  # 12:03, after the slow run's window
    clock.advance(minutes=2)
    slow_run_started = clock.now

    def a_later_run_finishes_first(params: dict[str, Any], **kwargs: Any) -> None:
        if params.get("Item", {}).get("SK") == {"S": "interval"} and clock.now == slow_run_started:
            clock.advance(minutes=2)  # 12:04: the next tick's run, while the 12:02 run is about to save
            tick(client, clock)

    deps.clients.dynamodb.meta.events.register("provide-client-params.dynamodb.PutItem", a_later_run_finishes_first)
    tick(client, clock)  # 12:02's run saves its progress (12:02:00) after 12:04's run saved 12:04:00
    assert interval.load_progress(deps) == int(slow_run_started.timestamp()) + 120
    assert [m.key for m in sent(aws, deps, clock)] == [between]
    clock.advance(minutes=1)
    tick(client, clock)  # 12:05: nothing is sent again
    assert sent(aws, deps, clock) == []
