"""The offline runtime driven from outside, for the bench sections that measure it (P3, T).

``python -m local.run`` runs in its own process, as ``make run`` starts it
(``local.soak.RuntimeProcess``: free ports, its output read, its peak RSS from
/proc), against the moto server it starts.  The bench writes task items
straight into the tasks table (the item contract: any program may write one),
each with an SQS action that sends the task's id to a queue made for the run,
and ``local.soak.ActionCounter`` drains that queue.  An action's time is the
message's ``SentTimestamp``: the moment moto's SQS took the action's
SendMessage, to the millisecond, on the same machine's clock as the due times.
A task with a webhook action POSTs to the runtime's own receiver
(local/webhook_receiver.py, the origin the banner names, signed with the
stage's secret) at ``/bench/<id>``; its time is when the receiver read the
request (``GET /received``), on the same clock.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from bench.core import percentile
from local.client import wait_until
from local.soak import TASKS_TABLE, ActionCounter, RuntimeProcess
from local.stage import LOCAL_WEBHOOK_SECRET

REGION = "us-east-1"
ACCOUNT = "123456789012"          # moto's
STATE_TABLE = "timekeeper-local-state"
DUE_QUEUE = "timekeeper-local-due"
BATCH_WRITE = 25                  # BatchWriteItem's limit
START_SECONDS = 120.0             # local.run prints its banner within this
WEBHOOK_PATH = "/bench/"          # a webhook task POSTs to <the receiver>/bench/<its id>
WEBHOOK_POLL_SECONDS = 1.0        # GET /received at most this often while waiting (it runs in local.run)
WEBHOOK_LINE = re.compile(r"^  webhooks   receiver (http://\S+) ", re.MULTILINE)


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Planned:
    """One task (or baseline schedule) of a run: its id (also its action's message) and due time."""

    id: str
    strategy: str     # exact | interval | lazy, or "at" for a baseline Scheduler schedule
    due: int          # epoch seconds (whole: run_at and TTLs are whole seconds)
    action: str = "sqs"   # sqs (to the bench queue) | webhook (to the runtime's receiver)


def spread(prefix: str, strategy: str, count: int, first: float, seconds: float,
           action: str = "sqs") -> list[Planned]:
    """``count`` tasks due from ``first`` (epoch seconds) over ``seconds``, evenly, in whole seconds."""
    start = math.ceil(first)
    return [Planned(f"{prefix}-{i}", strategy, start + int(seconds * i / max(1, count)), action)
            for i in range(count)]


def webhook_times(received: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Task id -> the times the receiver read a signed POST of it (its ``GET /received`` records); an unsigned
    one (401) is not the action."""
    times: dict[str, list[float]] = {}
    for request in received:
        path = str(request.get("path", ""))
        if request.get("verified") and path.startswith(WEBHOOK_PATH):
            times.setdefault(path.removeprefix(WEBHOOK_PATH), []).append(float(request["received_at"]))
    return times


class OfflineRuntime:
    """One ``local.run`` process with the bench's queue drained; ``started`` is when its banner was read
    (epoch seconds, just after its sources, the interval processor's rule among them, were started)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.process = RuntimeProcess(secrets.token_urlsafe(24), env=env)
        self.counter: ActionCounter | None = None
        try:
            self.api_url, self.endpoint = self.process.urls(START_SECONDS)
            self.started = time.time()
            self.webhook_origin: str = wait_until(
                lambda: (m.group(1) if (m := WEBHOOK_LINE.search("".join(self.process.banner))) else None),
                10.0, "the webhook receiver in local.run's banner", 0.05)
            self._webhooks: dict[str, list[float]] = {}
            self._polled = 0.0
            config = BotoConfig(retries={"mode": "standard", "max_attempts": 5}, max_pool_connections=32)
            aws: dict[str, Any] = {"endpoint_url": self.endpoint, "region_name": REGION, "config": config,
                                   "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
            session = boto3.session.Session()  # its own: runtimes may be driven from threads at once
            self.sqs = session.client("sqs", **aws)
            self.dynamodb = session.client("dynamodb", **aws)
            self.scheduler = session.client("scheduler", **aws)
            name = f"bench-{secrets.token_hex(4)}"
            self.queue_url: str = self.sqs.create_queue(QueueName=name)["QueueUrl"]
            self.queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
            self.counter = ActionCounter(self.sqs, self.queue_url).start()
        except BaseException:
            self.close()
            raise

    # --- the workload ---------------------------------------------------------------

    def task_item(self, task: Planned) -> dict[str, Any]:
        action: dict[str, Any] = {"type": {"S": "sqs"}, "queue_url": {"S": self.queue_url},
                                  "message": {"S": task.id}}
        if task.action == "webhook":
            action = {"type": {"S": "webhook"}, "url": {"S": self.webhook_origin + WEBHOOK_PATH + task.id},
                      "secret": {"S": LOCAL_WEBHOOK_SECRET}, "body": {"S": json.dumps({"bench": task.id})}}
        return {"PK": {"S": f"BENCH#{task.id}"}, "SK": {"S": "TASK"}, "run_at": {"S": iso(task.due)},
                "strategy": {"S": task.strategy}, "action": {"M": action}}

    def write_items(self, table: str, items: Sequence[dict[str, Any]]) -> None:
        """BatchWriteItem, 25 at a time, until every item is written."""
        for start in range(0, len(items), BATCH_WRITE):
            requests: list[Any] = [{"PutRequest": {"Item": item}} for item in items[start:start + BATCH_WRITE]]
            while requests:
                left = self.dynamodb.batch_write_item(RequestItems={table: requests}).get("UnprocessedItems", {})
                requests = list(left.get(table, []))

    def write_tasks(self, tasks: Iterable[Planned]) -> None:
        """Task items in the tasks table, in due order (the stream handles them in the order written)."""
        self.write_items(TASKS_TABLE, [self.task_item(t) for t in sorted(tasks, key=lambda t: t.due)])

    def create_at_schedules(self, tasks: Iterable[Planned], group: str = "bench-at") -> None:
        """The seed's design: one Scheduler schedule ``at(due)`` per task, whose target sends the id
        straight to the bench queue (no stream, no executor)."""
        self.scheduler.create_schedule_group(Name=group)
        for task in tasks:
            self.scheduler.create_schedule(
                Name=task.id, GroupName=group, ScheduleExpression=f"at({iso(task.due)[:-1]})",
                ScheduleExpressionTimezone="UTC", FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                Target={"Arn": self.queue_arn, "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/bench", "Input": task.id})

    # --- what happened --------------------------------------------------------------

    def executed(self) -> int:
        return self.counter.count() if self.counter else 0

    def wait(self, ids: set[str], until: float, quiet: float) -> bool:
        """Until every id's action arrived (then ``quiet`` seconds more, for a late duplicate) or the
        epoch time ``until``.  Whether every one arrived."""
        assert self.counter is not None
        while time.time() < until:
            if ids <= self.arrived():
                time.sleep(max(0.0, min(quiet, until - time.time())))
                return True
            time.sleep(0.2)
        return ids <= self.arrived(force=True)

    def arrived(self, force: bool = False) -> set[str]:
        """The ids whose action came: the bench queue's and the receiver's (asked at most every
        WEBHOOK_POLL_SECONDS unless ``force``: it answers from inside local.run)."""
        assert self.counter is not None
        return set(self.counter.snapshot()) | set(self.webhook_received(force))

    def webhook_received(self, force: bool = True) -> dict[str, list[float]]:
        """Task id -> when the runtime's receiver read each signed POST of it (``GET /received``)."""
        if force or time.monotonic() - self._polled >= WEBHOOK_POLL_SECONDS:
            self._polled = time.monotonic()
            with urllib.request.urlopen(self.webhook_origin + "/received", timeout=10) as response:
                self._webhooks = webhook_times(json.load(response))
        return self._webhooks

    def sent_times(self) -> dict[str, list[float]]:
        """Task id -> the times each copy of its action came: SentTimestamp, or the receiver's time."""
        sent = self.counter.sent_times() if self.counter else {}
        return {**sent, **self.webhook_received()}

    def peak_rss_mb(self) -> float:
        return self.process.peak_rss_mb()

    def close(self) -> None:
        if self.process.process.poll() is None:
            self.process.terminate(5.0)
        self.process.kill()
        if self.counter is not None:  # after the process: its long poll ends at once
            self.counter.stop()
            self.counter = None

    def __enter__(self) -> OfflineRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- lateness ---------------------------------------------------------------------------


@dataclass
class Lateness:
    """How late each task's action came (seconds after its due time; the first copy counts), and what
    went wrong: early (a copy before the due time), missing (none by ``cut``), doubled (more than one)."""

    label: str
    count: int
    values: list[float] = field(default_factory=list)      # of the tasks that ran
    censored: list[float] = field(default_factory=list)    # of the missing ones: at least this late at the cut
    early: int = 0
    missing: int = 0
    doubled: int = 0

    @classmethod
    def of(cls, label: str, tasks: Sequence[Planned], sent: Mapping[str, Sequence[float]], cut: float) -> Lateness:
        result = cls(label, len(tasks))
        for task in tasks:
            copies = sorted(sent.get(task.id, ()))
            if not copies:
                result.missing += 1
                result.censored.append(max(0.0, cut - task.due))
                continue
            result.values.append(copies[0] - task.due)
            result.early += copies[0] < task.due
            result.doubled += len(copies) > 1
        return result

    def percentile(self, p: float) -> tuple[float, bool]:
        """The p-th percentile over every task, a missing one counted at its lateness at the cut, and
        whether that is only a lower bound (a missing task at or below the rank: it is later than that)."""
        everything = sorted([(v, False) for v in self.values] + [(c, True) for c in self.censored])
        if not everything:
            return float("nan"), False
        value = percentile([v for v, _ in everything], p)
        return value, any(missing for v, missing in everything if v <= value)

    def cell(self, p: float) -> str:
        value, lower_bound = self.percentile(p)
        if value != value:
            return "n/a"
        return (">= " if lower_bound else "") + f"{value:.2f}"

    @property
    def max(self) -> tuple[float, bool]:
        return self.percentile(100)

    def figures(self) -> dict[str, Any]:
        p50, p99, top = self.percentile(50), self.percentile(99), self.max
        return {"n": self.count, "ran": len(self.values), "p50_s": p50[0], "p99_s": p99[0], "max_s": top[0],
                "lower_bound": p99[1] or top[1], "early": self.early, "missing": self.missing,
                "doubled": self.doubled, "min_s": min(self.values) if self.values else float("nan")}


def peak_concurrency(spans: Sequence[tuple[float, float]]) -> int:
    """The most invocations running at once, from (ended at, seconds taken) pairs."""
    events = sorted([(end - took, 1) for end, took in spans] + [(end, -1) for end, _ in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak
