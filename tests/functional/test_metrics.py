"""The metrics the handlers emit (EMF, flushed once per invocation; TaskLateness and TasksExecuted on the
executor's line, read by the deploy's metric filters: tests/metric_filters.py) and the context their log lines
carry."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.backups import monitor
from chalicelib.log import logger
from chalicelib.metrics import LINE_METRICS, Metrics
from chalicelib.tasks.model import DueMessage, TaskKey, parse_due
from tests import events, metric_filters
from tests.faults import Faults
from tests.fixtures import Aws, Emitted, FakeClock, use_settings
from tests.functional.backup_support import create_tables, monitor_messages, moto_backups, our_backup
from tests.functional.stream_support import Table, stream
from tests.functional.task_support import (
    FlakySes,
    deliver,
    due_body,
    lazy_seed_item,
    post_task,
    put_item,
    seed_item,
    use_client,
)

SEED_KEY = TaskKey("USER#ada", "REMINDER#standup")
DUE = "2026-11-22T12:03:00"


def arrange_seed(deps: Deps, due: str = DUE, **extra: Any) -> datetime:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    put_item(deps, seed_item(due, **extra))
    return parse_due(due)


# --- the executor ---------------------------------------------------------------------------------------------

def test_an_executed_task_counts_once_by_strategy_with_its_lateness_in_milliseconds(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    due = arrange_seed(deps, strategy="interval")
    clock.now = due + timedelta(seconds=12.5)
    deliver(client, due_body(SEED_KEY, due))
    deliver(client, due_body(SEED_KEY, due))  # a duplicate: settled already, not executed again
    assert emitted.total("TasksExecuted", Strategy="interval") == 1
    assert emitted.values("TaskLateness", Strategy="interval") == [12500.0]
    assert emitted.total("TasksFailed", Strategy="interval") == 0
    assert emitted.values("TasksExecuted", Strategy="exact") == []


def test_the_emitted_documents_are_cloudwatch_emf_in_the_timekeeper_namespace_with_the_stage_and_no_line_metric(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    deliver(client, due_body(SEED_KEY, due))
    [document] = emitted.documents()
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Timekeeper"
    assert directive["Dimensions"] == [["Stage", "Strategy"]]
    assert (document["Stage"], document["Strategy"]) == (deps.settings.stage, "exact")
    # TaskLateness and TasksExecuted are the metric filters' (from the line's fields): never EMF as well
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
        "TasksFailed": "Count", "TasksRetried": "Count", "TasksDeadLettered": "Count"}
    assert isinstance(document["_aws"]["Timestamp"], int)
    assert document["function_request_id"]  # the execution's log line rides on it, naming the invocation
    assert (document["TasksExecuted"], document["outcome"]) == (1, "failed")


def test_retries_failures_and_the_dead_letter_count_by_strategy(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    deliver(client, due_body(SEED_KEY, due))
    assert emitted.total("TasksExecuted", Strategy="exact") == 1
    assert emitted.total("TasksFailed", Strategy="exact") == 1
    assert emitted.total("TasksRetried", Strategy="exact") == deps.settings.task_max_attempts - 1
    assert emitted.total("TasksDeadLettered", Strategy="exact") == 1


def test_a_task_that_succeeds_on_its_third_attempt_counts_two_retries_and_no_failure(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=2))
    deliver(client, due_body(SEED_KEY, due))
    assert emitted.total("TasksRetried", Strategy="exact") == 2
    assert emitted.total("TasksFailed", Strategy="exact") == 0
    assert emitted.total("TasksExecuted", Strategy="exact") == 1


def test_a_rescheduled_tasks_old_message_counts_as_skipped_rescheduled(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    old = arrange_seed(deps, strategy="interval")
    put_item(deps, seed_item("2026-11-22T13:00:00", strategy="interval"))
    clock.advance(minutes=3)
    deliver(client, due_body(SEED_KEY, old))
    assert emitted.total("TasksSkippedRescheduled", Strategy="interval") == 1
    assert emitted.values("TasksExecuted", Strategy="interval") == []


def test_a_cancelled_api_tasks_message_counts_as_skipped_cancelled(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    due = clock.now + timedelta(minutes=5)
    created = post_task(client, {"run_at": due.isoformat(), "strategy": "exact",
                                 "action": {"type": "email", "to": "ada@example.com", "subject": "Hi", "body": "Hello"}})
    assert created.status_code == 201, created.body
    task_id = json.loads(created.body)["id"]
    assert client.http.delete(f"/tasks/{task_id}").status_code == 200
    clock.now = due
    deliver(client, due_body(TaskKey.for_id(task_id), due))
    # The item is gone, and the message does not name its strategy.
    assert emitted.total("TasksSkippedCancelled", Strategy="unknown") == 1
    assert emitted.values("TasksExecuted", Strategy="exact") == []


def test_a_lazy_task_counts_under_the_lazy_strategy(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    expires = int(clock.now.timestamp()) + 180
    clock.advance(minutes=5)
    key = TaskKey("grace@example.com", "reminder")
    deliver(client, due_body(key, datetime.fromtimestamp(expires, clock.now.tzinfo), lazy_seed_item(expires)))
    assert emitted.total("TasksExecuted", Strategy="lazy") == 1
    assert emitted.values("TaskLateness", Strategy="lazy") == [120000.0]


def test_unreadable_messages_count_as_dead_lettered_of_unknown_strategy(
        client: Client, deps: Deps, emitted: Emitted) -> None:
    deliver(client, "not json", '{"pk": "x"}')
    assert emitted.total("TasksDeadLettered", Strategy="unknown") == 2


def test_a_batch_of_tasks_counts_each_execution_by_strategy_from_its_line_and_writes_no_emf(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    bodies = []
    for i, strategy in enumerate(["exact", "interval", "exact", "interval", "exact"]):
        key = TaskKey("USER#ada", f"REMINDER#{i}")
        put_item(deps, {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": DUE, "email": "ada@example.com",
                        "strategy": strategy})
        bodies.append(due_body(key, parse_due(DUE)))
    clock.now = parse_due(DUE) + timedelta(seconds=1)
    deliver(client, *bodies)
    assert emitted.documents() == []  # the executions' metrics are on their lines: no EMF document of them
    assert emitted.total("TasksExecuted", Strategy="exact") == 3
    assert emitted.values("TaskLateness", Strategy="exact") == [1000.0] * 3
    assert emitted.total("TasksExecuted", Strategy="interval") == 2
    assert deps.metrics.pending() == {}  # nothing left for the next invocation to emit again


# --- the stream scheduler --------------------------------------------------------------------------------------

def test_a_stream_record_dead_lettered_counts_under_the_strategy_its_item_names(
        client: Client, deps: Deps, clock: FakeClock, emitted: Emitted) -> None:
    table = Table(deps)
    bad = table.put({"PK": "USER#ada", "SK": "REMINDER#1", "run_at": "tomorrow", "strategy": "exact",
                     "email": "ada@example.com"})
    nameless = table.put({"PK": "USER#ada", "SK": "REMINDER#2", "run_at": "soon", "email": "ada@example.com"})
    assert stream(client, bad, nameless) == []
    assert emitted.total("TasksDeadLettered", Strategy="exact") == 1
    assert emitted.total("TasksDeadLettered", Strategy="unknown") == 1


# --- backups ---------------------------------------------------------------------------------------------------

def test_a_backup_run_emits_its_start_by_trigger_and_its_outcome_and_duration_on_completion(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, emitted: Emitted) -> None:
    create_tables(deps, ["orders", "users"])
    use_settings(deps, backup_tables=("orders", "users"))
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    assert emitted.total("BackupRunsStarted", Trigger="schedule") == 1
    for days in (5, 6, 7):
        our_backup(deps, "orders", clock.now - timedelta(days=days))
    (body, _), = monitor_messages(aws, deps)
    clock.advance(minutes=5)
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, deps.settings.backup_monitor_queue, "m-1")))
    assert emitted.total("BackupRunsCompleted") == 1
    assert emitted.total("BackupTablesBackedUp") == 2
    assert emitted.total("BackupTablesFailed") == 0
    assert emitted.total("BackupTablesStuck") == 0
    assert emitted.total("BackupsDeleted") == 2
    assert emitted.values("BackupRunDuration") == [pytest.approx(300, abs=1)]  # the clock moves as calls are paced
    assert emitted.values("BackupRunsOverdue") == []


def test_a_run_polled_past_its_deadline_counts_overdue_and_its_stuck_backups(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, emitted: Emitted) -> None:
    create_tables(deps, ["orders"])
    use_settings(deps, backup_tables=("orders",))
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    for backup in moto_backups(deps).values():
        backup.status = "CREATING"
    (body, _), = monitor_messages(aws, deps)
    run_id = json.loads(body)["run_id"]
    from chalicelib.backups.store import RunStore
    run = RunStore(deps).get(run_id)
    assert run is not None
    clock.now = monitor.run_deadline(deps, run) + timedelta(seconds=1)
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, deps.settings.backup_monitor_queue, "m-1")))
    assert emitted.total("BackupRunsOverdue") == 1
    assert emitted.total("BackupTablesStuck") == 1
    assert emitted.total("BackupRunsCompleted") == 1


@pytest.fixture
def log_out(deps: Deps) -> Iterator[io.StringIO]:
    """What a function writes to stdout, as Lambda's log agent reads it: the app's log lines as the handler emits
    them (Powertools' JSON, with the keys appended then) and the EMF documents of its metrics."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logger.registered_formatter)
    logging.getLogger(logger.name).addHandler(handler)
    emit = deps.metrics.emit

    def to_stdout(line: str) -> None:
        emit(line)
        out.write(line + "\n")

    deps.metrics.emit = to_stdout
    yield out
    logging.getLogger(logger.name).removeHandler(handler)


# --- never the handler's problem -------------------------------------------------------------------------------

def test_a_failure_to_emit_metrics_is_logged_and_the_handler_still_succeeds(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    def broken(line: str) -> None:
        raise OSError("stdout is closed")

    deps.metrics = Metrics(emit=broken, stage=deps.settings.stage)
    due = arrange_seed(deps, strategy="exact")
    clock.now = due
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))  # TasksFailed: an EMF document to write
    assert deliver(client, due_body(SEED_KEY, due), ids=["m-1"]) == set()
    lines = _log_lines(_read(log_out))
    assert any(line["message"] == "metrics could not be emitted" for line in lines)
    assert deps.metrics.pending() == {}
    [handled] = [line for line in lines if line["message"] == "due message handled"]  # written alone then
    assert (handled["outcome"], handled["task_id"], handled["TasksExecuted"]) == ("failed", SEED_KEY.task_id, 1)


