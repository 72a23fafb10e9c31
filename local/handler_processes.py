"""The app's event handlers in processes of their own, moto's server and the runtime's sources in ``make run``'s.

One interpreter for moto, the sources and every handler invocation is bound by one core under load
(docs/offline-throughput.md).  With ``LOCAL_HANDLER_PROCESSES`` = N (``make run``:
1), the runtime's process keeps moto's server, the API and every event source (their feeds from moto stay in
process), and each invocation of an event handler runs in one of N worker processes (``python -m
local.handler_processes``), each with app.py imported under the same environment and its clients built once,
as a Lambda container.

* **Invocations**: a source calls ``ProcessInvoker.invoke`` as it called ``Invoker.invoke``; the event goes to
  the worker with the fewest invocations running, which runs it on a thread of its own (as many at once as
  the sources start) and answers what the in-process invoker would have answered: the result, the error
  (its type's name and message), the duration, the dead-lettered reasons.  The line per invocation is
  printed by the runtime as before; what the handler prints and logs goes to the same stdout.  Before a
  worker is up, or after one died, invocations run in the runtime's process as before.
* **AWS calls**: a worker's clients reach moto without HTTP: botocore's request (signed, serialised,
  retried as before) goes as plain values over a Unix socket to the runtime's process, which answers it
  with moto's WSGI application (local/in_process.py) and sends the answer back.  Once moto's server is
  stopped a call goes over HTTP and fails as an outage does.
* **Stopping**: Ctrl-C reaches the whole process group; a worker ignores it and ends when the runtime's
  process hangs up its connection (stop: the socket shut down, so the worker reads its end at once) or goes
  away (its end of the socket closes), and is killed if it has not ended within a second.

The socket is in a fresh private directory and every connection must know a random key (multiprocessing's
authentication), so no other local user can send invocations or AWS calls through it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from local.in_process import Answer, InProcessTransport, RequestParts, request_parts, response
from local.invoker import Invocation, Invoker, Reporter
from local.run_directories import RunDirectory, run_directory

ADDRESS_VARIABLE = "LOCAL_HANDLER_ADDRESS"  # the worker's own variables, taken out of its environment at start
KEY_VARIABLE = "LOCAL_HANDLER_KEY"
STAGE_VARIABLE = "LOCAL_HANDLER_STAGE"
MEMORY_VARIABLE = "LOCAL_HANDLER_MEMORY"
KILL_AFTER_SECONDS = 1.0   # a worker still running this long after its connection closed is killed
# (id, handler, source, event, records, timeout seconds) to a worker; (id, Outcome) back
Request = tuple[int, str, str, Any, int, int]


@dataclass(frozen=True)
class Outcome:
    """What a worker's invocation did, in plain values (an exception travels as its type's name and text)."""

    result: Any
    error_type: str | None
    error_text: str
    seconds: float
    timed_out: bool
    dead_letters: tuple[str, ...]


class HandlerError(Exception):
    """An exception a handler raised in a worker (its class is named after the original's)."""


_error_classes: dict[str, type[HandlerError]] = {}


def error_of(name: str, text: str) -> HandlerError:
    if name not in _error_classes:
        _error_classes[name] = type(name, (HandlerError,), {})
    return _error_classes[name](text)


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    connection: Connection | None = None
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[int, Future[Outcome]] = field(default_factory=dict)
    alive: bool = True


class HandlerProcesses:
    """``count`` worker processes and the socket they reach the runtime's process through."""

    def __init__(self, count: int, transport: InProcessTransport, environ: Mapping[str, str], project_dir: Path,
                 stage: str, memory_size: int, report: Callable[[str], None]) -> None:
        self.count = count
        self._transport = transport
        self._environ = dict(environ)
        self._project_dir = project_dir
        self._stage = stage
        self._memory_size = memory_size
        self._report = report
        self._key = secrets.token_bytes(32)
        self._directory: RunDirectory | None = None
        self._address = ""
        self._listener: Listener | None = None
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopped = False
        self._ready = threading.Condition(self._lock)

    # --- starting ---------------------------------------------------------------------

    def start(self) -> HandlerProcesses:
        self._directory = run_directory("timekeeper-handlers-")  # a killed make run's is removed by the next one
        self._address = str(self._directory.path / "socket")
        self._listener = Listener(self._address, family="AF_UNIX", authkey=self._key)
        threading.Thread(target=self._accept, name="handlers-accept", daemon=True).start()
        environment = {**self._environ, ADDRESS_VARIABLE: self._address, KEY_VARIABLE: self._key.hex(),
                       STAGE_VARIABLE: self._stage, MEMORY_VARIABLE: str(self._memory_size)}
        for _ in range(self.count):
            process = subprocess.Popen([sys.executable, "-m", "local.handler_processes"], cwd=self._project_dir,
                                       env=environment, stdin=subprocess.DEVNULL)
            self._workers.append(_Worker(process))
        return self

    def wait_ready(self, timeout: float) -> bool:
        """Until every worker has connected (True) or ``timeout`` seconds passed or one ended (False)."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while any(w.connection is None for w in self._workers):
                left = deadline - time.monotonic()
                if left <= 0 or any(w.process.poll() is not None for w in self._workers):
                    return False
                self._ready.wait(min(left, 0.2))
        return True

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped:
            try:
                connection = self._listener.accept()
                role = connection.recv()
            except Exception:  # a connection without the key, or the listener closed by stop()
                continue
            if role == "aws":
                threading.Thread(target=self._serve_aws, args=(connection,), name="handlers-aws",
                                 daemon=True).start()
            elif isinstance(role, tuple) and role[0] == "invoke":
                self._attach_worker(int(role[1]), connection)
            else:
                connection.close()

    def _attach_worker(self, pid: int, connection: Connection) -> None:
        with self._ready:
            worker = next((w for w in self._workers if w.process.pid == pid and w.connection is None), None)
            if worker is None:
                connection.close()
                return
            worker.connection = connection
            self._ready.notify_all()
        threading.Thread(target=self._read_outcomes, args=(worker,), name=f"handlers-{pid}", daemon=True).start()

    # --- serving the workers' AWS calls -------------------------------------------------

    def _serve_aws(self, connection: Connection) -> None:
        with contextlib.closing(connection):
            while True:
                try:
                    parts: RequestParts = connection.recv()
                except (EOFError, OSError):
                    return
                answer: Answer | None = None
                if self._transport.serving():
                    try:
                        answer = self._transport.answer(parts)
                    except Exception as exc:  # moto raised where its server would answer 500
                        answer = (500, {"Content-Type": "text/plain"}, f"{type(exc).__name__}: {exc}".encode())
                try:
                    connection.send(answer)
                except OSError:
                    return

    # --- invocations -------------------------------------------------------------------

    def invoke(self, handler: str, source: str, event: Any, records: int, timeout: int) -> Outcome | None:
        """The invocation's outcome, from the least busy worker; None when no worker is up."""
        with self._lock:
            live = [w for w in self._workers if w.alive and w.connection is not None]
            if not live or self._stopped:
                return None
            worker = min(live, key=lambda w: len(w.pending))
            number = next(self._ids)
            future: Future[Outcome] = Future()
            worker.pending[number] = future
        try:
            with worker.send_lock:
                assert worker.connection is not None
                worker.connection.send((number, handler, source, event, records, timeout))
        except Exception as exc:  # the worker went away, or the event cannot be sent: run it in this process
            with self._lock:
                worker.pending.pop(number, None)
            if isinstance(exc, OSError):
                self._lost(worker)
            return None
        return future.result()

    def _read_outcomes(self, worker: _Worker) -> None:
        assert worker.connection is not None
        while True:
            try:
                number, outcome = worker.connection.recv()
            except Exception:  # the worker went away (EOFError, OSError), or sent what cannot be read
                self._lost(worker)
                return
            with self._lock:
                future = worker.pending.pop(number, None)
            if future is not None:
                future.set_result(outcome)

    def _lost(self, worker: _Worker) -> None:
        with self._lock:
            if not worker.alive:
                return
            worker.alive = False
            pending = list(worker.pending.values())
            worker.pending.clear()
        if self._stopped:  # its invocations are abandoned, as a handler still running in this process would be
            return
        self._report(f"handler process {worker.process.pid} ended (exit code {worker.process.poll()}); "
                     "its invocations run in this process from now on")
        for future in pending:
            future.set_result(Outcome(None, "HandlerProcessEnded", f"handler process {worker.process.pid} ended",
                                      0.0, False, ()))

    # --- stopping ----------------------------------------------------------------------

    def stop(self, timeout: float = KILL_AFTER_SECONDS) -> None:
        """Close every connection (a worker ends when it sees that), kill what still runs after ``timeout``."""
        self._stopped = True
        for worker in self._workers:
            if worker.connection is not None:
                hang_up(worker.connection)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as wake:  # accept() returns
                wake.settimeout(0.1)
                wake.connect(self._address)
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
        if self._directory is not None:
            self._directory.remove()


def hang_up(connection: Connection) -> None:
    """Close ``connection`` so that its peer reads the end now.  Closing alone does not: while a thread of this
    process is blocked reading it (``_read_outcomes``), the kernel keeps the socket open, so the worker saw no
    end and was killed a second later, every stop where no outcome happened to arrive meanwhile.  Shutting
    the socket down ends that read and the worker's at once."""
    # the same socket through another descriptor (Connection has no shutdown of its own)
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(connection.fileno())) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        connection.close()


