"""timekeeper: routes and event bindings only; each turns its event into one call into chalicelib."""

from __future__ import annotations

from chalice.app import Chalice, CloudWatchEvent, Response, SQSEvent

from chalicelib.aws import Deps
from chalicelib.backups import api as backup_api
from chalicelib.backups import monitor, trigger
from chalicelib.container import Container
from chalicelib.events import scheduled_time
from chalicelib.settings import Settings
from chalicelib.web import json_body, query, raw_body, respond

settings = Settings.from_env()
app = Chalice(app_name="timekeeper")
container = Container(lambda: Deps.from_settings(settings))


def deps() -> Deps:
    return container.get()


# --- backups -----------------------------------------------------------------

@app.schedule(settings.backup_schedule, name="backup_trigger",
              description="Start a backup run of the selected tables")
def backup_trigger(event: CloudWatchEvent) -> None:
    d = deps()
    at = scheduled_time(event.time, d.clock())
    trigger.start_run(d, trigger="schedule", run_id=trigger.new_run_id(at, "scheduled"))


@app.on_sqs_message(queue=settings.backup_monitor_queue, batch_size=1, name="backup_monitor")
def backup_monitor(event: SQSEvent) -> None:
    for record in event:
        monitor.check_run(deps(), record.body, record.to_dict().get("messageId", ""))


@app.route("/backups", methods=["POST"])
def start_backup_run() -> Response:
    return respond(lambda: backup_api.start(deps(), json_body(raw_body(app.current_request))))


@app.route("/backups/runs", methods=["GET"])
def list_backup_runs() -> Response:
    return respond(lambda: backup_api.recent(deps(), query(app.current_request)))


@app.route("/backups/runs/{run_id}", methods=["GET"])
def show_backup_run(run_id: str) -> Response:
    return respond(lambda: backup_api.show(deps(), run_id))


# --- health ------------------------------------------------------------------

@app.route("/health", methods=["GET"])
def health() -> Response:
    return respond(lambda: (200, {"status": "ok", "stage": settings.stage}))
