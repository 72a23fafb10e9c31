"""What `make run` prints for a user: the banner's report of the shell's settings, and an invocation line
that names what the invocation dead-lettered and why."""

from __future__ import annotations

import threading

from chalice.app import Chalice

from chalicelib.auth import PUBLIC_ROUTES
from chalicelib.log import logger
from chalicelib.settings import Settings
from local.invoker import Invoker, Reporter, dead_letter_note
from local.stage import ShellReport, source_lines, token_lines

DUE_REASON = "NewImage is not a valid task: the item has no run_at (due time) (field run_at)"


def test_a_shell_setting_the_stage_sets_is_reported_ignored_and_one_it_does_not_set_is_taken() -> None:
    shell = {"BACKUP_SCHEDULE": "rate(1 hour)", "DUE_ATTRIBUTE": "REMINDER_TIMESTAMP", "STATE_TABLE": "same",
             "API_TOKEN": "secret", "HOME": "/root", "LOCAL_API_PORT": "9000"}
    stage = {"BACKUP_SCHEDULE": "rate(5 minutes)", "STATE_TABLE": "same", "API_TOKEN": "secret"}
    report = ShellReport.of(shell, stage)
    assert report.ignored == {"BACKUP_SCHEDULE": ("rate(1 hour)", "rate(5 minutes)")}
    assert report.taken == {"DUE_ATTRIBUTE": "REMINDER_TIMESTAMP"}


def test_the_banner_says_what_each_task_source_declares_a_line_each() -> None:
    sources = Settings.from_env({"TASK_SOURCES": (
        '{"reminders": {"table": "appointments", "due_attribute": "REMINDER_TIMESTAMP", "recurrence": "rate(1 day)",'
        ' "key": ["PK", "SK"]},'
        ' "sessions": {"table": "sessions", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]},'
        ' "slots": {"table": "slots", "strategy": "interval", "bucket_index": "by-time", "bucket_attribute": "at",'
        ' "key": ["id"]}}')}).task_sources
    assert source_lines(sources) == [
        "    source reminders             table appointments: exact, due REMINDER_TIMESTAMP, every rate(1 day)",
        "    source sessions              table sessions: lazy, TTL expires_at",
        "    source slots                 table slots: interval, bucket at (%Y-%m-%d#%H:%M) on by-time",
    ]
    assert source_lines(()) == []


def invoke_logging(reasons: list[str], *, from_another_thread: bool) -> str:
    app = Chalice(app_name="timekeeper")  # the app's logger is named after it, as chalicelib.log's is
    lines: list[str] = []

    @app.lambda_function(name="task_stream")
    def task_stream(event: dict[str, object], context: object) -> None:
        def log() -> None:
            for reason in reasons:
                logger.error("dead-lettered", extra={"source": "task_stream", "event_id": "e1", "reason": reason})
        if from_another_thread:  # as the stream handler's own worker threads do
            worker = threading.Thread(target=log)
            worker.start()
            worker.join()
        else:
            log()

    invoker = Invoker(app, Reporter(lines.append))
    invoker.reporter.invocation(invoker.invoke("task_stream", "stream", {}, 1))
    [line] = lines
    return line


def test_an_item_dead_lettered_for_a_missing_due_time_says_so_on_its_invocation_line() -> None:
    line = invoke_logging([DUE_REASON], from_another_thread=True)
    assert line.endswith(f"ok; dead-lettered 1: {DUE_REASON} (set DUE_ATTRIBUTE?)"), line


def test_an_invocation_that_dead_lettered_nothing_ends_in_ok() -> None:
    assert invoke_logging([], from_another_thread=False).endswith(" ms  ok")


def test_several_dead_letters_show_the_first_reason_and_count_the_others() -> None:
    line = invoke_logging([DUE_REASON, DUE_REASON, "the record cannot be planned: ValueError: x"],
                          from_another_thread=False)
    assert "dead-lettered 3: " in line and "(set DUE_ATTRIBUTE?) and 1 other reason (see the JSON log)" in line


def test_a_reason_the_user_cannot_fix_gets_no_hint_and_a_long_one_is_cut() -> None:
    assert dead_letter_note(("SendMessage was rejected: x" + "y" * 500,)).endswith("...")
    assert "?" not in dead_letter_note(("the record has no dynamodb.SequenceNumber",))
    assert "TASK_ACTION_TARGET_ARNS?" in dead_letter_note((
        "NewImage is not a valid task: queue not allowed by the stage (TASK_ACTION_TARGET_ARNS): q",))


def test_a_task_sources_dead_letter_is_named_on_its_own_stream_functions_line() -> None:
    """The stream names a task source's dead letters ``task_stream:<name>``; its handler is ``source_<name>``."""
    from chalicelib.tasks.stream import SOURCE
    [source] = Settings.from_env({"TASK_SOURCES": (
        '{"slots": {"table": "slots", "strategy": "interval", "bucket_index": "by-time", "bucket_attribute": "at",'
        ' "key": ["id"]}}')}).task_sources
    app = Chalice(app_name="timekeeper")
    lines: list[str] = []
    reason = "task source 'slots': NewImage is not a valid task: the item has no at (due time) (field at)"

    def handler(event: dict[str, object], context: object) -> None:
        def log() -> None:
            logger.error("dead-lettered", extra={"source": f"{SOURCE}:{source.name}", "event_id": "e1",
                                                 "reason": reason})
        worker = threading.Thread(target=log)  # as the stream handler's own worker threads do
        worker.start()
        worker.join()

    app.lambda_function(name=source.function_name)(handler)
    invoker = Invoker(app, Reporter(lines.append))
    invoker.reporter.invocation(invoker.invoke(source.function_name, "stream", {}, 1))
    [line] = lines
    assert f"  {source.function_name} " in line, line
    # The fix is the item or the source's declaration: DUE_ATTRIBUTE is the tasks table's.
    assert line.endswith(f"ok; dead-lettered 1: {reason} (give the item its at, or fix the source's "
                         "due_attribute in TASK_SOURCES?)"), line


def test_the_banner_names_every_route_that_needs_no_token() -> None:
    lines = token_lines("tour", "http://127.0.0.1:8000")
    public = lines.split("every route but ", 1)[1].split(" needs:", 1)[0].replace(" and ", ", ").split(", ")
    assert sorted(public) == sorted({path for path, _ in PUBLIC_ROUTES})
    assert "Authorization: Bearer tour" in lines
