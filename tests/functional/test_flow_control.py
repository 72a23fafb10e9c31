"""Flow control (chalicelib/tasks/flow.py): a task over its target's rate or concurrency waits in the due queue,
unclaimed, and runs late: never failed for it, no attempt spent; a lease is given back after the run and one a
dead worker held expires."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import flow
from chalicelib.tasks.flow_limits import Limit
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, Emitted, FakeClock, use_settings
from tests.functional.task_support import EMAIL_ACTION, deliver, due_body, emails_sent, get_task, post_task

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


def flow_item(deps: Deps, key: str, sk: str) -> dict[str, Any]:
    found = deps.clients.dynamodb.get_item(TableName=deps.settings.state_table, ConsistentRead=True,
                                           Key={"PK": {"S": flow.PK_PREFIX + key}, "SK": {"S": sk}})
    return dict(ddb.deserialize(found.get("Item", {})))


def due_messages(aws: Aws, deps: Deps) -> list[tuple[DueMessage, int]]:
    return [(DueMessage.from_json(body), delay) for body, delay in aws.sent(deps.settings.due_queue)]


def two_emails_due(client: Client, clock: FakeClock) -> list[str]:
    for task_id in ("first", "second"):
        assert post_task(client, {"id": task_id, "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    clock.advance(minutes=10)
    return [due_body(TaskKey.for_id(t), parse_due(RUN_AT)) for t in ("first", "second")]


def test_a_task_over_its_targets_rate_waits_in_the_due_queue_with_its_attempts_unchanged_then_runs(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, faults: Faults, emitted: Emitted) -> None:
    use_settings(deps, task_target_limits=(("email", Limit(rate=0.5)),))  # one email every 2 s
    first, second = two_emails_due(client, clock)
    aws.sent(deps.settings.due_queue)
    assert deliver(client, first) == set()
    faults.inject("sqs.SendMessage", "crash")  # reserved its start, then died before waiting for it
    with pytest.raises(WorkerCrash):
        deliver(client, second)
    assert deliver(client, second) == set()  # SQS's redelivery: a later start (the first is lost); nothing failed
    assert deliver(client, second) == set()  # the same message again: a start of its own, later still
    assert len(emails_sent()) == 1
    assert (get_task(client, "first")["status"], get_task(client, "first")["attempts"]) == ("DONE", 1)
    waiting = get_task(client, "second")
    assert (waiting["status"], waiting.get("attempts", 0)) == ("PENDING", 0)  # not claimed: no attempt spent
    assert emitted.total("TasksPaced", Strategy="exact") == 2  # the two waits sent (not the crashed one's)
    [(message, delay), (repeat, repeat_delay)] = due_messages(aws, deps)
    assert message.key == repeat.key == TaskKey.for_id("second")
    assert (message.slot, delay) == (clock.now + timedelta(seconds=4), 4)
    assert (repeat.slot, repeat_delay) == (clock.now + timedelta(seconds=6), 6)
    clock.advance(seconds=4)
    assert deliver(client, message.to_json()) == set()  # back at its start: it runs, with no other write
    clock.advance(seconds=2)
    assert deliver(client, repeat.to_json()) == set()  # the claim finds it done
    assert len(emails_sent()) == 2
    shown = get_task(client, "second")
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)
    # four starts reserved in all: each message came back holding its own, taking no other
    assert flow_item(deps, "email", flow.RATE_SK)["next_ms"] == int(clock.now.timestamp() * 1000) + 2000


def test_a_lease_a_dead_worker_held_keeps_others_waiting_until_it_expires_and_each_run_gives_its_own_back(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    use_settings(deps, task_target_limits=(("email", Limit(concurrency=1)),))
    first, second = two_emails_due(client, clock)
    aws.sent(deps.settings.due_queue)
    expires = int(clock.now.timestamp() * 1000) + 90_000
    assert flow.Flow(deps).acquire("email", 1, "dead", expires)  # its worker took it, then died
    assert deliver(client, first) == set()
    assert emails_sent() == []
    assert get_task(client, "first").get("attempts", 0) == 0  # not claimed: no attempt spent
    [(message, delay)] = due_messages(aws, deps)
    assert flow.WAIT_MIN_SECONDS <= delay <= flow.WAIT_MAX_SECONDS
    clock.advance(seconds=91)  # the lease ran out
    assert deliver(client, message.to_json()) == set()
    assert len(emails_sent()) == 1 and get_task(client, "first")["attempts"] == 1
    assert deliver(client, second) == set()  # the first run gave its lease back: the next one runs at once
    assert len(emails_sent()) == 2
    leases = flow_item(deps, "email", flow.LEASES_SK)
    assert leases == {"PK": flow.PK_PREFIX + "email", "SK": flow.LEASES_SK, "held": 0}  # none left held
