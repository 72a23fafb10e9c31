"""The state machine of docs/executor.md walked against the code: every declared transition is made by the real
API, executor, dead-letter handlers and store under moto, and no write of a task's record makes one the
declaration (``chalicelib.tasks.lifecycle``) lacks.

Every write of a record is watched at the DynamoDB client: the record's state is read right before and right
after it, and the transition is named by the store method (or the API function whose transaction it is) that
made it.  The drawing itself is checked against the declaration in tests/unit/test_execution_states.py."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from chalice.test import Client

from chalicelib import ddb
from chalicelib.aws import Deps
from chalicelib.tasks import items, lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import DueMessage, TaskKey, iso
from chalicelib.tasks.store import Outcome, TaskStore
from deploy.provision import MAX_RECEIVE_COUNT
from tests import events
from tests.fixtures import ACCOUNT, Aws, FakeClock, use_settings
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import (
    EMAIL_ACTION,
    FlakySes,
    deliver,
    due_body,
    patch_task,
    post_task,
    record_of,
    use_client,
)

STORE_WRITERS = {"claim", "settle", "settle_once", "mark", "note_dead_letter", "note_stream_dead_letter", "cancel_by_item", "redrive",
                 "pause", "mark_callback"}
# Functions whose transactions hold the store's create, cancel, reschedule and resume.
API_WRITERS = {("chalicelib.tasks.api", "create"), ("chalicelib.tasks.api", "cancel"),
               ("chalicelib.tasks.api", "reschedule"), ("chalicelib.tasks.operations", "resume")}
REFUSED = {"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/999999999999/theirs", "message": "m"}


class RecordWrites:
    """The bundle's DynamoDB client, watching each write of a task's record: (transition, from, to)."""

    def __init__(self, real: Any, state_table: str) -> None:
        self._real, self._table = real, state_table
        self.seen: set[tuple[str, State, State]] = set()
        self.unkeyed: set[str] = set()  # transitions that left a record's status_key behind its status

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def update_item(self, **kwargs: Any) -> Any:
        return self._watch([kwargs], lambda: self._real.update_item(**kwargs))

    def put_item(self, **kwargs: Any) -> Any:
        return self._watch([kwargs], lambda: self._real.put_item(**kwargs))

    def delete_item(self, **kwargs: Any) -> Any:
        return self._watch([kwargs], lambda: self._real.delete_item(**kwargs))

    def transact_write_items(self, **kwargs: Any) -> Any:
        ops = [next(iter(op.values())) for op in kwargs["TransactItems"]]
        return self._watch(ops, lambda: self._real.transact_write_items(**kwargs))

    def _watch(self, ops: list[dict[str, Any]], write: Any) -> Any:
        keys = [self._record_key(op) for op in ops]
        watched = [(op, key) for op, key in zip(ops, keys, strict=True) if key is not None]
        before = [self._state(key) for _, key in watched]
        answer = write()  # a condition that failed raises: nothing was written
        writer = _writer()
        for (op, key), old in zip(watched, before, strict=True):
            new = self._state(key)
            self.seen.add((_transition(writer, op), old, new))
            record = self._record(key)
            if "status" in record and record.get("status_key") != items.status_key(record["PK"][len("TASK#"):],
                                                                                    record["status"]):
                self.unkeyed.add(_transition(writer, op))
        return answer

    def _record_key(self, op: dict[str, Any]) -> dict[str, Any] | None:
        key = op.get("Key") or {k: op["Item"][k] for k in ("PK", "SK") if k in op.get("Item", {})}
        if op.get("TableName") != self._table or key.get("SK") != {"S": "RECORD"}:
            return None
        return dict(key)

    def _state(self, key: dict[str, Any]) -> State:
        return lifecycle.state_of(self._record(key) or None)

    def _record(self, key: dict[str, Any]) -> dict[str, Any]:
        """The record as a consistent GetItem answers it (empty if none), read from moto's backend: the watch
        reads each written record three times, and as requests those reads were half of the walk's."""
        from moto.dynamodb.models import dynamodb_backends
        from moto.dynamodb.models.utilities import dynamo_json_dump

        found = dynamodb_backends[ACCOUNT][self._real.meta.region_name].get_item(self._table, key)
        if found is None:
            return {}
        return ddb.deserialize(ddb.binary_as_bytes(json.loads(dynamo_json_dump(found.to_json()))["Attributes"]))


