"""local/handler_processes.py's invoker: a worker's outcome becomes the Invocation the in-process invoker would
have made (the error named after the handler's own exception), and with no worker up the handler runs here; a
stop hangs up on the workers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from chalice.app import Chalice

from local.handler_processes import HandlerProcesses, Outcome, ProcessInvoker, _Worker
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


class WorkerEnd:
    """A worker as ``stop`` sees it (``subprocess.Popen``'s wait, poll, kill), reading its end of the connection in a
    thread of this process: it ends when it reads the end of the connection, as ``work()`` does."""

    def __init__(self, connection: Connection) -> None:
        self.pid = os.getpid()
        self.ended = threading.Event()
        self.killed = False
        threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: Connection) -> None:
        with contextlib.suppress(EOFError, OSError):
            connection.recv()
        self.ended.set()

    def wait(self, timeout: float | None = None) -> int:
        if not self.killed and not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired("worker", timeout or 0.0)
        return 0

    def poll(self) -> int | None:
        return 0 if self.ended.is_set() or self.killed else None

    def kill(self) -> None:
        self.killed = True


def test_a_stop_hangs_up_on_an_idle_worker_which_ends_without_being_killed() -> None:
    """The runtime's reader of the worker's outcomes is blocked on the connection when the stop closes it: closing
    alone left the worker waiting, and killed after a second, on every stop with no outcome on the way."""
    ours, theirs = Pipe()
    worker = WorkerEnd(theirs)
    processes = OneWorker(None)
    processes._workers.append(_Worker(cast("subprocess.Popen[bytes]", worker)))
    processes._attach_worker(worker.pid, ours)  # as when the worker connected: a thread reads its outcomes
    processes.stop(timeout=1.0)
    assert worker.ended.is_set() and not worker.killed
