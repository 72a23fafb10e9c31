"""local/handler_processes.py's invoker: a worker's outcome becomes the Invocation the in-process invoker would
have made (the error named after the handler's own exception), and with no worker up the handler runs here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chalice.app import Chalice

from local.handler_processes import HandlerProcesses, Outcome, ProcessInvoker
from local.in_process import InProcessTransport
from local.invoker import Reporter, describe_error


class OneWorker(HandlerProcesses):
    """A worker that answers ``outcome`` (no process started)."""

    def __init__(self, outcome: Outcome | None) -> None:
        super().__init__(1, InProcessTransport("http://127.0.0.1:1", lambda: False), {}, Path("."), "local", 128,
                         lambda _: None)
        self.outcome = outcome
        self.calls: list[tuple[Any, ...]] = []

    def invoke(self, handler: str, source: str, event: Any, records: int, timeout: int) -> Outcome | None:
        self.calls.append((handler, source, event, records, timeout))
        return self.outcome


def tiny_app() -> Chalice:
    app = Chalice(app_name="tiny")

    @app.on_sqs_message(queue="q")
    def handle(event: Any) -> str:
        return "ran here"

    return app


def test_a_workers_outcome_is_the_invocation_and_its_error_keeps_its_name() -> None:
    app = tiny_app()
    failed = OneWorker(Outcome(None, "ValueError", "boom", 0.25, False, ("no due time",)))
    call = ProcessInvoker(app, Reporter(lambda _: None), processes=failed, timeout_seconds=7).invoke(
        "handle", "sqs", {"Records": []}, 3)
    assert failed.calls == [("handle", "sqs", {"Records": []}, 3, 7)]
    assert not call.ok and describe_error(call) == "ValueError: boom" and isinstance(call.error, Exception)
    assert (call.records, call.seconds, call.dead_letters) == (3, 0.25, ("no due time",))
    done = ProcessInvoker(app, Reporter(lambda _: None), processes=OneWorker(
        Outcome({"batchItemFailures": []}, None, "", 0.1, False, ()))).invoke("handle", "sqs", {}, 1)
    assert done.ok and done.result == {"batchItemFailures": []}


def test_with_no_worker_up_the_handler_runs_in_this_process() -> None:
    call = ProcessInvoker(tiny_app(), Reporter(lambda _: None), processes=OneWorker(None)).invoke(
        "handle", "sqs", {"Records": []}, 1)
    assert call.ok and call.result == "ran here"
