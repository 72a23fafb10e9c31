"""The offline runtime: any Chalice app's API and every event handler it registers, against moto's server.

``Runtime(app, endpoint_url=...)`` serves the app's routes with Chalice's own
local server (what ``chalice local`` runs) and, for each event source in
``app.event_sources``, runs what Lambda and AWS would run:

=====================  ====================================================
ScheduledEventConfig   local/sources/schedules.py: rate()/cron() on time
SQSEventConfig         local/sources/sqs.py: Lambda's SQS poller
DynamoDBEventConfig    local/sources/streams.py: Lambda's stream poller
(always)               local/sources/scheduler.py: EventBridge Scheduler
(always)               local/sources/ttl.py: DynamoDB Time to Live
=====================  ====================================================

Other event sources (S3, SNS, Kinesis, event patterns, websockets) are listed
in the banner as not emulated.  Every source is a thread that stops when the
shared stop Event is set; a source that raises is restarted after a growing
pause (1 s, 2 s ... 30 s).  Invocations run on daemon threads, so a handler
still running never keeps the process alive; ``stop()`` returns within
STOP_TIMEOUT_SECONDS overall.
"""

from __future__ import annotations

import functools
import queue
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import boto3
from botocore.config import Config as BotoConfig
from chalice.app import Chalice, DynamoDBEventConfig, ScheduledEventConfig, SQSEventConfig
from chalice.config import Config
from chalice.local import CustomLocalChalice, LocalChalice, LocalDevServer, ThreadedHTTPServer

from deploy.lambda_events import ACCOUNT
from local.aws import LOCAL_HOST
from local.handler_processes import HandlerProcesses, ProcessInvoker
from local.invoker import Clock, Invoker, Out, Reporter, print_line, utc_now
from local.sources import Source
from local.sources.retention import MotoRetention
from local.sources.scheduler import ScheduleFeed, SchedulerPoller
from local.sources.schedules import ScheduledRule
from local.sources.sqs import DEFAULT_MAX_CONCURRENCY, QueuePoller
from local.sources.streams import StreamFailurePolicy, StreamPoller, forget_moto_iterator
from local.sources.ttl import TtlLedger, TtlSweeper, WriteFeed

STOP_TIMEOUT_SECONDS = 5.0        # for every thread together, not each
RESTART_FIRST_SECONDS = 1.0       # a source that raised runs again after this, doubling ...
RESTART_MAX_SECONDS = 30.0        # ... up to this
HEALTHY_SECONDS = 60.0            # a source that ran this long before raising starts the pauses over

API_LISTEN_BACKLOG = 1024         # connections waiting to be accepted (socketserver's default: 5)

P = ParamSpec("P")
T = TypeVar("T")


class DaemonExecutor(Executor):
    """A fixed pool of daemon threads (ThreadPoolExecutor's are not daemons: a handler still running
    would keep the process alive after ``stop()``).  An exception no caller collects is reported."""

    def __init__(self, max_workers: int, name: str = "invoke",
                 report: Callable[[str], None] | None = None) -> None:
        self._max_workers = max_workers
        self._name = name
        self._report = report
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            while len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
            future: Future[T] = Future()
            self._queue.put((future, lambda: fn(*args, **kwargs)))
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:
                future.set_exception(exc)
                if self._report is not None:
                    traceback.print_exception(exc, file=sys.stderr)
                    self._report(f"worker: {type(exc).__name__}: {exc}")
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()


class ApiHTTPServer(ThreadedHTTPServer):
    """Chalice's local server class (a thread per request, daemon threads) with a listen backlog that
    takes a burst of clients: with socketserver's 5, most of 200 simultaneous connections were reset."""

    request_queue_size = API_LISTEN_BACKLOG
    daemon_threads = True


def supervise(name: str, target: Callable[[], Any], stop: threading.Event, report: Callable[[str], None], *,
              pause: Callable[[float], bool] | None = None,
              monotonic: Callable[[], float] = time.monotonic) -> None:
    """Run ``target`` until it returns or ``stop`` is set; after an unexpected exception, say so and run it
    again after a growing pause (``pause(seconds)`` returns True when stopped meanwhile)."""
    wait = pause or stop.wait
    delay = RESTART_FIRST_SECONDS
    while not stop.is_set():
        began = monotonic()
        try:
            target()
            return
        except Exception as exc:  # a source that dies says so, and comes back
            if stop.is_set():
                return
            if monotonic() - began >= HEALTHY_SECONDS:
                delay = RESTART_FIRST_SECONDS
            traceback.print_exception(exc, file=sys.stderr)
            report(f"{name}: stopped by {type(exc).__name__}: {exc}; restarting in {delay:g}s")
            if wait(delay):
                return
            delay = min(RESTART_MAX_SECONDS, delay * 2)


