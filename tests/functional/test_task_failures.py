"""Failures users can operate (docs/tasks.md "Retries and failures", docs/operations-runbook.md): a task's retry
policy, an action's Retry-After hint, failed tasks listed from the status index, retried once per retry_id, and
recurring tasks paused and resumed -- under moto, with faults at the app's own calls."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import actions, lifecycle
from chalicelib.tasks.action_deps import ActionDeps
from chalicelib.tasks.actions import Action, ActionRetryHint, Attempt, Check, any_text
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey, iso, parse_due
from chalicelib.tasks.store import RETRY_ATTRIBUTES, Outcome, TaskStore
from tests.faults import Faults, WorkerCrash
from tests.fixtures import Aws, FakeClock
from tests.functional.task_support import (
    EMAIL_ACTION,
    FlakySes,
    deliver,
    due_body,
    emails_sent,
    get_task,
    post_task,
    record_of,
    use_client,
)

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "operations-runbook.md"


def post(client: Client, path: str, body: dict[str, Any] | None = None) -> Any:
    """POST ``body`` (a retry's; none for pause and resume, which take none)."""
    if body is None and not path.endswith("/retry"):
        return client.http.post(path)
    return client.http.post(path, headers={"Content-Type": "application/json"}, body=json.dumps(body or {}))


def fail(client: Client, deps: Deps, clock: FakeClock, task_id: str, **extra: Any) -> None:
    """POST a task due at RUN_AT and run it with every email failing: FAILED after the stage's attempts."""
    assert post_task(client, {"id": task_id, "run_at": RUN_AT, "action": EMAIL_ACTION, **extra}).status_code == 201
    ses = deps.clients.ses
    use_client(deps, "ses", FlakySes(ses, failures=10**6))
    clock.now = max(clock.now, parse_due(RUN_AT))
    assert deliver(client, due_body(TaskKey.for_id(task_id), parse_due(RUN_AT))) == set()
    use_client(deps, "ses", ses)
    assert get_task(client, task_id)["status"] == "FAILED"


class HintedAction(Action):
    """A throwaway action type that fails ``failures`` times saying when to try again (a Retry-After)."""

    type = "hinted"
    fields: ClassVar[Mapping[str, Check]] = {"note": any_text}
    failures: ClassVar[int] = 1
    runs: ClassVar[int] = 0

    def run(self, deps: ActionDeps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        HintedAction.runs += 1
        if HintedAction.runs <= HintedAction.failures:
            raise ActionRetryHint("429 Too Many Requests", retry_after_seconds=120)
        return {"type": self.type}


@pytest.fixture
def hinted() -> Iterator[type[HintedAction]]:
    actions.register(HintedAction)
    HintedAction.runs = 0
    try:
        yield HintedAction
    finally:
        del actions.ACTIONS[HintedAction.type]


def test_a_tasks_own_retry_policy_bounds_its_attempts_and_get_shows_the_count_and_the_last_error(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    fail(client, deps, clock, "twice", retry={"max_attempts": 2})
    shown = get_task(client, "twice")
    assert (shown["attempts"], shown["retry"]) == (2, {"max_attempts": 2, "max_retries": 1})
    assert "ServiceUnavailable" in shown["last_error"]
    [alert] = aws.alerts()  # what the runbook says it says
    assert alert["subject"] == "Task twice failed after 2 attempts"
    assert "`Task <id> failed after <n> attempts`" in RUNBOOK.read_text()
    assert set(alert["message"]) - {"subject"} == {"task_id", "due", "action", "attempts", "error", "dedupe_id"}
    refused = post_task(client, {"run_at": RUN_AT, "action": EMAIL_ACTION, "retry": {"max_attempts": 187}})
    assert (refused.status_code, refused.json_body["field"]) == (400, "retry.max_attempts")


def test_retries_are_counted_as_eventbridge_scheduler_counts_them_up_to_its_185(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    """``max_retries`` is Scheduler's MaximumRetryAttempts (0-185): one attempt more in all, one meaning."""
    fail(client, deps, clock, "once", retry={"max_retries": 1})
    shown = get_task(client, "once")
    assert (shown["attempts"], shown["retry"]) == (2, {"max_attempts": 2, "max_retries": 1})
    most = {"run_at": RUN_AT, "action": EMAIL_ACTION, "retry": {"max_retries": 185}}
    assert post_task(client, {"id": "most", **most}).json_body["retry"] == {"max_attempts": 186, "max_retries": 185}
    both = {"run_at": RUN_AT, "action": EMAIL_ACTION, "retry": {"max_retries": 0, "max_attempts": 1}}
    assert post_task(client, {"id": "both", **both}).status_code == 201
    for retry, field in (({"max_retries": 186}, "retry.max_retries"), ({"max_retries": -1}, "retry.max_retries"),
                         ({"max_retries": 2, "max_attempts": 2}, "retry.max_retries")):
        refused = post_task(client, {"run_at": RUN_AT, "action": EMAIL_ACTION, "retry": retry})
        assert (refused.status_code, refused.json_body["field"]) == (400, field), retry
    assert "max_attempts - 1" in post_task(client, {"run_at": RUN_AT, "action": EMAIL_ACTION, "retry": {
        "max_retries": 2, "max_attempts": 2}}).json_body["error"]


def test_an_actions_retry_after_is_honoured_the_task_waits_pending_and_the_retry_runs_at_that_time(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hinted: type[HintedAction]) -> None:
    action = {"type": "hinted", "note": "n"}
    assert post_task(client, {"id": "hint", "run_at": RUN_AT, "action": action}).status_code == 201
    clock.now = parse_due(RUN_AT)
    assert deliver(client, due_body(TaskKey.for_id("hint"), parse_due(RUN_AT))) == set()
    shown = get_task(client, "hint")
    retry_at = clock.now + timedelta(seconds=120)
    assert (shown["status"], shown["attempts"], shown["retry_at"]) == ("PENDING", 1, iso(retry_at))
    assert "429" in shown["last_error"] and clock.slept == 0  # not slept in the delivery: too long
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert DueMessage.from_json(body).not_before == retry_at and delay == 120
    clock.advance(seconds=60)  # a copy arriving early goes back and waits
    assert deliver(client, body) == set()
    [(early, _)] = aws.sent(deps.settings.due_queue)
    assert hinted.runs == 1
    clock.now = retry_at
    assert deliver(client, early) == set()
    assert deliver(client, body) == set()  # and the other copy finds it done
    shown = get_task(client, "hint")
    assert (shown["status"], shown["attempts"], hinted.runs) == ("DONE", 2, 2)
    assert "retry_at" not in shown


def test_failed_and_dead_lettered_tasks_are_listed_by_status_and_source_a_page_at_a_time(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    fail(client, deps, clock, "a")
    fail(client, deps, clock, "b")
    other = TaskKey("USER#ada", "REMINDER#1")
    TaskStore(deps).note_dead_letter(other, parse_due(RUN_AT), {"run_at": RUN_AT, "reason": "r"})
    first = client.http.get("/tasks?status=failed&limit=1").json_body
    second = client.http.get(f"/tasks?status=FAILED&limit=1&next_token={first['next_token']}").json_body
    assert [t["id"] for t in first["tasks"] + second["tasks"]] == ["a", "b"]
    assert client.http.get("/tasks?status=FAILED&source=items").json_body["tasks"] == []
    dead = client.http.get("/tasks?status=DEAD_LETTERED&source=items").json_body["tasks"]
    assert [(t["id"], t["status"], t["source"]) for t in dead] == [(other.task_id, "DEAD_LETTERED", "items")]
    assert client.http.get("/tasks?status=DEAD_LETTERED&source=api").json_body["tasks"] == []
    unknown = client.http.get("/tasks?source=nope")
    assert (unknown.status_code, unknown.json_body["field"]) == (400, "source")


def test_a_retry_whose_answer_was_lost_and_is_repeated_starts_one_execution(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    fail(client, deps, clock, "flaky")
    faults.inject("dynamodb.UpdateItem", "lost", match=lambda p: "retry_id" in json.dumps(p))
    assert post(client, "/tasks/flaky/retry", {"retry_id": "r-1"}).status_code == 500  # applied, answer lost
    again = post(client, "/tasks/flaky/retry", {"retry_id": "r-1"})
    assert (again.status_code, again.json_body["status"], again.json_body["retry_id"]) == (200, "PENDING", "r-1")
    assert post(client, "/tasks/flaky/retry", {"retry_id": "r-1"}).status_code == 200
    sent = aws.sent(deps.settings.due_queue)
    assert len(sent) == 2  # each repeat sends the retry's message again while it has not started
    for body, _ in sent:
        assert deliver(client, body) == set()
    assert len(emails_sent()) == 1
    assert (get_task(client, "flaky")["status"], get_task(client, "flaky")["attempts"]) == ("DONE", 1)
    assert post(client, "/tasks/flaky/retry", {"retry_id": "r-1"}).status_code == 200  # still the same retry
    assert aws.sent(deps.settings.due_queue) == []  # ... which ran: nothing sent
    done = post(client, "/tasks/flaky/retry", {"retry_id": "r-2"})
    assert (done.status_code, done.json_body["field"]) == (409, "status")


class RetryInBetween:
    """The bundle's DynamoDB client, making ``meanwhile`` happen right before the first write of a retry: another
    request with the same retry_id (and what follows it) lands between this one's read of the task (FAILED) and
    its write -- a client's repeat overtaking the slow first request, or two requests at once."""

    def __init__(self, real: Any, meanwhile: Callable[[], None]) -> None:
        self._real = real
        self._meanwhile: Callable[[], None] | None = meanwhile

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def update_item(self, **kwargs: Any) -> Any:
        meanwhile = self._meanwhile
        if "retry_id" in kwargs.get("ExpressionAttributeNames", {}).values() and meanwhile is not None:
            self._meanwhile = None
            meanwhile()
        return self._real.update_item(**kwargs)


@pytest.mark.parametrize("then", ["nothing yet", "started", "settled"])
def test_a_retry_id_whose_write_lands_after_the_retry_was_made_answers_200_and_re_arms_nothing(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, then: str) -> None:
    fail(client, deps, clock, "late")
    key, due, store = TaskKey.for_id("late"), parse_due(RUN_AT), TaskStore(deps)
    first: list[int] = []

    def meanwhile() -> None:  # the other request with this retry_id, then the retry's execution
        first.append(post(client, "/tasks/late/retry", {"retry_id": "r-1"}).status_code)
        if then == "started":  # claimed: its worker runs the action
            assert store.claim(key, due, clock.now, deps.settings.task_claim_lease_seconds, "worker").won
        elif then == "settled":
            [(body, _)] = aws.sent(deps.settings.due_queue)
            assert deliver(client, body) == set()

    real = deps.clients.dynamodb
    use_client(deps, "dynamodb", RetryInBetween(real, meanwhile))
    late = post(client, "/tasks/late/retry", {"retry_id": "r-1"})
    use_client(deps, "dynamodb", real)
    assert first == [202]
    assert (late.status_code, late.json_body["retry_id"], late.json_body.get("note")) == (
        200, "r-1", "this retry was made already")
    record = record_of(deps, key)
    assert lifecycle.state_of(record) is {"nothing yet": State.PENDING, "started": State.RUNNING,
                                          "settled": State.DONE}[then]
    sent = aws.sent(deps.settings.due_queue)
    assert len(sent) == {"nothing yet": 2, "started": 1, "settled": 0}[then]  # the late one re-sends it only while
    # the retry is not yet claimed
    if then == "started":
        assert store.settle(key, due, "worker", Outcome(State.DONE, 1, {"type": "email"}), clock.now, None)
    for body, _ in sent:
        assert deliver(client, body) == set()
    assert len(emails_sent()) == {"nothing yet": 1, "started": 0, "settled": 1}[then]  # one run: the worker's
    assert (get_task(client, "late")["status"], get_task(client, "late")["attempts"]) == ("DONE", 1)


def test_a_retry_whose_write_botocore_repeats_after_its_answer_was_lost_is_its_own_and_answers_202(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    fail(client, deps, clock, "resent")
    faults.inject("dynamodb.UpdateItem", "retried", match=lambda p: "retry_id" in json.dumps(p))
    made = post(client, "/tasks/resent/retry", {"retry_id": "r-1"})
    assert faults.injected["retried"] == 1
    assert (made.status_code, made.json_body["status"], "note" in made.json_body) == (202, "PENDING", False)
    [(body, _)] = aws.sent(deps.settings.due_queue)
    assert deliver(client, body) == set()
    assert len(emails_sent()) == 1


def test_a_worker_that_dies_between_the_action_and_the_settle_of_a_retry_is_taken_over_and_settles_once(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults) -> None:
    fail(client, deps, clock, "crashy")
    run_at = clock.now + timedelta(minutes=5)
    assert post(client, "/tasks/crashy/retry", {"retry_id": "r-1", "run_at": iso(run_at)}).status_code == 202
    [(body, delay)] = aws.sent(deps.settings.due_queue)
    assert 299 <= delay <= 300  # it comes back by run_at (whole seconds, rounded down)
    faults.inject("dynamodb.UpdateItem", "crash", match=lambda p: "#exec_owner = :me" in str(p.get("ConditionExpression")))
    clock.now = run_at
    with pytest.raises(WorkerCrash):  # the email went, then the worker died before recording it
        deliver(client, body)
    assert get_task(client, "crashy")["status"] == "RUNNING"  # its claim, within its lease
    clock.advance(seconds=deps.settings.task_claim_lease_seconds + 1)  # SQS delivers it again; its lease ran out
    assert get_task(client, "crashy")["status"] == "PENDING"  # a claim whose worker died: not FAILED again
    assert deliver(client, body) == set()
    assert deliver(client, body) == set()  # a duplicate later changes nothing
    assert len(emails_sent()) == 2  # the action's window: sent, the worker died; the takeover sent it again
    shown = get_task(client, "crashy")
    assert (shown["status"], shown["attempts"]) == ("DONE", 1)


def test_only_failed_or_dead_lettered_tasks_are_retried(client: Client, deps: Deps, clock: FakeClock) -> None:
    assert post_task(client, {"id": "later", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    pending = post(client, "/tasks/later/retry")
    assert (pending.status_code, pending.json_body["field"]) == (409, "status")
    assert "PENDING" in pending.json_body["error"]
    assert post(client, "/tasks/nobody/retry").status_code == 404


class PauseBeforeClaim:
    """The bundle's DynamoDB client, pausing ``task_id`` through the API right before the executor's claim: the
    pause lands between the executor's read of the item and its claim."""

    def __init__(self, real: Any, client: Client, task_id: str) -> None:
        self._real, self._client, self._task_id, self.paused = real, client, task_id, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def update_item(self, **kwargs: Any) -> Any:
        if "exec_owner = :owner" in kwargs.get("UpdateExpression", "") and not self.paused:
            self.paused = post(self._client, f"/tasks/{self._task_id}/pause").status_code
        return self._real.update_item(**kwargs)


def test_a_pause_that_lands_before_the_claim_skips_the_occurrence_and_resume_goes_on_from_the_next(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    body = {"id": "daily", "run_at": RUN_AT, "action": EMAIL_ACTION, "recurrence": "rate(1 day)"}
    assert post_task(client, body).status_code == 201
    real = deps.clients.dynamodb
    racer = PauseBeforeClaim(real, client, "daily")
    use_client(deps, "dynamodb", racer)
    clock.now = parse_due(RUN_AT)
    assert deliver(client, due_body(TaskKey.for_id("daily"), parse_due(RUN_AT))) == set()
    use_client(deps, "dynamodb", real)
    assert racer.paused == 200 and emails_sent() == []  # the claim found it paused: skipped, not queued up
    assert get_task(client, "daily")["status"] == "PAUSED"
    clock.advance(days=2, hours=1)
    resumed = post(client, "/tasks/daily/resume")
    assert (resumed.status_code, resumed.json_body["status"]) == (200, "PENDING")
    assert resumed.json_body["run_at"] == "2026-11-25T12:10:00Z"  # the next occurrence after now
    assert get_task(client, "daily")["run_at"] == "2026-11-25T12:10:00Z"


class ClaimBeforePause:
    """The bundle's DynamoDB client, letting an executor claim ``key`` right before the API's pause write: the
    claim lands between the API's read of the task (PENDING) and its write."""

    def __init__(self, real: Any, store: TaskStore, key: TaskKey, clock: FakeClock) -> None:
        self._real, self._store, self._key, self._clock, self.claimed = real, store, key, clock, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def update_item(self, **kwargs: Any) -> Any:
        if "paused_at" in json.dumps(kwargs.get("ExpressionAttributeNames", {})) and not self.claimed:
            self.claimed = self._store.claim(self._key, self._clock.now, self._clock.now, 300, "worker").won
        return self._real.update_item(**kwargs)


def test_a_claim_that_lands_before_the_pause_makes_the_pause_a_conflict(
        client: Client, deps: Deps, clock: FakeClock) -> None:
    body = {"id": "daily", "run_at": RUN_AT, "action": EMAIL_ACTION, "recurrence": "rate(1 day)"}
    assert post_task(client, body).status_code == 201
    clock.now = parse_due(RUN_AT)
    real = deps.clients.dynamodb
    racer = ClaimBeforePause(real, TaskStore(deps), TaskKey.for_id("daily"), clock)
    use_client(deps, "dynamodb", racer)
    busy = post(client, "/tasks/daily/pause")
    use_client(deps, "dynamodb", real)
    assert racer.claimed and (busy.status_code, busy.json_body["field"]) == (409, "status")
    assert get_task(client, "daily")["status"] == "RUNNING"  # the claim won; nothing paused it


def test_a_one_time_task_cannot_be_paused_because_it_has_no_occurrence_to_skip(client: Client) -> None:
    assert post_task(client, {"id": "once", "run_at": RUN_AT, "action": EMAIL_ACTION}).status_code == 201
    refused = post(client, "/tasks/once/pause")
    assert (refused.status_code, refused.json_body["field"]) == (409, "recurrence")
    assert "one-time" in refused.json_body["error"]


def test_an_execution_done_after_a_retry_keeps_none_of_the_retrys_times_on_its_record(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, hinted: type[HintedAction]) -> None:
    assert post_task(client, {"id": "hint-done", "run_at": RUN_AT, "action": {"type": "hinted", "note": "n"}}
                     ).status_code == 201
    clock.now = parse_due(RUN_AT)
    body = due_body(TaskKey.for_id("hint-done"), parse_due(RUN_AT))
    assert deliver(client, body) == set()
    [(retry, _)] = aws.sent(deps.settings.due_queue)
    assert {"retry_due", "retry_at", "retry_at_ms"} <= (record_of(deps, TaskKey.for_id("hint-done")) or {}).keys()
    clock.advance(seconds=120)
    assert deliver(client, retry) == set()
    record = record_of(deps, TaskKey.for_id("hint-done")) or {}
    assert (lifecycle.state_of(record), record["attempts"]) == (State.DONE, 2)
    assert not set(RETRY_ATTRIBUTES) & record.keys()  # a later claim of this due time counts no old attempt


def test_a_callback_whose_retry_cannot_wait_in_its_delivery_fails_at_once_saying_why(
        client: Client, deps: Deps, clock: FakeClock, hinted: type[HintedAction]) -> None:
    assert post_task(client, {"id": "hint-cb", "run_at": RUN_AT, "action": EMAIL_ACTION,
                              "on_success": {"type": "hinted", "note": "n"}}).status_code == 201
    clock.now = parse_due(RUN_AT)
    assert deliver(client, due_body(TaskKey.for_id("hint-cb"), parse_due(RUN_AT))) == set()
    record = record_of(deps, TaskKey.for_id("hint-cb")) or {}
    assert (lifecycle.state_of(record), record["callback"]["status"], hinted.runs) == (State.DONE, "FAILED", 1)
    assert record["callback"]["error"].endswith("(not retried: a callback retries within its delivery only)")
