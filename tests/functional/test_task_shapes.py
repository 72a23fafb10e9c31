"""The tasks table's own items, as GET shows them after they ran or went: a lazy item that loses its TTL is no
task (not a dead letter) and its task is cancelled; a task that ran keeps its strategy and action; a task whose
item a user deleted shows CANCELLED, with when (the same rules for task sources: test_task_sources.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks.model import TaskKey, parse_due
from tests.fixtures import Aws, FakeClock
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import EMAIL_ACTION, deliver, emails_sent, get_task, lazy_seed_item, post_task

GRACE = TaskKey("grace@example.com", "reminder")
GRACE_PATH = "grace@example.com%7Creminder"


def _epoch(at: datetime) -> int:
    return int(at.timestamp())


def test_a_lazy_item_without_a_due_time_is_no_task_and_no_dead_letter(
        aws: Aws, deps: Deps, client: Client, error_lines: list[str]) -> None:
    table = Table(deps)
    item = {"PK": GRACE.pk, "SK": GRACE.sk, "strategy": "lazy", "email": "grace@example.com"}
    assert stream(client, table.put(item), table.delete(GRACE)) == []
    assert aws.drain(deps.settings.task_dlq) == [] and aws.sent(deps.settings.due_queue) == []
    assert error_lines == []


def test_removing_a_lazy_items_ttl_cancels_its_task_and_a_later_delete_runs_nothing(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, error_lines: list[str]) -> None:
    table = Table(deps)
    assert stream(client, table.put(lazy_seed_item(_epoch(clock.now + timedelta(hours=1))))) == []
    before = table.get(GRACE)
    deps.clients.dynamodb.update_item(TableName=deps.settings.tasks_table, Key=GRACE.dynamo(),
                                      UpdateExpression="REMOVE expires_at")
    assert stream(client, table.record("MODIFY", GRACE, new=table.get(GRACE), old=before)) == []
    shown = get_task(client, GRACE_PATH)
    assert (shown["status"], shown["strategy"], shown["action"]["to"]) == ("CANCELLED", "lazy", "grace@example.com")
    assert parse_due(shown["finished_at"]) == clock.now
    assert stream(client, table.delete(GRACE)) == []  # a user's delete, later
    assert aws.drain(deps.settings.task_dlq) == [] and aws.sent(deps.settings.due_queue) == []
    assert error_lines == []
    assert get_task(client, GRACE_PATH)["status"] == "CANCELLED"


def test_a_lazy_seed_item_keeps_its_strategy_and_action_once_it_ran(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    assert stream(client, table.put(lazy_seed_item(_epoch(clock.now + timedelta(minutes=5))))) == []
    pending = get_task(client, GRACE_PATH)
    clock.advance(minutes=10)
    assert stream(client, table.delete(GRACE, by_ttl=True)) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    done = get_task(client, GRACE_PATH)
    assert (done["status"], done["strategy"], done["action"]) == ("DONE", "lazy", pending["action"])


def test_a_users_delete_of_an_item_written_by_another_program_shows_it_cancelled_and_when(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    key = TaskKey("USER#ada", "REMINDER#standup")
    item: dict[str, Any] = {"PK": key.pk, "SK": key.sk, "run_at": _epoch(clock.now + timedelta(minutes=5)),
                            "email": "ada@example.com"}
    assert stream(client, table.put(item)) == []
    [(body, _)] = aws.sent(deps.settings.due_queue)
    clock.advance(minutes=1)
    assert stream(client, table.delete(key)) == []
    shown = get_task(client, "USER%23ada%7CREMINDER%23standup")
    assert (shown["status"], shown["strategy"], shown["action"]["to"]) == ("CANCELLED", "exact", "ada@example.com")
    assert parse_due(shown["finished_at"]) == clock.now
    clock.advance(minutes=5)
    assert deliver(client, body) == set()
    assert emails_sent() == []


def test_the_apis_cancel_is_kept_as_it_wrote_it_when_the_stream_sees_the_delete(
        deps: Deps, clock: FakeClock, client: Client) -> None:
    table = Table(deps)
    created = post_task(client, {"id": "standup", "run_at": "2026-11-22T13:00:00Z", "action": EMAIL_ACTION})
    assert created.status_code == 201
    item = table.get(TaskKey.for_id("standup"))
    assert client.http.delete("/tasks/standup").status_code == 200
    cancelled = get_task(client, "standup")
    clock.advance(minutes=1)
    assert stream(client, table.record("REMOVE", TaskKey.for_id("standup"), old=item)) == []
    assert get_task(client, "standup") == cancelled
