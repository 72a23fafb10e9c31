"""A task's history (chalicelib/tasks/history.py): every execution and every operator's change, kept on its record
in the writes that happen already, bounded, served by GET /tasks/{id}/history; and an execution's lateness counted
from its own due time (an operator's retry's, not the failed due time's)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import history, items
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import TaskKey, parse_due
from chalicelib.tasks.store import Outcome, TaskStore
from tests.fixtures import Emitted, FakeClock
from tests.functional.task_support import (
    EMAIL_ACTION,
    FlakySes,
    deliver,
    due_body,
    get_task,
    post_task,
    record_of,
    use_client,
)

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now


class CountedWrites:
    """The bundle's DynamoDB client, counting the writes of the state table."""

    def __init__(self, real: Any) -> None:
        self._real, self.writes = real, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def update_item(self, **kwargs: Any) -> Any:
        self.writes += 1
        return self._real.update_item(**kwargs)

    def put_item(self, **kwargs: Any) -> Any:
        self.writes += 1
        return self._real.put_item(**kwargs)


def post(client: Client, path: str, body: dict[str, Any] | None = None) -> Any:
    if body is None:
        return client.http.post(path)
    return client.http.post(path, headers={"Content-Type": "application/json"}, body=json.dumps(body))


def history_of(client: Client, task_id: str) -> dict[str, Any]:
    response = client.http.get(f"/tasks/{task_id}/history")
    assert response.status_code == 200, response.body
    shown: dict[str, Any] = response.json_body
    return shown


def test_a_failure_an_operators_retry_and_its_success_are_the_tasks_history_with_no_write_of_their_own(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    assert post_task(client, {"id": "flaky", "run_at": RUN_AT, "action": EMAIL_ACTION,
                              "retry": {"max_attempts": 1}}).status_code == 201
    ses = deps.clients.ses
    use_client(deps, "ses", FlakySes(ses, failures=1))
    clock.now = parse_due(RUN_AT) + timedelta(seconds=2)
    assert deliver(client, due_body(TaskKey.for_id("flaky"), parse_due(RUN_AT))) == set()
    assert get_task(client, "flaky")["status"] == "FAILED"
    clock.advance(seconds=108)
    assert post(client, "/tasks/flaky/retry", {"retry_id": "r-1"}).status_code == 202
    counted = CountedWrites(deps.clients.dynamodb)
    use_client(deps, "dynamodb", counted)
    clock.advance(seconds=1)
    assert deliver(client, due_body(TaskKey.for_id("flaky"), parse_due(RUN_AT))) == set()
    assert counted.writes == 2  # the claim and the settle, as without a history
    failed, retried, done = history_of(client, "flaky")["entries"]
    assert failed == {"kind": "run", "due": "2026-11-22T12:10:00.000Z", "claimed_at": "2026-11-22T12:10:02.000Z",
                      "finished_at": "2026-11-22T12:10:02.000Z", "duration_ms": 0, "attempt": 1, "status": "FAILED",
                      "error": failed["error"]}
    assert failed["error"].startswith("ClientError: An error occurred (ServiceUnavailable)")
    assert len(failed["error"]) <= history.TEXT_CHARS  # cut
    assert retried == {"kind": "retry", "by": "api", "at": "2026-11-22T12:11:50.000Z",
                       "due": "2026-11-22T12:10:00.000Z", "runs_from": "2026-11-22T12:11:50.000Z"}
    assert (done["kind"], done["status"], done["attempt"], done["runs_from"], done["claimed_at"]) == (
        "run", "DONE", 1, "2026-11-22T12:11:50.000Z", "2026-11-22T12:11:51.000Z")
    assert "result" in done
    # the retry ran 1 s after the operator asked for it: its lateness is 1 s, not the 111 s since the failed due time
    assert emitted.values("TaskLateness", Strategy="exact") == [2000.0, 1000.0]
    last = get_task(client, "flaky")["last_execution"]  # what the console's lateness chart reads
    assert (last["lateness_ms"], last["runs_from"], last["status"]) == (1000, "2026-11-22T12:11:50.000Z", "DONE")


def test_a_recurring_tasks_pause_and_resume_say_who_and_when_and_an_unknown_task_has_none(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    body = {"id": "daily", "run_at": RUN_AT, "action": EMAIL_ACTION, "recurrence": "rate(1 day)"}
    assert post_task(client, body).status_code == 201
    assert post(client, "/tasks/daily/pause").status_code == 200
    clock.advance(days=2)
    assert post(client, "/tasks/daily/resume").status_code == 200
    shown = history_of(client, "daily")
    assert [(e["kind"], e["by"], e["at"]) for e in shown["entries"]] == [
        ("pause", "api", "2026-11-22T12:00:00.000Z"), ("resume", "api", "2026-11-24T12:00:00.000Z")]
    assert shown["entries"][1]["due"] == "2026-11-24T12:10:00.000Z"
    assert (shown["total"], shown["dropped"], shown["keep"]) == (2, 0, history.KEEP)
    missing = client.http.get("/tasks/nobody/history")
    assert (missing.status_code, missing.json_body["field"]) == (404, "id")
    assert post_task(client, {"id": "some", "run_at": "2026-11-25T12:10:00Z", "action": EMAIL_ACTION}).status_code == 201
    assert history_of(client, "some") == {"id": "some", "entries": [], "total": 0, "dropped": 0, "keep": history.KEEP}
    refused = client.http.get("/tasks/some/history?limit=3")
    assert (refused.status_code, refused.json_body["field"]) == (400, "limit")
    moved = client.http.request("PATCH", "/tasks/some", body=json.dumps({"run_at": "2026-11-26T12:10:00Z"}).encode(),
                                headers={"Content-Type": "application/json"})
    assert moved.status_code == 200
    assert client.http.delete("/tasks/some").status_code == 200
    assert [(e["kind"], e["by"], e.get("due")) for e in history_of(client, "some")["entries"]] == [
        ("reschedule", "api", "2026-11-26T12:10:00.000Z"), ("cancel", "api", None)]


def test_a_settle_without_a_claim_appends_to_a_full_history_by_writing_it_whole(deps: Deps, clock: FakeClock) -> None:
    key, due = TaskKey.for_id("once"), parse_due(RUN_AT)
    old = [history.operator_entry(history.PAUSE, f"op-{i}", clock.now) for i in range(history.KEEP)]
    deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=ddb.serialize({
        **items.record_key(key.task_id), "id": key.task_id, "status": State.PENDING.value, "run_at": RUN_AT,
        history.HISTORY: old, history.COUNT: 14}))
    entry = history.run_entry(due, due, due, 1, "DONE")
    store = TaskStore(deps)
    assert store.settle_once(key, due, "me", Outcome(State.DONE, 1, {"ok": True}), due, 60, entry=entry).won
    record = record_of(deps, key) or {}
    assert record[history.HISTORY] == [*old[1:], entry]
    assert record[history.COUNT] == 15
    shown = history.shown(record, key.task_id)
    assert (len(shown["entries"]), shown["total"], shown["dropped"]) == (history.KEEP, 15, 5)