class ProcessInvoker(Invoker):
    """An ``Invoker`` whose invocations run in the handler processes (in this process while none is up)."""

    def __init__(self, *args: Any, processes: HandlerProcesses, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.processes = processes

    def invoke(self, handler: str, source: str, event: Any, records: int = 1) -> Invocation:
        if handler not in self.app.handler_map:  # fails here, as in process
            raise KeyError(handler)
        outcome = self.processes.invoke(handler, source, event, records, self.timeout_seconds(handler))
        if outcome is None:
            return super().invoke(handler, source, event, records)
        error = error_of(outcome.error_type, outcome.error_text) if outcome.error_type is not None else None
        return Invocation(handler, source, records, outcome.seconds, result=outcome.result, error=error,
                          timed_out=outcome.timed_out, dead_letters=outcome.dead_letters)


# --- the worker's side -----------------------------------------------------------------------


class PipeTransport:
    """A worker's clients' requests to moto's endpoint, answered by the runtime's process over the socket."""

    def __init__(self, endpoint: str, address: str, key: bytes) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._address = address
        self._key = key
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def attach(self, client: Any) -> Any:
        client.meta.events.register_last("before-send", self.send)
        return client

    def send(self, request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse | None:
        if not request.url.startswith(self.endpoint + "/"):
            return None
        try:
            connection = self._take()
            connection.send(request_parts(request))
            answer: Answer | None = connection.recv()
        except (EOFError, OSError):
            return None  # the runtime's process is going away: over HTTP, which fails as an outage does
        with self._lock:
            self._idle.append(connection)
        return None if answer is None else response(request.url, *answer)

    def _take(self) -> Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        connection = Client(self._address, family="AF_UNIX", authkey=self._key)
        connection.send("aws")
        return connection


def work() -> None:
    """A worker: app.py imported, its clients on the socket, each invocation on a thread of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for make run, which stops this process
    address, key = os.environ.pop(ADDRESS_VARIABLE), bytes.fromhex(os.environ.pop(KEY_VARIABLE))
    stage, memory = os.environ.pop(STAGE_VARIABLE), int(os.environ.pop(MEMORY_VARIABLE))
    from local.app_module import PROJECT_DIR, load_app, warm

    transport = PipeTransport(os.environ["AWS_ENDPOINT_URL"], address, key)
    module = load_app(PROJECT_DIR)
    warm(module, transport.attach)
    timeouts: dict[str, int] = {}
    invoker = Invoker(module.app, Reporter(), stage=stage, timeout_seconds=lambda h: timeouts.get(h, 60),
                      memory_size=memory)
    control = Client(address, family="AF_UNIX", authkey=key)
    control.send(("invoke", os.getpid()))
    send_lock = threading.Lock()

    def run(request: Request) -> None:
        number, handler, source, event, records, _ = request
        call = invoker.invoke(handler, source, event, records)
        error = call.error
        outcome = Outcome(call.result, type(error).__name__ if error is not None else None,
                          str(error) if error is not None else "", call.seconds, call.timed_out, call.dead_letters)
        try:
            pickle.dumps(outcome.result)
        except Exception as exc:  # what Lambda would refuse to serialise too
            outcome = Outcome(None, "TypeError", f"the handler's result cannot be sent back: {exc}",
                              call.seconds, call.timed_out, call.dead_letters)
        with send_lock, contextlib.suppress(OSError):
            control.send((number, outcome))

    while True:
        try:
            request: Request = control.recv()
        except (EOFError, OSError):
            break
        timeouts[request[1]] = request[5]
        threading.Thread(target=run, args=(request,), name=f"invoke-{request[0]}", daemon=True).start()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":  # through the module's own name: what it sends back must unpickle as local.handler_processes'
    from local import handler_processes

    handler_processes.work()
