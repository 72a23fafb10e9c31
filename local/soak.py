"""`make soak`: the offline runtime under load, as a user runs it (docs/testing.md: Soak).

Starts ``python -m local.run`` in its own process (free ports, schedules fired
on time) and drives it only from outside:

1. **burst**: BURST concurrent ``POST /tasks`` at once: no connection reset, no 5xx,
   every one 201 with its own id;
2. **tasks**: TASKS tasks (strategies exact, interval, lazy in turn; each sends its
   own id to an SQS queue made for the soak) created at the pace they run (at most
   IN_FLIGHT created and not yet run), with, in the middle, a POST that conflicts
   (409, a cancelled transaction: an item of another program has the task's key),
   a task cancelled before its time (it must never run) and the same POST again
   (200, nothing new).  The soak queue is drained as the tasks run, and every
   task id must arrive exactly once (a few seconds are waited after the last one
   for duplicates); the burst's tasks are counted the same way;
3. **memory**: the runtime's peak resident memory (VmHWM in /proc/<pid>/status) must
   stay under MAX_RSS_MB;
4. **SIGTERM**: the process must print "stopped" and exit within 5 seconds.

It prints what it counted and measured and exits 0 only if every check held.

    .venv/bin/python -m local.soak                 # 10,000 tasks (1 to 3 hours on 2 cores)
    .venv/bin/python -m local.soak --tasks 50 --burst 20
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from local.client import ApiClient, Response, wait_until
from local.run_directories import run_directory

PROJECT = Path(__file__).resolve().parent.parent
TASKS = 10_000
BURST = 200
IN_FLIGHT = 300            # tasks created and not yet run, at most
LEAD_SECONDS = (3, 12)     # a task is due this many seconds after it is created (under 30 s: interval tasks go direct)
MAX_RSS_MB = 600
STOP_WITHIN_SECONDS = 5.0
QUIET_SECONDS = 8.0        # waited after the last expected task for a late duplicate
STALL_SECONDS = 180.0      # no task ran for this long: the soak fails
STRATEGIES = ("exact", "interval", "lazy")
TASKS_TABLE = "timekeeper-local-tasks"
INVOCATION_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}  (\w+) +(?:sqs|stream|schedule|scheduler) ")
# the same line's clock time and duration (local/invoker.py Reporter.invocation)
INVOCATION_SPAN = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d{3})  \w+ +\w+ +\d+ \w+ +(\d+) ms  ")
# a delivery by the EventBridge Scheduler emulation (local/sources/scheduler.py SchedulerPoller.attempt)
SCHEDULER_DELIVERY = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}  schedule \S+ -> (\S+): sent message ")


@dataclass
class BurstResult:
    requests: int
    statuses: Counter[int] = field(default_factory=Counter)
    resets: int = 0           # connections reset or refused
    errors: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.resets == 0 and not self.errors and self.statuses[201] == self.requests
                and len(set(self.ids)) == self.requests)

    def describe(self) -> str:
        codes = ", ".join(f"{n} x {code}" for code, n in sorted(self.statuses.items()))
        return (f"{self.requests} concurrent POST /tasks: {codes or 'no answer'}; {self.resets} reset; "
                f"{len(set(self.ids))} distinct ids" + (f"; errors: {self.errors[:3]}" if self.errors else ""))


@dataclass
class SoakResult:
    tasks: int = 0
    burst: BurstResult | None = None
    created: int = 0
    ran: Counter[str] = field(default_factory=Counter)   # task id -> deliveries of its action
    expected: set[str] = field(default_factory=set)
    cancelled_id: str = ""
    conflict_status: int = 0
    replay_status: int = 0
    create_failures: list[str] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    stop_seconds: float | None = None
    stopped_printed: bool = False
    exit_code: int | None = None
    run_seconds: float = 0.0
    wall_seconds: float = 0.0
    failed_lines: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        return sorted(self.expected - set(self.ran))

    @property
    def duplicated(self) -> list[str]:
        return sorted(i for i, n in self.ran.items() if n > 1)

    @property
    def unexpected(self) -> list[str]:
        return sorted(set(self.ran) - self.expected)

    @property
    def ok(self) -> bool:
        return not self.problems

    def check(self) -> None:
        """Fill ``problems`` from what was measured."""
        p = self.problems
        if self.burst is not None and not self.burst.ok:
            p.append(f"burst: {self.burst.describe()}")
        if self.create_failures:
            p.append(f"{len(self.create_failures)} POST /tasks failed: {self.create_failures[:3]}")
        if self.missing:
            p.append(f"{len(self.missing)} tasks never ran: {self.missing[:5]}")
        if self.duplicated:
            p.append(f"{len(self.duplicated)} tasks ran more than once: {self.duplicated[:5]}")
        if self.cancelled_id and self.cancelled_id in self.ran:
            p.append(f"the cancelled task {self.cancelled_id} ran")
        if self.unexpected:
            p.append(f"actions of unknown tasks: {self.unexpected[:5]}")
        if self.conflict_status != 409:
            p.append(f"the conflicting POST answered {self.conflict_status}, not 409")
        if self.replay_status != 200:
            p.append(f"the repeated POST answered {self.replay_status}, not 200")
        if self.peak_rss_mb >= MAX_RSS_MB:
            p.append(f"peak RSS {self.peak_rss_mb:.0f} MB (limit {MAX_RSS_MB} MB)")
        if self.stop_seconds is None or self.stop_seconds >= STOP_WITHIN_SECONDS:
            p.append(f"SIGTERM: still running after {STOP_WITHIN_SECONDS:g}s" if self.stop_seconds is None
                     else f"SIGTERM: exited after {self.stop_seconds:.1f}s (limit {STOP_WITHIN_SECONDS:g}s)")
        elif not self.stopped_printed or self.exit_code != 0:
            p.append(f"SIGTERM: exit code {self.exit_code}, 'stopped' printed: {self.stopped_printed}")

    def report(self) -> list[str]:
        once = sum(1 for i in self.expected if self.ran.get(i) == 1)
        rate = len(self.ran) / self.run_seconds if self.run_seconds else 0.0
        lines = [
            f"burst          {self.burst.describe() if self.burst else 'skipped'}",
            f"tasks          {self.created} created ({', '.join(STRATEGIES)} in turn) + burst; "
            f"{len(self.expected)} expected to run",
            f"ran            {once} exactly once, {len(self.duplicated)} more than once, {len(self.missing)} never, "
            f"{len(self.unexpected)} unknown",
            f"conflict       POST with a taken key: {self.conflict_status}; same POST again: {self.replay_status}; "
            f"cancelled task ran: {'yes' if self.cancelled_id in self.ran else 'no'}",
            f"throughput     {rate:.1f} tasks/s over {self.run_seconds:.0f}s",
            f"memory         peak RSS (VmHWM) {self.peak_rss_mb:.0f} MB (limit {MAX_RSS_MB} MB)",
            "SIGTERM        " + (f"exited in {self.stop_seconds:.2f}s, code {self.exit_code}, 'stopped' printed: "
                                 f"{self.stopped_printed}" if self.stop_seconds is not None else "did not exit"),
            f"runtime lines  {self.failed_lines} FAILED invocations",
            f"wall           {self.wall_seconds:.0f}s",
        ]
        lines.append("SOAK PASSED" if self.ok else "SOAK FAILED:\n  " + "\n  ".join(self.problems))
        return lines


# --- the process under test ------------------------------------------------------------

def peak_rss_mb(pid: int) -> float:
    """VmHWM of one process, in MB (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else 0.0


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, their children ...), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


class RuntimeProcess:
    """``python -m local.run`` on free ports; its output is drained (the last lines kept).

    ``env`` is laid over the soak's settings (schedules fired exactly, a TTL lag of 1 s): the bench
    runs it with the Scheduler's window on, or with the stage's settings changed."""

    def __init__(self, token: str, python: str = sys.executable, env: Mapping[str, str] | None = None) -> None:
        # Its run file (for chalice local) in a directory of its own: never over a `make run`'s .local/make-run.json.
        # Removed once the process ended (a killed soak's by the next one's).
        self.directory = run_directory("timekeeper-run-")
        run_file = str(self.directory.path / "make-run.json")
        env = {**os.environ, "LOCAL_AWS_PORT": "0", "LOCAL_API_PORT": "0", "LOCAL_WEBHOOK_PORT": "0",
               "LOCAL_SCHEDULER_JITTER_SECONDS": "0",
               "LOCAL_TTL_LAG_SECONDS": "1", "LOCAL_RUN_FILE": run_file, **(env or {}), "API_TOKEN": token,
               "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([python, "-m", "local.run"], cwd=PROJECT, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1,
                                        pass_fds=[self.directory.lock])  # held while either process lives
        self.tail: deque[str] = deque(maxlen=200)
        self.banner: list[str] = []
        self.failed = 0
        self.invocations: Counter[str] = Counter()  # handler -> invocation lines printed
        # handler -> (UTC seconds of the day it ended, seconds it took) of each invocation
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self.deliveries: Counter[str] = Counter()   # target ARN -> messages the Scheduler emulation sent there
        self.stopped = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if len(self.banner) < 60:
                self.banner.append(line)
            self.tail.append(line)
            invocation = INVOCATION_LINE.match(line)
            if invocation:
                self.invocations[invocation.group(1)] += 1
                if "  FAILED " in line:
                    self.failed += 1
                span = INVOCATION_SPAN.match(line)
                if span:
                    hours, minutes, seconds, millis = span.groups()
                    ended = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
                    self.spans.setdefault(invocation.group(1), []).append((ended, int(millis) / 1000))
            delivery = SCHEDULER_DELIVERY.match(line)
            if delivery:
                self.deliveries[delivery.group(1)] += 1
            if line.strip() == "stopped":
                self.stopped = True

    def urls(self, timeout: float = 120.0) -> tuple[str, str]:
        """(API URL, AWS endpoint) from the banner."""
        def found() -> tuple[str, str] | None:
            text = "".join(self.banner)
            api = re.search(r"^  API        (http://\S+?)/", text, re.MULTILINE)
            aws = re.search(r"^  AWS        (http://\S+)", text, re.MULTILINE)
            if self.process.poll() is not None:
                raise RuntimeError("local.run exited: " + "".join(self.tail))
            return (api.group(1), aws.group(1)) if api and aws and "  try " in text else None
        return wait_until(found, timeout, "local.run's banner", 0.1)

    def peak_rss_mb(self) -> float:
        """VmHWM, the most resident memory a process has had, of the process and every process under it (its
        handler processes, local/handler_processes.py) added up: at most what they held together."""
        return sum(peak_rss_mb(pid) for pid in [self.process.pid, *descendants(self.process.pid)])

    def terminate(self, within: float) -> float | None:
        """SIGTERM; seconds until it exited (None: it did not, and was killed)."""
        sent = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.directory.remove()
            return None
        seconds = time.monotonic() - sent
        self._reader.join(2)
        self.directory.remove()
        return seconds

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.directory.remove()