def _writer() -> str:
    """The store method, or the API function, making the write under way (from the call stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        module, name = frame.f_globals.get("__name__"), frame.f_code.co_name
        if (module == "chalicelib.tasks.store" and name in STORE_WRITERS) or (module, name) in API_WRITERS:
            return name
        frame = frame.f_back  # type: ignore[assignment]
    return "a write outside the store"


def _sets(op: dict[str, Any]) -> dict[str, Any]:
    """The attributes a built update sets to a value (``#name = :value``), by name, with their values."""
    names, values = op.get("ExpressionAttributeNames", {}), op.get("ExpressionAttributeValues", {})
    clause = op.get("UpdateExpression", "").partition("SET ")[2].split(" REMOVE ")[0].split(" ADD ")[0]
    found: dict[str, Any] = {}
    for assignment in clause.split(", "):
        left, _, right = assignment.partition(" = ")
        if left in names and right in values:
            found[names[left]] = ddb.deserialize({"v": values[right]})["v"]
    return found


def _transition(writer: str, op: dict[str, Any]) -> str:
    written = _sets(op)
    if writer == "claim" and " ADD " in op.get("UpdateExpression", ""):  # ADD exec_takeovers 1
        return "takeover"
    if writer in ("settle", "settle_once"):  # named by the outcome it writes, not by the state it leads to
        if "next_run_at" in written:
            return writer + "_next"
        return {"DONE": writer + "_done", "FAILED": writer + "_failed", "RETRYING": writer + "_retry"}.get(
            str(written.get("exec_state")), writer)
    if writer == "mark":
        return "mark_" + next(name for name in ("dead_lettered", "alerted") if written.get(name) is True)
    if writer == "note_stream_dead_letter" and written.get("status") != State.DEAD_LETTERED.value:
        return writer + "_kept"  # the note only, on a task running, finished or paused
    return writer


class Walk:
    """Drives one task of another program (``USER#walk`` / ``<name>``) or of the API through the real handlers."""

    def __init__(self, client: Client, aws: Aws, deps: Deps, clock: FakeClock, watch: RecordWrites) -> None:
        self.client, self.aws, self.deps, self.clock, self.watch = client, aws, deps, clock, watch
        self.table = Table(deps)

    def key(self, name: str) -> TaskKey:
        return TaskKey("USER#walk", name)

    def state(self, key: TaskKey) -> State:
        return self.watch._state(ddb.serialize({"PK": f"TASK#{key.task_id}", "SK": "RECORD"}))

    def put(self, key: TaskKey, due: datetime, action: dict[str, Any] | None = None, **extra: Any) -> None:
        self.table.put({"PK": key.pk, "SK": key.sk, "run_at": iso(due), "action": action or EMAIL_ACTION, **extra})

    def post(self, key: TaskKey, verb: str, body: dict[str, Any] | None = None) -> Any:
        """POST /tasks/{id}/<verb> (retry with a body; pause, resume without)."""
        if body is None:
            return self.client.http.post(self.path(key) + "/" + verb)
        return self.client.http.post(self.path(key) + "/" + verb, headers={"Content-Type": "application/json"},
                                     body=json.dumps(body))

    def deliver_sent(self) -> None:
        """Deliver what was sent to the due queue since the last call, each at its time."""
        for body, delay in self.aws.sent(self.deps.settings.due_queue):  # (it empties the queue)
            message = DueMessage.from_json(body)
            self.clock.now = max(self.clock.now, message.runs_at, self.clock.now + timedelta(seconds=delay))
            assert deliver(self.client, body) == set()

    def run(self, key: TaskKey, due: datetime) -> None:
        """Deliver the due message of ``due`` at that time."""
        self.clock.now = max(self.clock.now, due)
        assert deliver(self.client, due_body(key, due)) == set()

    def claim(self, key: TaskKey, due: datetime) -> None:
        """A worker claims ``due`` and dies (its claim stays RUNNING)."""
        store = TaskStore(self.deps)
        assert store.claim(key, due, self.clock.now, self.deps.settings.task_claim_lease_seconds, "dead-worker").won

    def due_dead_letter(self, key: TaskKey, due: datetime) -> None:
        body = DueMessage(key, due).to_json()
        record = events.sqs_record(body, self.aws.settings.due_dlq, f"dlq-{key.sk}", receive_count=MAX_RECEIVE_COUNT + 1)
        response = self.client.lambda_.invoke("due_dead_letter", events.sqs_event(record))
        assert events.batch_item_failures(response.payload) == set()

    def stream_refused(self, key: TaskKey, due: datetime) -> None:
        """The item written again with an action the stage refuses: the stream dead-letters it and notes it."""
        record = self.table.put({"PK": key.pk, "SK": key.sk, "run_at": iso(due), "action": REFUSED})
        assert stream(self.client, record) == []

    def user_deletes(self, key: TaskKey) -> None:
        """A user deletes the item: the stream records the task CANCELLED by its item (``cancel_by_item``)."""
        assert stream(self.client, self.table.delete(key)) == []

    def path(self, key: TaskKey) -> str:
        return "/tasks/" + quote(key.task_id, safe="")


def test_every_declared_transition_is_walked_and_the_code_makes_no_other(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    watch = RecordWrites(deps.clients.dynamodb, deps.settings.state_table)
    use_client(deps, "dynamodb", watch)
    walk = Walk(client, aws, deps, clock, watch)
    due = clock.now + timedelta(minutes=2)
    later = due + timedelta(hours=1)

    # The API's task: create, claim, settle_done; a recurring one: settle_next; cancel and reschedule.
    assert post_task(client, {"id": "once", "run_at": iso(due), "action": EMAIL_ACTION}).status_code == 201
    assert post_task(client, {"id": "daily", "run_at": iso(due), "action": EMAIL_ACTION,
                              "recurrence": "rate(1 day)"}).status_code == 201
    assert post_task(client, {"id": "moved", "run_at": iso(later), "action": EMAIL_ACTION}).status_code == 201
    assert post_task(client, {"id": "dropped", "run_at": iso(later), "action": EMAIL_ACTION}).status_code == 201
    assert patch_task(client, "moved", {"run_at": iso(later + timedelta(hours=1))}).status_code == 200
    assert client.http.delete("/tasks/dropped").status_code == 200
    walk.due_dead_letter(TaskKey.for_id("moved"), later + timedelta(hours=1))  # note_dead_letter on PENDING
    walk.run(TaskKey.for_id("once"), due)
    walk.run(TaskKey.for_id("daily"), due)

    # Failed: settle_failed, then mark_dead_lettered and mark_alerted; the stream's note on FAILED.
    failing = walk.key("failing")
    walk.put(failing, due)
    ses = deps.clients.ses
    use_client(deps, "ses", FlakySes(ses, failures=99))
    walk.run(failing, due)
    assert walk.state(failing) is State.FAILED
    use_client(deps, "ses", ses)
    walk.stream_refused(failing, later)
    walk.stream_refused(TaskKey.for_id("once"), later)  # and on DONE

    # Another program's tasks: claim from every state, takeover, cancel, reschedule and notes from none.
    fresh = walk.key("fresh")  # none -> claim -> RUNNING -> settle_done -> DONE -> claim (written again)
    walk.put(fresh, due)
    walk.run(fresh, due)
    walk.put(fresh, later)
    walk.run(fresh, later)
    walk.put(failing, later)  # FAILED -> claim
    walk.run(failing, later)
    dropped = walk.key("dropped")  # none -> cancel -> CANCELLED -> (the stream's note) -> claim (written again)
    walk.put(dropped, clock.now + timedelta(hours=1))
    assert client.http.delete(walk.path(dropped)).status_code == 200
    walk.stream_refused(dropped, clock.now + timedelta(hours=2))
    walk.put(dropped, clock.now + timedelta(hours=2))
    walk.run(dropped, clock.now + timedelta(hours=2))

    # A user deletes a source item: cancel_by_item from none and PENDING, and again from CANCELLED (by an item)
    # when it is written again and deleted again; written again once more, it is claimed and runs, once.
    at = clock.now + timedelta(hours=1)
    for name in ("deleted-none", "deleted-pending"):
        walk.put(walk.key(name), at)
    assert patch_task(client, quote(walk.key("deleted-pending").task_id, safe=""),  # a record, PENDING
                      {"run_at": iso(at)}).status_code == 200
    for name in ("deleted-none", "deleted-pending"):
        walk.user_deletes(walk.key(name))
        assert walk.state(walk.key(name)) is State.CANCELLED
    deleted = walk.key("deleted-none")
    walk.put(deleted, at)
    walk.user_deletes(deleted)  # CANCELLED -> CANCELLED
    walk.put(deleted, at)
    walk.run(deleted, at)  # CANCELLED -> claim -> RUNNING -> settle_done
    assert walk.state(deleted) is State.DONE
    running = walk.key("deleted-running")  # a user's delete of a RUNNING task writes nothing: its claim settles
    walk.put(running, at + timedelta(minutes=1))
    walk.claim(running, at + timedelta(minutes=1))
    walk.user_deletes(running)
    assert walk.state(running) is State.RUNNING

    moved = walk.key("moved")  # none -> reschedule
    walk.put(moved, clock.now + timedelta(hours=1))
    assert patch_task(client, quote(moved.task_id, safe=""), {"run_at": iso(clock.now + timedelta(hours=2))}).status_code == 200
    noted = walk.key("noted")  # none -> note_dead_letter
    walk.put(noted, clock.now + timedelta(hours=1))
    walk.due_dead_letter(noted, clock.now + timedelta(hours=1))

    stuck = walk.key("stuck")  # RUNNING: takeover; a later due time claimed over a dead worker's
    at = clock.now + timedelta(minutes=1)
    walk.put(stuck, at)
    walk.claim(stuck, at)
    clock.now = at + timedelta(seconds=deps.settings.task_claim_lease_seconds + 1)
    walk.run(stuck, at)
    walk.claim(stuck, clock.now)  # dead again, then the item moves on: claim RUNNING -> RUNNING
    walk.put(stuck, clock.now + timedelta(minutes=1))
    walk.run(stuck, clock.now + timedelta(minutes=1))

    for name, change in (("stuck-moved", "reschedule"), ("stuck-dropped", "cancel")):
        key = walk.key(name)  # RUNNING, its due message dead-lettered: note_dead_letter, then the API's change
        at = clock.now + timedelta(minutes=1)
        walk.put(key, at)
        walk.claim(key, at)
        walk.due_dead_letter(key, at)
        assert walk.state(key) is State.DEAD_LETTERED
        if change == "cancel":
            assert client.http.delete(walk.path(key)).status_code == 200
        else:
            assert patch_task(client, quote(key.task_id, safe=""), {"run_at": iso(at + timedelta(hours=1))}).status_code == 200
        assert walk.state(key) is (State.CANCELLED if change == "cancel" else State.PENDING)

    # The stream's note from none, PENDING and RUNNING (DONE, FAILED and CANCELLED above).
    at = clock.now + timedelta(hours=1)
    for name in ("streamed-none", "streamed-pending", "streamed-running", "streamed-dead"):
        walk.put(walk.key(name), at)
    assert patch_task(client, quote(walk.key("streamed-pending").task_id, safe=""), {"run_at": iso(at)}).status_code == 200
    walk.due_dead_letter(walk.key("streamed-dead"), at)
    walk.claim(walk.key("streamed-running"), at)
    for name, state in (("streamed-none", State.DEAD_LETTERED), ("streamed-pending", State.DEAD_LETTERED),
                        ("streamed-running", State.RUNNING), ("streamed-dead", State.DEAD_LETTERED)):
        walk.stream_refused(walk.key(name), at + timedelta(days=1))
        assert walk.state(walk.key(name)) is state

    _walk_retries_and_pauses(walk)
    _walk_unclaimed_settles(walk)
    _walk_callbacks(walk)

    assert watch.seen - lifecycle.edges() == set(), "writes the diagram lacks"
    assert watch.unkeyed == set(), "writes of a status without its status index key"
    assert lifecycle.edges() - watch.seen == set(), "declared transitions not walked"


def _walk_retries_and_pauses(walk: Walk) -> None:
    """settle_retry, redrive, the settles and takeover of a DEAD_LETTERED claim, claim from DEAD_LETTERED, pause,
    resume, and the notes and cancel of a PAUSED task."""
    client, deps, clock = walk.client, walk.deps, walk.clock
    store, lease = TaskStore(deps), deps.settings.task_claim_lease_seconds
    ses = deps.clients.ses
    walk.aws.sent(deps.settings.due_queue)  # what earlier steps left there is not delivered here

    # settle_retry (RUNNING -> PENDING): after 15 s of backoff in the delivery, the fifth failure waits 16 s.
    retrying = walk.key("retrying")
    at = clock.now + timedelta(minutes=1)
    walk.put(retrying, at, retry={"max_attempts": 10})
    use_client(deps, "ses", FlakySes(ses, failures=5))
    walk.run(retrying, at)
    assert walk.state(retrying) is State.PENDING
    use_client(deps, "ses", ses)
    walk.deliver_sent()  # the retry: claim (PENDING -> RUNNING), settle_done
    assert walk.state(retrying) is State.DONE

    # redrive from FAILED and from DEAD_LETTERED; each retry then runs.
    failed, dead = walk.key("redriven-failed"), walk.key("redriven-dead")
    at = clock.now + timedelta(minutes=1)
    walk.put(failed, at)
    walk.put(dead, at)
    use_client(deps, "ses", FlakySes(ses, failures=99))
    walk.run(failed, at)
    use_client(deps, "ses", ses)
    walk.due_dead_letter(dead, at)
    for key in (failed, dead):
        assert walk.post(key, "retry", {"retry_id": "r1"}).status_code == 202
        assert walk.state(key) is State.PENDING
    walk.deliver_sent()
    assert (walk.state(failed), walk.state(dead)) == (State.DONE, State.DONE)

    # claim from DEAD_LETTERED (another copy of the message); the settles and a takeover of the claim a
    # dead-lettered message left RUNNING.
    copied = walk.key("dead-copied")
    at = clock.now + timedelta(minutes=1)
    walk.put(copied, at)
    walk.due_dead_letter(copied, at)
    walk.run(copied, at)
    outcomes = {"dead-done": Outcome(State.DONE, 1, {}), "dead-failed": Outcome(State.FAILED, 1, None, "e"),
                "dead-retry": Outcome(State.PENDING, 1, None, "e", retry_at=at + timedelta(hours=1)),
                "dead-next": Outcome(State.DONE, 1, {})}
    at = clock.now + timedelta(minutes=1)
    for name, outcome in outcomes.items():
        key = walk.key(name)
        walk.put(key, at)
        walk.claim(key, at)
        walk.due_dead_letter(key, at)
        assert walk.state(key) is State.DEAD_LETTERED
        assert store.settle(key, at, "dead-worker", outcome, clock.now,
                            at + timedelta(days=1) if name == "dead-next" else None)
    taken = walk.key("dead-taken")
    walk.put(taken, at)
    walk.claim(taken, at)
    walk.due_dead_letter(taken, at)
    clock.now = at + timedelta(seconds=lease + 1)
    walk.run(taken, at)  # a copy of its message takes the claim over (DEAD_LETTERED -> RUNNING) and settles it
    assert walk.state(taken) is State.DONE

    # pause from none and PENDING; the stream's note and a cancel of a PAUSED task; resume.
    at = clock.now + timedelta(hours=1)
    paused = walk.key("paused")
    walk.put(paused, at, recurrence="rate(1 day)")
    assert walk.post(paused, "pause").status_code == 200  # none -> PAUSED
    assert walk.post(paused, "resume").status_code == 200  # PAUSED -> PENDING
    assert walk.post(paused, "pause").status_code == 200  # PENDING -> PAUSED
    walk.stream_refused(paused, at + timedelta(days=1))  # PAUSED -> PAUSED
    assert client.http.delete(walk.path(paused)).status_code == 200  # PAUSED -> CANCELLED


def test_a_worker_that_outlived_its_dead_lettered_message_does_not_settle_over_a_cancel_or_a_reschedule(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock) -> None:
    """A claim left RUNNING by a dead-lettered due message may be cancelled or rescheduled; a worker still running
    that claim then finds its settle refused (RUNNING is the only state a settle leaves)."""
    walk = Walk(client, aws, deps, clock, RecordWrites(deps.clients.dynamodb, deps.settings.state_table))
    store = TaskStore(deps)
    done = Outcome(State.DONE, 1, {"type": "email"})
    for name, change in (("slow-dropped", "cancel"), ("slow-moved", "reschedule")):
        key, at = walk.key(name), clock.now + timedelta(minutes=1)
        walk.put(key, at)
        assert store.claim(key, at, clock.now, deps.settings.task_claim_lease_seconds, "slow-worker").won
        walk.due_dead_letter(key, at)
        if change == "cancel":
            assert client.http.delete(walk.path(key)).status_code == 200
        else:
            assert patch_task(client, quote(key.task_id, safe=""), {"run_at": iso(at + timedelta(hours=1))}).status_code == 200
        before = walk.state(key)
        assert store.settle(key, at, "slow-worker", done, clock.now, None) is False
        assert walk.state(key) is before


def _walk_unclaimed_settles(walk: Walk) -> None:
    """settle_once_done, _retry and _failed (a one-time task whose action's target drops a repeat: one write, no
    claim) from every state a claim leaves: once through the executor with a Standard state machine, then by the
    store from each state."""
    client, deps, clock, aws = walk.client, walk.deps, walk.clock, walk.aws
    role = aws.clients.session.client("iam", region_name=aws.settings.region).create_role(
        RoleName="walk", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    machine = aws.clients.stepfunctions.create_state_machine(
        name="walk", roleArn=role, type="STANDARD",
        definition=json.dumps({"StartAt": "Go", "States": {"Go": {"Type": "Pass", "End": True}}}))["stateMachineArn"]
    use_settings(deps, task_action_target_arns=(*deps.settings.task_action_target_arns, machine))
    once = {"type": "stepfunctions", "state_machine_arn": machine, "input": {}, "target_deduplicates": True}
    at = clock.now + timedelta(minutes=1)
    ran = walk.key("once-run")
    walk.put(ran, at, action=once)
    walk.run(ran, at)  # none -> settle_once_done, by the executor
    assert walk.state(ran) is State.DONE

    store, lease = TaskStore(deps), deps.settings.task_claim_lease_seconds
    before, at = clock.now + timedelta(minutes=1), clock.now + timedelta(minutes=2)
    outcomes = {"done": Outcome(State.DONE, 1, {}), "failed": Outcome(State.FAILED, 1, None, "e"),
                "retry": Outcome(State.PENDING, 1, None, "e", retry_at=at + timedelta(hours=1))}
    for name, outcome in outcomes.items():
        for state in (State.NONE, State.PENDING, State.RUNNING, State.DONE, State.FAILED, State.CANCELLED,
                      State.DEAD_LETTERED):
            key = walk.key(f"once-{name}-{state.value}")
            walk.put(key, before if state is State.PENDING else at, action=once)
            if state is State.PENDING:  # a record: the API's PATCH of another program's task, to this due time
                assert patch_task(client, quote(key.task_id, safe=""), {"run_at": iso(at)}).status_code == 200
            elif state in (State.RUNNING, State.DONE, State.FAILED):  # an earlier due time's claim, settled or not
                walk.claim(key, before)
                if state is not State.RUNNING:
                    settled = Outcome(State.DONE if state is State.DONE else State.FAILED, 1, {})
                    assert store.settle(key, before, "dead-worker", settled, clock.now, None)
            elif state is State.CANCELLED:  # deleted by a user, written again with the same due time
                walk.user_deletes(key)
                walk.put(key, at, action=once)
            elif state is State.DEAD_LETTERED:  # the handler's own write (walked through the handler above)
                store.note_dead_letter(key, at, {"run_at": iso(at), "reason": "walk", "claim": "none"})
            assert walk.state(key) is state, (name, state)
            assert store.settle_once(key, at, "worker", outcome, clock.now, lease).won, (name, state)
            assert (record_of(deps, key) or {}).get("run_at") == iso(at), (name, state)  # as a claim would write


def _walk_callbacks(walk: Walk) -> None:
    """mark_callback: after a one-time task's DONE, a recurring one's occurrence (PENDING) and a FAILED one (its
    on_failure failing too: noted all the same)."""
    client, deps, clock = walk.client, walk.deps, walk.clock
    at = clock.now + timedelta(minutes=1)
    for task_id, extra in (("called-once", {"on_success": EMAIL_ACTION}),
                           ("called-daily", {"on_success": EMAIL_ACTION, "recurrence": "rate(1 day)"})):
        assert post_task(client, {"id": task_id, "run_at": iso(at), "action": EMAIL_ACTION, **extra}).status_code == 201
        walk.run(TaskKey.for_id(task_id), at)
        assert (record_of(deps, TaskKey.for_id(task_id)) or {})["callback"]["status"] == "DONE"
    failing = walk.key("called-failing")
    walk.put(failing, at, on_failure=EMAIL_ACTION)
    ses = deps.clients.ses
    use_client(deps, "ses", FlakySes(ses, failures=99))
    walk.run(failing, at)
    use_client(deps, "ses", ses)
    assert walk.state(failing) is State.FAILED
