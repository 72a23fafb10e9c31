"""timekeeper: routes and event bindings only; each turns its event into one call into chalicelib.

Every Lambda function of the stage imports this module whole, so the top imports only what
the bindings need at import and every function uses (settings, boto3 clients, the route
authorizer, the HTTP plumbing and its structured logger); each handler imports its own
chalicelib module when it first runs, so a function's cold start loads one handler's code
(bench P5; tests/deploy/test_cold_start.py).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from chalice.app import Chalice, CloudWatchEvent, DynamoDBEvent, Response, SQSEvent

from chalicelib import auth
from chalicelib.aws import Deps
from chalicelib.container import Container
from chalicelib.invocation import observed
from chalicelib.log import logger
from chalicelib.settings import Settings, chalice_command, unprovisioned_refusal
from chalicelib.web import json_body, no_store, query, raw_body, respond

if TYPE_CHECKING:  # loaded by the settings only when the stage declares task sources
    from chalicelib.sources import TaskSource

# Plain `chalice deploy` / `chalice package` of a stage `make deploy` has not provisioned would build it broken.
if refusal := unprovisioned_refusal(os.environ, sys.argv):
    raise SystemExit(refusal)
# `chalice local --stage local`: the API against `make run`'s moto, never AWS, or a refusal saying what to start.
if chalice_command(sys.argv) == "local" and os.environ.get("STAGE") == "local":
    from chalicelib.chalice_local import serve_against_make_run  # imported under chalice local only
    serve_against_make_run(os.environ)
settings = Settings.from_env()
logger.setLevel(settings.log_level)  # the stage's level, whoever imported the logger first (the offline runtime)
app = Chalice(app_name="timekeeper")
container = Container(lambda: Deps.from_settings(settings))


def deps() -> Deps:
    return container.get()


# Every HTTP answer in JSON says Cache-Control: no-store (they hold task payloads); outermost, so errors too.
app.register_middleware(no_store, "http")
# Every function: log lines carry the Lambda request id; the metrics recorded are flushed once at the end.
app.register_middleware(observed(deps), "all")

# Every route but GET /health, GET /openapi.json and the console's files (auth.PUBLIC_ROUTES) takes **protected:
# the authorizer API_AUTH chooses (chalicelib/auth.py).
protected = auth.route_auth(app, settings, lambda: deps().settings)


# --- backups -----------------------------------------------------------------

@app.schedule(settings.backup_schedule, name="backup_trigger",
              description="Start a backup run of the selected tables")
def backup_trigger(event: CloudWatchEvent) -> None:
    from chalicelib.backups import trigger
    from chalicelib.events import scheduled_time
    d = deps()
    at = scheduled_time(event.time, d.clock())
    trigger.start_run(d, trigger="schedule", run_id=trigger.new_run_id(at, "scheduled"))


def export_trigger(event: CloudWatchEvent) -> None:
    from chalicelib.backups import exports
    from chalicelib.events import scheduled_time
    d = deps()
    exports.start(d, scheduled_time(event.time, d.clock()).replace(microsecond=0))


if settings.export_bucket:  # a stage without EXPORT_BUCKET has no export function (nor its policy)
    app.schedule(settings.export_schedule, name="export_trigger",
                 description="Export the selected tables to S3")(export_trigger)


@app.on_sqs_message(queue=settings.backup_monitor_queue, batch_size=1, name="backup_monitor")
def backup_monitor(event: SQSEvent) -> None:
    from chalicelib.backups import monitor
    from chalicelib.invocation import seconds_left
    left = seconds_left(event, deps().clock)
    for record in event:
        monitor.check_run(deps(), record.body, record.to_dict().get("messageId", ""), left)


@app.route("/backups", methods=["POST"], **protected)
def start_backup_run() -> Response:
    from chalicelib.backups import api as backup_api
    return respond(lambda: backup_api.start(deps(), json_body(raw_body(app.current_request))))


@app.route("/backups", methods=["GET"], **protected)
def list_backups() -> Response:
    from chalicelib.backups import catalog
    return respond(lambda: catalog.list_backups(deps(), query(app.current_request)))


@app.route("/backups/runs", methods=["GET"], **protected)
def list_backup_runs() -> Response:
    from chalicelib.backups import api as backup_api
    return respond(lambda: backup_api.recent(deps(), query(app.current_request)))


@app.route("/backups/runs/{run_id}", methods=["GET"], **protected)
def show_backup_run(run_id: str) -> Response:
    from chalicelib.backups import api as backup_api
    return respond(lambda: backup_api.show(deps(), run_id))


@app.route("/backups/restores", methods=["POST"], **protected)
def start_restore() -> Response:
    from chalicelib.backups import restore
    return respond(lambda: restore.start(deps(), json_body(raw_body(app.current_request))))


@app.route("/backups/restores", methods=["GET"], **protected)
def list_restores() -> Response:
    from chalicelib.backups import restore
    return respond(lambda: restore.recent(deps(), query(app.current_request)))


@app.route("/backups/restores/{restore_id}", methods=["GET"], **protected)
def show_restore(restore_id: str) -> Response:
    from chalicelib.backups import restore
    return respond(lambda: restore.show(deps(), restore_id))


# --- tasks: stream scheduler and interval processor --------------------------

@app.route("/tasks/{source}/history", methods=["GET"], **protected)
def task_history(source: str) -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.show_history(deps(), source, query(app.current_request)))


# Chalice cannot set ReportBatchItemFailures; deploy sets it on this mapping after deploy.
@app.on_dynamodb_record(stream_arn=settings.tasks_stream_arn, name="task_stream", batch_size=100,
                        starting_position="TRIM_HORIZON")
def task_stream(event: DynamoDBEvent) -> dict[str, Any]:
    from chalicelib.tasks import stream
    return stream.process_records(deps(), event.to_dict()["Records"])


# One stream function per task source (a user's table), named after it (a deploy updates, never replaces it),
# feeding the same scheduler and executor as the tasks table's.  Chalice makes a function's Lambda handler
# "app.<the Python function's __name__>" (Chalice._do_register_handler's handler_string; `chalice package`
# writes it into the template) and Lambda's runtime finds it with getattr(app, name) (awslambdaric's
# _get_handler): so each source's function is given its function's name, and the module's __getattr__
# answers for the names only the stage's settings know (tests/deploy/test_task_source_handlers.py).
def bind_stream_of(source: TaskSource) -> Any:
    def stream_of_source(event: DynamoDBEvent) -> dict[str, Any]:
        from chalicelib.tasks import stream
        return stream.process_records(deps(), event.to_dict()["Records"], source=source.name)

    stream_of_source.__name__ = stream_of_source.__qualname__ = source.function_name
    return app.on_dynamodb_record(stream_arn=source.stream_arn, name=source.function_name, batch_size=100,
                                  starting_position="TRIM_HORIZON")(stream_of_source)


task_source_streams = {source.function_name: bind_stream_of(source) for source in settings.task_sources}


def __getattr__(name: str) -> Any:
    """``app.source_<name>``: the stream function of a task source the stage declares."""
    try:
        return task_source_streams[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


@app.schedule(settings.processor_schedule, name="interval_processor",
              description="Send the interval tasks that have come due, and the sweeper's exact tasks coming near, "
                          "to the due queue")
def interval_processor(event: CloudWatchEvent) -> None:
    from chalicelib.invocation import seconds_left
    from chalicelib.tasks import sweeper
    sweeper.processor_tick(deps(), seconds_left(event, deps().clock))


# --- tasks: API and executor ------------------------------------------------

@app.route("/tasks", methods=["POST"], **protected)
def create_task() -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.create(deps(), json_body(raw_body(app.current_request))))


@app.route("/tasks", methods=["GET"], **protected)
def list_tasks() -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.list_tasks(deps(), query(app.current_request)))


@app.route("/tasks/{task_id}", methods=["GET"], **protected)
def show_task(task_id: str) -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.show(deps(), task_id))


@app.route("/tasks/{source}/{key}", methods=["GET"], **protected)
def show_source_task(source: str, key: str) -> Response:
    from chalicelib.tasks import source_api
    return respond(lambda: source_api.show(deps(), source, key))


@app.route("/tasks/{task_id}", methods=["DELETE"], **protected)
def cancel_task(task_id: str) -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.cancel(deps(), task_id, auth.caller(app.current_request)))


@app.route("/tasks/{task_id}", methods=["PATCH"], **protected)
def reschedule_task(task_id: str) -> Response:
    from chalicelib.tasks import api as task_api
    return respond(lambda: task_api.reschedule(deps(), task_id, json_body(raw_body(app.current_request)),
                                               auth.caller(app.current_request)))


# POST /tasks/<task id>/retry, /pause, /resume: the id's path part is named {source}, as in its sibling
# /tasks/{source}/{key} (a router takes one variable name per level and would try {source}/{key} first).
@app.route("/tasks/{source}/retry", methods=["POST"], **protected)
def retry_task(source: str) -> Response:
    from chalicelib.tasks import operations
    return respond(lambda: operations.retry(deps(), source, json_body(raw_body(app.current_request)),
                                               auth.caller(app.current_request)))


@app.route("/tasks/{source}/{key}/retry", methods=["POST"], **protected)
def retry_source_task(source: str, key: str) -> Response:
    from chalicelib.tasks import operations
    return respond(lambda: operations.retry_source(deps(), source, key, json_body(raw_body(app.current_request)),
                                                      auth.caller(app.current_request)))


@app.route("/tasks/{source}/pause", methods=["POST"], **protected)
def pause_task(source: str) -> Response:
    from chalicelib.tasks import operations
    return respond(lambda: operations.pause(deps(), source, auth.caller(app.current_request)))


@app.route("/tasks/{source}/resume", methods=["POST"], **protected)
def resume_task(source: str) -> Response:
    from chalicelib.tasks import operations
    return respond(lambda: operations.resume(deps(), source, auth.caller(app.current_request)))


@app.route("/dead-letters", methods=["GET"], **protected)
def count_dead_letters() -> Response:
    from chalicelib.tasks import dead_letter_queue
    return respond(lambda: dead_letter_queue.show(deps(), query(app.current_request)))


# Chalice cannot set ReportBatchItemFailures; deploy must set it on this mapping too.
@app.on_sqs_message(queue=settings.due_queue, batch_size=10, name="task_executor")
def task_executor(event: SQSEvent) -> dict[str, Any]:
    from chalicelib.invocation import seconds_left
    from chalicelib.tasks import executor
    return executor.run_batch(deps(), event.to_dict()["Records"], seconds_left(event, deps().clock))


# A due message the executor failed MAX_RECEIVE_COUNT times: the task shows why, one alert, on to TASK_DLQ.
@app.on_sqs_message(queue=settings.due_dlq, batch_size=10, name="due_dead_letter")
def due_dead_letter(event: SQSEvent) -> dict[str, Any]:
    from chalicelib.tasks import dead_letters
    return dead_letters.run_batch(deps(), event.to_dict()["Records"])


# --- health and the API's own description ------------------------------------------------------------------

@app.route("/health", methods=["GET"])
def health() -> Response:
    return respond(lambda: (200, {"status": "ok", "stage": settings.stage}))


@app.route("/openapi.json", methods=["GET"])
def openapi_document() -> Response:
    from chalicelib import openapi
    return respond(lambda: (200, openapi.document()))


# --- the console: one web page for an operator (docs/console.md); its data calls go through the API ------

@app.route("/console", methods=["GET"])
def console_page() -> Response:
    from chalicelib import console
    return console.response(console.PAGE)


@app.route("/console/{asset}", methods=["GET"])
def console_asset(asset: str) -> Response:
    from chalicelib import console
    return console.response(asset)