# --- driving it ------------------------------------------------------------------------

def _due(lead: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=lead)).strftime("%Y-%m-%dT%H:%M:%SZ")


def task_body(task_id: str, strategy: str, queue_url: str, lead: float) -> dict[str, Any]:
    return {"id": task_id, "run_at": _due(lead), "strategy": strategy,
            "action": {"type": "sqs", "queue_url": queue_url, "message": task_id}}


def burst(api_url: str, token: str, count: int, body_for: Callable[[int], dict[str, Any]]) -> BurstResult:
    """``count`` POST /tasks at the same moment, each on its own connection."""
    result = BurstResult(count)
    ready = threading.Barrier(count)
    lock = threading.Lock()

    def post(index: int) -> None:
        body = body_for(index)
        request = urllib.request.Request(api_url + "/tasks", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {token}"})
        with contextlib.suppress(threading.BrokenBarrierError):
            ready.wait(30)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, answer = response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            status, answer = error.code, None
        except (ConnectionError, http.client.RemoteDisconnected) as exc:
            with lock:
                result.resets += 1
                result.errors.append(f"{type(exc).__name__}: {exc}")
            return
        except urllib.error.URLError as exc:
            with lock:
                if isinstance(exc.reason, ConnectionError):
                    result.resets += 1
                result.errors.append(f"URLError: {exc.reason}")
            return
        except OSError as exc:
            with lock:
                result.errors.append(f"{type(exc).__name__}: {exc}")
            return
        with lock:
            result.statuses[status] += 1
            if status == 201 and isinstance(answer, dict):
                result.ids.append(str(answer.get("id")))

    threads = [threading.Thread(target=post, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return result


class ActionCounter:
    """Drains the soak queue: how many times each task id's message arrived, and when each copy was
    sent (SQS's SentTimestamp, epoch seconds to the millisecond, set by the queue when it took the message)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.seen: Counter[str] = Counter()
        self.sent: dict[str, list[float]] = {}
        self.last_arrival = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def start(self) -> ActionCounter:
        self._thread.start()
        return self

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                                    WaitTimeSeconds=1, MessageSystemAttributeNames=["SentTimestamp"],
                                                    ).get("Messages", [])
                if messages:
                    self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
            except Exception:  # the runtime is stopping, or busy: try again
                self._stop.wait(0.5)
                continue
            with self._lock:
                for message in messages:
                    self.seen[message["Body"]] += 1
                    sent = message.get("Attributes", {}).get("SentTimestamp")
                    if sent is not None:
                        self.sent.setdefault(message["Body"], []).append(int(sent) / 1000)
                if messages:
                    self.last_arrival = time.monotonic()

    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.seen)

    def sent_times(self) -> dict[str, list[float]]:
        """Task id -> when each copy of its message was sent, in arrival order."""
        with self._lock:
            return {body: list(times) for body, times in self.sent.items()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def run_soak(tasks: int = TASKS, burst_size: int = BURST, *, in_flight: int = IN_FLIGHT,
             lead_seconds: tuple[int, int] = LEAD_SECONDS,
             out: Callable[[str], None] = print, python: str = sys.executable) -> SoakResult:
    """The whole soak (see the module's docstring), each task due ``lead_seconds`` (from, to) after it is
    created; never raises for a failed check."""
    began = time.monotonic()
    result = SoakResult(tasks=tasks)
    token = secrets.token_urlsafe(24)
    runtime = RuntimeProcess(token, python)
    counter: ActionCounter | None = None
    try:
        api_url, endpoint = runtime.urls()
        out(f"local.run pid {runtime.process.pid}: API {api_url}, AWS {endpoint}")
        api = ApiClient(api_url, token)
        aws = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "soak",
               "aws_secret_access_key": "soak"}
        sqs = boto3.client("sqs", **aws)  # type: ignore[call-overload]
        queue_url = sqs.create_queue(QueueName=f"soak-{secrets.token_hex(3)}")["QueueUrl"]
        counter = ActionCounter(sqs, queue_url).start()
        tag = secrets.token_hex(3)

        if burst_size:
            result.burst = burst(api_url, token, burst_size,
                                 lambda i: task_body(f"b{tag}-{i}", STRATEGIES[i % 3], queue_url, 5))
            out(f"burst: {result.burst.describe()}")
            result.expected.update(result.burst.ids)

        run_began = time.monotonic()
        before = len(result.expected)  # the burst's
        middle = tasks // 2
        with ThreadPoolExecutor(8) as pool:
            def create(index: int) -> None:
                task_id = f"t{tag}-{index}"
                lead = lead_seconds[0] + (index * 7919) % (lead_seconds[1] - lead_seconds[0] + 1)
                answer = _post(api, task_body(task_id, STRATEGIES[index % 3], queue_url, lead))
                if answer.status == 201:
                    result.expected.add(task_id)
                else:
                    result.create_failures.append(f"{task_id}: {answer.status} {answer.body}")

            for index in range(tasks):
                while result.created + before - counter.count() > in_flight:
                    time.sleep(0.05)
                    if time.monotonic() - counter.last_arrival > STALL_SECONDS:
                        raise TimeoutError(f"no task ran for {STALL_SECONDS:g}s")
                if index == middle:
                    result.conflict_status, result.replay_status, result.cancelled_id = \
                        _conflict_and_cancel(api, aws, tag, queue_url, result, lead_seconds[1] + QUIET_SECONDS)
                pool.submit(create, index)
                result.created += 1
                if index and index % 1000 == 0:
                    out(f"{index} created, {counter.count()} ran, peak RSS {runtime.peak_rss_mb():.0f} MB, "
                        f"{time.monotonic() - run_began:.0f}s")
        out(f"{result.created} created; waiting for the last ones to run")

        draining = counter

        def all_ran() -> bool:
            if time.monotonic() - draining.last_arrival > STALL_SECONDS:
                raise TimeoutError(f"no task ran for {STALL_SECONDS:g}s")
            return result.expected <= set(draining.snapshot())
        try:
            wait_until(all_ran, 24 * 3600, "every task to run", 0.5)
        except TimeoutError as exc:
            result.problems.append(str(exc))
        result.run_seconds = time.monotonic() - run_began
        time.sleep(QUIET_SECONDS)  # a duplicate would come now
        result.ran = counter.snapshot()
        result.peak_rss_mb = runtime.peak_rss_mb()
        counter.stop()
        counter = None
        result.stop_seconds = runtime.terminate(STOP_WITHIN_SECONDS + 5)
        result.exit_code = runtime.process.returncode
        result.stopped_printed = runtime.stopped
        result.failed_lines = runtime.failed
    except Exception as exc:
        result.problems.append(f"{type(exc).__name__}: {exc}")
        out("".join(list(runtime.tail)[-40:]))
    finally:
        if counter is not None:
            counter.stop()
        runtime.kill()
    result.wall_seconds = time.monotonic() - began
    result.check()
    return result


def _post(api: ApiClient, body: dict[str, Any], attempts: int = 3) -> Response:
    """POST /tasks; a connection error is tried again (the same body: 200 if the first one got through)."""
    for attempt in range(attempts):
        try:
            return api.post("/tasks", body)
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
            if attempt == attempts - 1:
                return Response(0, f"{type(exc).__name__}: {exc}")
            time.sleep(1)
    raise AssertionError("unreachable")


def _conflict_and_cancel(api: ApiClient, aws: dict[str, Any], tag: str, queue_url: str,
                         result: SoakResult, cancelled_lead: float) -> tuple[int, int, str]:
    """A POST whose transaction is cancelled (409), the same POST as an earlier one (200), and a task
    cancelled before its time, ``cancelled_lead`` seconds ahead (the latest task's lead and the quiet time
    after it: about when the soak counts).  (status of the conflict, of the replay, the cancelled id)"""
    taken = f"x{tag}-taken"
    boto3.client("dynamodb", **aws).put_item(TableName=TASKS_TABLE, Item={
        "PK": {"S": f"TASK#{taken}"}, "SK": {"S": "TASK"}, "note": {"S": "written by another program"}})
    conflict = _post(api, task_body(taken, "exact", queue_url, 60)).status
    replayed = task_body(f"x{tag}-again", "exact", queue_url, 5)
    if _post(api, replayed).status == 201:
        result.expected.add(replayed["id"])
    replay = _post(api, replayed).status
    cancelled = f"x{tag}-cancelled"
    created = _post(api, task_body(cancelled, "exact", queue_url, cancelled_lead)).status
    gone = api.delete(f"/tasks/{cancelled}").status if created == 201 else created
    if gone != 200:
        result.create_failures.append(f"{cancelled}: create {created}, cancel {gone}")
    return conflict, replay, cancelled


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--burst", type=int, default=BURST)
    args = parser.parse_args(list(argv) if argv is not None else None)
    result = run_soak(args.tasks, args.burst, out=lambda line: print(line, flush=True))
    print("\n".join(result.report()), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