# --- log context -----------------------------------------------------------------------------------------------

def _read(out: io.StringIO) -> str:
    """What was logged since the last read."""
    text = out.getvalue()
    out.seek(0)
    out.truncate()
    return text


def _log_lines(out: str) -> list[dict[str, Any]]:
    lines = []
    for text in out.splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and "level" in line and "message" in line:
            lines.append(line)
    return lines


def _three_reminders(deps: Deps) -> list[TaskKey]:
    """Three reminders of one user, due at DUE (a table of the user's own shape)."""
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    keys = [TaskKey("USER#ada", f"REMINDER#{i}") for i in range(3)]
    for key in keys:
        put_item(deps, {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": DUE, "email": "ada@example.com"})
    return keys


def test_every_executor_log_line_carries_the_request_id_and_its_task(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    keys = _three_reminders(deps)
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=1))  # a warning line too
    clock.now = parse_due(DUE)
    _read(log_out)
    deliver(client, *[due_body(key, parse_due(DUE)) for key in keys])
    lines = _log_lines(_read(log_out))
    assert len(lines) >= 4
    assert not [line for line in lines if "function_name" in line]  # its log group names the function
    request_ids = {line.get("function_request_id") for line in lines}
    assert len(request_ids) == 1 and None not in request_ids
    assert {line.get("task_id") for line in lines} == {key.task_id for key in keys}
    deliver(client, due_body(keys[0], parse_due(DUE)))  # the next invocation has its own request id
    later = _log_lines(_read(log_out))
    assert later and {line.get("function_request_id") for line in later}.isdisjoint(request_ids)


def test_an_execution_logs_one_short_info_line_with_its_outcome_and_metrics_and_an_early_message_none(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due - timedelta(seconds=60)  # a schedule fired SCHEDULE_LEAD_SECONDS early: sent back
    _read(log_out)
    deliver(client, due_body(SEED_KEY, due))
    assert _log_lines(_read(log_out)) == []
    clock.now = due + timedelta(seconds=0.25)
    deliver(client, due_body(SEED_KEY, due))
    [written] = _read(log_out).splitlines()  # the execution's line and its metrics: one JSON line
    line = json.loads(written)
    assert (line["level"], line["message"], line["outcome"], line["task_id"]) == (
        "INFO", "due message handled", "done", SEED_KEY.task_id)
    assert line["function_request_id"]
    dimensions = {"Stage": deps.settings.stage, "Strategy": "exact"}
    assert _filtered([written]) == {"TaskLateness": [(250.0, dimensions)], "TasksExecuted": [(1.0, dimensions)]}
    # no EMF document, source location, service, message id, Powertools timestamp (CloudWatch Logs stamps each
    # line) nor a second request id: each byte is billed
    assert set(line) == {"level", "message", "function_request_id", "task_id", "outcome",
                         "Stage", "Strategy", "TaskLateness", "TasksExecuted"}
    at_prod = len(written.encode()) + 1 - len(line["Stage"]) + len("prod")  # at a stage named prod
    assert at_prod <= LONE_EXECUTION_BYTES, at_prod


def test_a_sleep_that_wakes_a_microsecond_early_still_gives_a_lateness_the_filter_reads_as_0(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    """The filter reads TaskLateness from 0 (percentiles need no negative value): a wait that ends a hair before
    the due time (a sleep's rounding) is 0 ms late, not a point lost."""
    due = arrange_seed(deps, strategy="exact")
    clock.now = due - timedelta(seconds=0.5)  # under a second ahead: waited out
    sleep = deps.sleep
    deps.sleep = lambda seconds: clock.advance(seconds=max(0.0, seconds - 0.000001))
    try:
        _read(log_out)
        deliver(client, due_body(SEED_KEY, due))
    finally:
        deps.sleep = sleep
    dimensions = {"Stage": deps.settings.stage, "Strategy": "exact"}
    assert _filtered(_read(log_out).splitlines()) == {
        "TaskLateness": [(0.0, dimensions)], "TasksExecuted": [(1.0, dimensions)]}


def test_in_a_batch_every_execution_line_carries_its_own_metrics_and_no_emf_document_is_written(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    keys = _three_reminders(deps)
    clock.now = parse_due(DUE) + timedelta(seconds=0.5)
    _read(log_out)
    deliver(client, *[due_body(key, parse_due(DUE)) for key in keys])
    out = _read(log_out).splitlines()
    written = [json.loads(text) for text in out]
    handled = [line for line in written if line.get("message") == "due message handled"]
    assert sorted(line["task_id"] for line in handled) == sorted(key.task_id for key in keys)
    assert all(line["outcome"] == "done" and line["TasksExecuted"] == 1 for line in handled)
    assert not any("_aws" in line for line in written)
    dimensions = {"Stage": deps.settings.stage, "Strategy": "exact"}
    assert _filtered(out) == {"TaskLateness": [(500.0, dimensions)] * 3, "TasksExecuted": [(1.0, dimensions)] * 3}


def test_a_requeued_or_duplicate_delivery_and_a_skip_publish_no_line_metric(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due - timedelta(seconds=60)
    _read(log_out)
    deliver(client, due_body(SEED_KEY, due))  # early: sent back
    clock.now = due
    deliver(client, due_body(SEED_KEY, due))  # executed
    assert [len(v) for v in _filtered(_read(log_out).splitlines()).values()] == [1, 1]
    deliver(client, due_body(SEED_KEY, due))  # a duplicate: skipped, settled already
    deliver(client, due_body(SEED_KEY, due - timedelta(minutes=1)))  # a message of another time: rescheduled
    lines = _read(log_out).splitlines()
    assert [line["outcome"] for line in _log_lines("\n".join(lines))] == ["skipped: done", "skipped: rescheduled"]
    assert _filtered(lines) == {"TaskLateness": [], "TasksExecuted": []}


def test_an_execution_retried_later_counts_its_lateness_once_and_its_execution_when_it_settles(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    due = clock.now + timedelta(minutes=5)
    created = post_task(client, {"run_at": due.isoformat(), "retry": {"max_attempts": 10}, "action": {
        "type": "email", "to": "ada@example.com", "subject": "Hi", "body": "Hello"}})
    key = TaskKey.for_id(json.loads(created.body)["id"])
    aws.sent(deps.settings.due_queue)
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=5))
    clock.now = due
    _read(log_out)
    deliver(client, due_body(key, due))
    first = _read(log_out).splitlines()
    assert [line["outcome"] for line in _log_lines("\n".join(first)) if "outcome" in line] == ["retry later"]
    dimensions = {"Stage": deps.settings.stage, "Strategy": "exact"}
    assert _filtered(first) == {"TaskLateness": [(0.0, dimensions)], "TasksExecuted": []}  # the action started
    [(again, _)] = aws.sent(deps.settings.due_queue)
    clock.now = DueMessage.from_json(again).runs_at
    deliver(client, again)
    second = _read(log_out).splitlines()
    assert [line["outcome"] for line in _log_lines("\n".join(second)) if "outcome" in line] == ["done"]
    assert _filtered(second) == {"TaskLateness": [], "TasksExecuted": [(1.0, dimensions)]}


def test_an_execution_whose_follow_ups_failed_counts_on_its_error_line_and_its_redelivery_that_finishes_them_not(
        client: Client, aws: Aws, deps: Deps, clock: FakeClock, faults: Faults, log_out: io.StringIO) -> None:
    due = arrange_seed(deps, strategy="exact")
    clock.now = due
    use_client(deps, "ses", FlakySes(deps.clients.ses, failures=99))
    task_dlq = aws.queue_url(deps.settings.task_dlq)
    faults.inject("sqs.SendMessage", "error", match=lambda params: params["QueueUrl"] == task_dlq)
    _read(log_out)
    assert deliver(client, due_body(SEED_KEY, due), ids=["m-1"]) == {"m-1"}  # settled FAILED, not dead-lettered
    dimensions = {"Stage": deps.settings.stage, "Strategy": "exact"}
    assert _filtered(_read(log_out).splitlines()) == {
        "TaskLateness": [(0.0, dimensions)], "TasksExecuted": [(1.0, dimensions)]}
    deliver(client, due_body(SEED_KEY, due))
    lines = _read(log_out).splitlines()
    assert "finished: failed" in [line.get("outcome") for line in _log_lines("\n".join(lines))]
    assert _filtered(lines) == {"TaskLateness": [], "TasksExecuted": []}


#: A lone execution's one line at INFO, its metrics' fields included, at a stage named ``prod`` (docs/operations.md).
LONE_EXECUTION_BYTES = 240


def _filtered(lines: list[str]) -> dict[str, list[tuple[float, dict[str, str]]]]:
    """What the deploy's metric filters (chalicelib/metrics.py LINE_METRICS) publish from ``lines``, by metric."""
    events = metric_filters.parsed(lines)
    return {metric.name: metric_filters.line_metric_values(metric.name, events) for metric in LINE_METRICS}


def test_every_backup_log_line_carries_the_request_id_and_its_run(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, log_out: io.StringIO) -> None:
    create_tables(deps, ["orders", "users"])
    use_settings(deps, backup_tables=("orders", "users"))
    _read(log_out)
    client.lambda_.invoke("backup_trigger", events.scheduled_event(clock.now))
    (body, _), = monitor_messages(aws, deps)
    run_id = json.loads(body)["run_id"]
    clock.advance(minutes=5)
    client.lambda_.invoke("backup_monitor", events.sqs_event(
        events.sqs_record(body, deps.settings.backup_monitor_queue, "m-1")))
    lines = _log_lines(_read(log_out))
    assert all(line.get("function_request_id") for line in lines)
    assert {line.get("run_id") for line in lines} == {run_id}


def test_every_stream_log_line_carries_the_request_id_and_its_task(
        client: Client, deps: Deps, log_out: io.StringIO) -> None:
    table = Table(deps)
    bad = table.put({"PK": "USER#ada", "SK": "REMINDER#1", "run_at": "tomorrow", "email": "ada@example.com"})
    _read(log_out)
    stream(client, bad)
    lines = _log_lines(_read(log_out))
    per_task = [line for line in lines if line["message"] == "dead-lettered"]
    assert per_task and all(line.get("task_id") == "USER#ada|REMINDER#1" for line in per_task)
    assert all(line.get("function_request_id") for line in lines)


def test_an_api_routes_log_lines_carry_the_request_id_and_the_task(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    due = clock.now + timedelta(minutes=5)
    created = post_task(client, {"run_at": due.isoformat(), "strategy": "exact",
                                 "action": {"type": "email", "to": "ada@example.com", "subject": "Hi", "body": "Hi"}})
    task_id = json.loads(created.body)["id"]
    client.http.delete(f"/tasks/{task_id}")
    lines = _log_lines(_read(log_out))
    assert [line["message"] for line in lines] == ["task created", "task cancelled"]
    assert all(line.get("task_id") == task_id for line in lines)
    request_ids = [line.get("function_request_id") for line in lines]
    assert all(request_ids) and request_ids[0] != request_ids[1]


def test_a_dead_lettered_due_messages_log_lines_name_its_task(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    due = arrange_seed(deps, strategy="exact")
    record = events.sqs_record(due_body(SEED_KEY, due), deps.settings.due_dlq, "m-9")
    client.lambda_.invoke("due_dead_letter", events.sqs_event(record))
    lines = _log_lines(_read(log_out))
    assert lines and all(line.get("task_id") == SEED_KEY.task_id for line in lines)
    assert all(line.get("function_request_id") for line in lines)


def test_invocations_side_by_side_in_threads_log_each_their_own_request_id(
        client: Client, deps: Deps, log_out: io.StringIO) -> None:
    """The offline runtime invokes handlers in threads at once: each thread's lines carry its own id."""
    import threading

    from chalicelib.invocation import observed

    inside = threading.Barrier(2)

    class Context:
        def __init__(self, request_id: str) -> None:
            self.aws_request_id = request_id
            self.function_name = "test"

    class Event:
        def __init__(self, request_id: str) -> None:
            self.context = Context(request_id)

    def handler(event: Event) -> None:
        inside.wait(timeout=10)  # both invocations are running
        logger.info("inside", extra={"expected": event.context.aws_request_id})
        inside.wait(timeout=10)

    middleware = observed(lambda: deps)
    threads = [threading.Thread(target=middleware, args=(Event(f"req-{i}"), handler)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = [line for line in _log_lines(_read(log_out)) if line["message"] == "inside"]
    assert len(lines) == 2
    assert all(line["function_request_id"] == line["expected"] for line in lines)
    logger.info("after")
    assert "function_request_id" not in _log_lines(_read(log_out))[0]  # removed when each ended


def test_a_handlers_worker_threads_log_its_own_function_while_another_invocation_runs(
        client: Client, deps: Deps, clock: FakeClock, log_out: io.StringIO) -> None:
    """The offline runtime runs handlers side by side in one process: the executor's lines, its worker threads'
    included, carry task_executor while an interval_processor invocation that started after it is running."""
    import threading

    from chalicelib.invocation import observed

    keys = _three_reminders(deps)
    clock.now = parse_due(DUE)
    inside, release = threading.Event(), threading.Event()

    class Context:
        aws_request_id = "interval-request"
        function_name = "interval_processor"

    class Event:
        context = Context()

    def interval_processor(event: Event) -> None:
        inside.set()
        release.wait(timeout=30)

    other = threading.Thread(target=observed(lambda: deps), args=(Event(), interval_processor))

    class SesOnceTheOtherRuns:
        """The executor's SES: its first email waits for the other invocation to be running."""

        def __init__(self, real: Any) -> None:
            self._real = real
            self._lock = threading.Lock()

        def send_email(self, **kwargs: Any) -> Any:
            with self._lock:
                if not other.is_alive() and not inside.is_set():
                    other.start()
                assert inside.wait(timeout=10)
            return self._real.send_email(**kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    use_client(deps, "ses", SesOnceTheOtherRuns(deps.clients.ses))
    _read(log_out)
    try:
        deliver(client, *[due_body(key, parse_due(DUE)) for key in keys])
        executor_lines = _log_lines(_read(log_out))
    finally:
        release.set()
        other.join(timeout=10)
    assert len(executor_lines) >= 3
    assert "interval-request" not in {line.get("function_request_id") for line in executor_lines}, executor_lines