def join_all(threads: Iterable[threading.Thread], timeout: float,
             monotonic: Callable[[], float] = time.monotonic) -> list[threading.Thread]:
    """Join every thread within one overall ``timeout``; the ones still alive."""
    deadline = monotonic() + timeout
    threads = list(threads)
    for thread in threads:
        thread.join(max(0.0, deadline - monotonic()))
    return [t for t in threads if t.is_alive()]


@dataclass(frozen=True)
class RuntimeOptions:
    api_host: str = LOCAL_HOST
    api_port: int = 8000
    stage: str = "local"
    region: str = "us-east-1"
    account: str = ACCOUNT
    scheduler_jitter_seconds: float = 60.0
    ttl_lag_seconds: float = 5.0
    sqs_max_concurrency: int = DEFAULT_MAX_CONCURRENCY  # concurrent invocations per SQS source, at most
    workers: int = 8
    # what the stream mapping does with a batch that keeps failing (Lambda's defaults: retry until it works)
    stream_failure: StreamFailurePolicy = field(default_factory=StreamFailurePolicy)


class Runtime:
    """Serve ``app`` and run its event handlers against the AWS endpoint ``endpoint_url``."""

    def __init__(self, app: Chalice, endpoint_url: str, options: RuntimeOptions = RuntimeOptions(), *,
                 config: Config | None = None, clock: Clock = utc_now, out: Out = print_line,
                 rng: random.Random | None = None, session: boto3.session.Session | None = None,
                 writes: WriteFeed | None = None, schedule_changes: ScheduleFeed | None = None,
                 attach: Callable[[Any], Any] | None = None, handlers: HandlerProcesses | None = None) -> None:
        self.app = app
        self.endpoint_url = endpoint_url
        self.options = options
        self.config = config or Config(chalice_stage=options.stage,
                                       user_provided_params={"app_name": app.app_name})
        self.clock = clock
        self.reporter = Reporter(out, clock)
        # the event handlers' invocations: in processes of their own (local/handler_processes.py) or in this one
        invoker = functools.partial(ProcessInvoker, processes=handlers) if handlers is not None else Invoker
        self.invoker = invoker(app, self.reporter, stage=options.stage, timeout_seconds=self.lambda_timeout,
                               memory_size=self.config.lambda_memory_size or 128)
        self.stop_event = threading.Event()
        self.executor = DaemonExecutor(options.workers, "invoke", self.reporter.line)
        self.ledger = TtlLedger()
        self._session = session or boto3.session.Session(region_name=options.region)
        self._clients: dict[str, Any] = {}
        self._rng = rng or random.Random()
        # moto's feeds of item writes and schedule changes, when it runs in this process (local.moto_speed)
        self._writes = writes
        self._schedule_changes = schedule_changes
        # moto's server in this process: its clients' calls skip the socket (local/in_process.py)
        self._attach = attach
        self.sources: list[Source] = []
        self.not_emulated: list[str] = []
        self._threads: list[threading.Thread] = []
        self._server: LocalDevServer | None = None
        self._app_class: type | None = None
        self._discover()

    # --- wiring -----------------------------------------------------------------

    def lambda_timeout(self, handler: str) -> int:
        """config.json's lambda_timeout for ``handler`` (per function, per stage), else Chalice's 60 s."""
        timeout = self.config.scope(self.options.stage, handler).lambda_timeout
        return int(timeout) if timeout else 60

    def client(self, service: str) -> Any:
        """One client per service, built up front in this thread (boto3 sessions are not thread-safe)."""
        if service not in self._clients:
            client = self._session.client(  # type: ignore[call-overload]
                service, endpoint_url=self.endpoint_url, region_name=self.options.region,
                config=BotoConfig(retries={"mode": "standard", "max_attempts": 3},
                                  connect_timeout=2, read_timeout=15, max_pool_connections=64))
            self._clients[service] = self._attach(client) if self._attach is not None else client
        return self._clients[service]

    def _discover(self) -> None:
        """One source per event source the app registered (never a fixed list), plus Scheduler and TTL."""
        o = self.options
        for config in self.app.event_sources:
            if isinstance(config, ScheduledEventConfig):
                self.sources.append(ScheduledRule(config, self.invoker, self.executor, self.clock,
                                                  region=o.region, account=o.account))
            elif isinstance(config, SQSEventConfig):
                self.sources.append(QueuePoller(config, self.invoker, self.client("sqs"),
                                                region=o.region, account=o.account,
                                                max_concurrency=o.sqs_max_concurrency))
            elif isinstance(config, DynamoDBEventConfig) and not config.stream_arn.startswith("arn:"):
                self.not_emulated.append(f"{config.name} (no stream ARN: {config.stream_arn!r})")
            elif isinstance(config, DynamoDBEventConfig):
                self.sources.append(StreamPoller(
                    config, self.invoker, self.client("dynamodbstreams"), self.ledger, region=o.region,
                    clock=self.clock, policy=o.stream_failure, sqs=self.client("sqs"),
                    forget_iterator=forget_moto_iterator))
            else:
                self.not_emulated.append(f"{config.name} ({type(config).__name__})")
        self.sources.append(SchedulerPoller(
            self.client("scheduler"), self.client("sqs"), self.client("sns"), self.invoker, self.executor,
            self.clock, jitter_seconds=o.scheduler_jitter_seconds, rng=self._rng, changes=self._schedule_changes))
        self.sources.append(TtlSweeper(self.client("dynamodb"), self.ledger, self.reporter, self.clock,
                                       lag_seconds=o.ttl_lag_seconds, writes=self._writes))
        self.sources.append(MotoRetention([s for s in self.sources if isinstance(s, StreamPoller)],
                                          self.reporter, region=o.region, account=o.account))

    def source(self, name: str) -> Source:
        return next(s for s in self.sources if s.name == name)

    # --- running ------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        host, port = self._server.server.server_address[:2] if self._server else (self.options.api_host,
                                                                                  self.options.api_port)
        return f"http://{host!s}:{port}"

    def start(self) -> Runtime:
        self._server = self._api_server()
        self._spawn("api", lambda: self._server.server.serve_forever(poll_interval=0.2) if self._server else None)
        for source in self.sources:
            self._spawn(source.name, lambda s=source: s.run(self.stop_event))  # type: ignore[misc]
        return self

    def _api_server(self) -> LocalDevServer:
        """Chalice's local server as ``chalice local`` builds it (``create_local_server``), on the API host
        and port, with a listen backlog for bursts of connections (``ApiHTTPServer``)."""
        if not isinstance(self.app, LocalChalice):  # not converted yet by an earlier runtime
            self._app_class = type(self.app)
            CustomLocalChalice.__bases__ = (LocalChalice, self._app_class)
            self.app.__class__ = CustomLocalChalice
        return LocalDevServer(self.app, self.config, self.options.api_host, self.options.api_port,
                              server_cls=ApiHTTPServer)

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        thread = threading.Thread(target=supervise, args=(name, target, self.stop_event, self.reporter.line),
                                  name=f"local-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop every source and the API within ``timeout`` overall; handlers still running are left
        to finish on their daemon threads (they never keep the process alive)."""
        deadline = time.monotonic() + timeout
        self.stop_event.set()
        if self._server is not None:
            self._server.server.shutdown()
            self._server.server.server_close()
        stuck = join_all(self._threads, max(0.0, deadline - time.monotonic()))
        self.executor.shutdown(wait=False, cancel_futures=True)
        if stuck:
            self.reporter.line(f"stop: still running after {timeout:g}s: {', '.join(t.name for t in stuck)}")
        if self._app_class is not None:
            self.app.__class__ = self._app_class  # undo create_local_server's class swap
            self._app_class = None

    def __enter__(self) -> Runtime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- banner ---------------------------------------------------------------------

    def banner(self, aws_endpoint: str | None = None) -> str:
        lines = [f"{self.app.app_name} offline, stage {self.options.stage}",
                 f"  API        {self.api_url}/  (Chalice's local server, as `chalice local`)"]
        endpoint = aws_endpoint or self.endpoint_url
        lines.append(f"  AWS        {endpoint}  (moto; state: {endpoint}/moto-api/data.json)")
        lines.append("  handlers")
        for source in self.sources:
            if isinstance(source, ScheduledRule | QueuePoller | StreamPoller):
                lines.append(f"    {source.name:<24} {source.describe()}")
        lines.append("  emulated")
        for source in self.sources:
            if not isinstance(source, ScheduledRule | QueuePoller | StreamPoller):
                lines.append(f"    {source.describe()}")
        if self.not_emulated:
            lines.append("  not emulated: " + ", ".join(self.not_emulated))
        lines.append("  one line per invocation: time, handler, source, records, duration, outcome. Ctrl-C stops.")
        return "\n".join(lines)
