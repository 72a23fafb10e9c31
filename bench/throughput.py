"""T, throughput: tasks the offline runtime executes per second when many are due at once, against
the floor of the same minimum calls made straight at the same kind of moto server, and the runtime's
peak memory.

Each round starts a fresh ``python -m local.run`` (bench/offline.py), writes N exact task items
straight into the tasks table (BatchWriteItem, in one thread, for at most the round's budget), all
due at the same second T0, a little after the writes should be done (so the stream has
scheduled most of them by then), and waits until every action came or the budget ran out.  The
rate is the tasks executed divided by the time from T0 to the last action's SentTimestamp (to the
cut when the budget ran out first).

The floor is what the design must pay per task and nothing more: read what is due (GetItem of a
task item), claim it (a conditional UpdateItem), the action (SendMessage), settle (UpdateItem),
made from this process against the round's own moto server before the round, while the runtime is
idle, in a table of the bench's own (no stream, no TTL), for a few seconds at most (its rate needs
no more tasks than that).  It uses as many threads as the runtime has run executor invocations at
once (the most seen overlapping in its output; 1 before any round): a round that ran more at once
gets its floor measured again with that many, on another fresh runtime.

Peak RSS is /proc's VmHWM of the ``local.run`` process (moto's server lives in it) and of its handler
processes (local/handler_processes.py), added up: at idle, just after it started, and at the end of each
round.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from bench.core import CallCounter, Scale, Section, Target
from bench.offline import REGION, OfflineRuntime, Planned, iso, peak_concurrency
from local.soak import MAX_RSS_MB, TASKS_TABLE

TARGET_RATIO = 0.8
WRITE_SECONDS_PER_TASK = 0.0015   # moto's BatchWriteItem, unloaded, on a 2-core machine: T0 leaves this much
FLOOR_TABLE = "bench-floor"
SETTLE_SECONDS = 2.0              # after local.run's banner, before the floor: its sources are still starting


@dataclass
class Floor:
    tasks: int = 0
    seconds: float = 0.0
    concurrency: int = 1
    calls: int = 0

    @property
    def rate(self) -> float:
        return self.tasks / self.seconds if self.seconds > 0 else float("nan")


@dataclass
class Round:
    tasks: int
    budget: float
    written: int = 0
    write_seconds: float = 0.0
    executed: int = 0
    doubled: int = 0
    seconds: float = 0.0          # from T0 to the last action, or to the cut
    completed: bool = False
    concurrency: int = 1          # executor invocations at once, at most
    invocations: dict[str, int] = field(default_factory=dict)
    idle_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    floor: Floor = field(default_factory=Floor)

    @property
    def rate(self) -> float:
        return self.executed / self.seconds if self.seconds > 0 else 0.0

    @property
    def ratio(self) -> float:
        return self.rate / self.floor.rate if self.floor.rate > 0 else float("nan")


def run_round(runtime: OfflineRuntime, size: int, budget: float) -> Round:
    """``size`` exact tasks due at once; stops ``budget`` seconds after the writes began."""
    result = Round(size, budget)
    began = time.time()
    deadline = began + budget
    due = math.ceil(began + size * WRITE_SECONDS_PER_TASK + 1)
    tasks = [Planned(f"t{i}", "exact", due) for i in range(size)]
    items = [runtime.task_item(t) for t in tasks]
    for start in range(0, size, 100):  # stop writing when the budget is spent
        if time.time() >= deadline:
            break
        runtime.write_items(TASKS_TABLE, items[start:start + 100])
        result.written = min(size, start + 100)
    result.write_seconds = time.time() - began
    result.completed = runtime.wait({t.id for t in tasks}, deadline, quiet=1.0)
    cut = time.time()
    sent = runtime.sent_times()
    result.executed = sum(1 for t in tasks if sent.get(t.id))
    result.doubled = sum(1 for t in tasks if len(sent.get(t.id, ())) > 1)
    last = max((min(times) for times in sent.values() if times), default=cut)
    result.seconds = max(0.0, (last if result.completed else cut) - due)
    result.concurrency = max(1, peak_concurrency(runtime.process.spans.get("task_executor", [])))
    result.invocations = dict(runtime.process.invocations)
    result.peak_rss_mb = runtime.peak_rss_mb()
    return result


def measure_floor(runtime: OfflineRuntime, concurrency: int, limit: int, seconds: float) -> Floor:
    """At most ``limit`` tasks' minimum calls, ``concurrency`` at once, for at most ``seconds``."""
    config = BotoConfig(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=max(10, concurrency))
    aws: dict[str, Any] = {"endpoint_url": runtime.endpoint, "region_name": REGION, "config": config,
                           "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
    dynamodb, sqs = boto3.client("dynamodb", **aws), boto3.client("sqs", **aws)
    tag = secrets.token_hex(3)
    queue_url = sqs.create_queue(QueueName=f"bench-floor-{tag}")["QueueUrl"]
    due = iso(time.time())
    tasks = [Planned(f"f{tag}-{i}", "exact", 0) for i in range(limit + 1)]
    runtime.write_items(FLOOR_TABLE, [{**runtime.task_item(t), "PK": {"S": f"FLOOR#{t.id}"}} for t in tasks])
    numbers = iter(range(1, limit + 1))
    lock = threading.Lock()
    done = [0]

    def one(index: int) -> None:
        task = tasks[index]
        owner = secrets.token_hex(8)
        claim = {"PK": {"S": f"CLAIM#{task.id}"}, "SK": {"S": due}}
        dynamodb.get_item(TableName=FLOOR_TABLE, Key={"PK": {"S": f"FLOOR#{task.id}"}, "SK": {"S": "TASK"}},
                          ConsistentRead=True)
        dynamodb.update_item(TableName=FLOOR_TABLE, Key=claim, UpdateExpression="SET #s = :s, #o = :o",
                             ConditionExpression="attribute_not_exists(PK)",
                             ExpressionAttributeNames={"#s": "state", "#o": "owner"},
                             ExpressionAttributeValues={":s": {"S": "RUNNING"}, ":o": {"S": owner}})
        sqs.send_message(QueueUrl=queue_url, MessageBody=task.id)
        dynamodb.update_item(TableName=FLOOR_TABLE, Key=claim, UpdateExpression="SET #s = :s",
                             ConditionExpression="#o = :o",
                             ExpressionAttributeNames={"#s": "state", "#o": "owner"},
                             ExpressionAttributeValues={":s": {"S": "DONE"}, ":o": {"S": owner}})

    def worker(stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            with lock:
                index = next(numbers, None)
            if index is None:
                return
            one(index)
            with lock:
                done[0] += 1

    one(0)  # not counted: the clients load their models and open their connections
    counter = CallCounter().attach(dynamodb, sqs)
    began = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(began + seconds,), daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    floor = Floor(done[0], time.perf_counter() - began, concurrency, counter.total)
    sqs.delete_queue(QueueUrl=queue_url)
    return floor


def create_floor_table(runtime: OfflineRuntime) -> None:
    runtime.dynamodb.create_table(
        TableName=FLOOR_TABLE, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                              {"AttributeName": "SK", "AttributeType": "S"}])


def measure(scale: Scale) -> list[Round]:
    """Each round on a fresh runtime, the floor first while it is idle, with as many threads as the
    runtime ran executor invocations at once so far (1 at first); a round that ran more at once than
    its floor had threads gets its floor measured again, on another fresh runtime."""
    sizes = scale.pick((1_000, 10_000), (100, 300), (10,))
    budgets = scale.pick((45.0, 75.0), (6.0, 7.0), (15.0,))
    floor_seconds, floor_limit = scale.pick((10.0, 2_000), (1.5, 300), (1.0, 50))
    settle = scale.pick(SETTLE_SECONDS, 1.0, 1.0)
    rounds: list[Round] = []
    concurrency = 1
    for size, budget in zip(sizes, budgets, strict=True):
        with OfflineRuntime() as runtime:
            time.sleep(settle)  # its sources finish starting (queue URLs, shards, TTL settings)
            idle_rss = runtime.peak_rss_mb()
            create_floor_table(runtime)
            floor = measure_floor(runtime, concurrency, floor_limit, floor_seconds)
            result = run_round(runtime, size, budget)
        result.idle_rss_mb, result.floor = idle_rss, floor
        concurrency = max(concurrency, result.concurrency)
        rounds.append(result)
    again = [r for r in rounds if r.concurrency > r.floor.concurrency]
    if again:
        with OfflineRuntime() as idle:
            time.sleep(settle)
            create_floor_table(idle)
            floors: dict[int, Floor] = {}
            for result in again:
                if result.concurrency not in floors:
                    floors[result.concurrency] = measure_floor(idle, result.concurrency, floor_limit, floor_seconds)
                result.floor = floors[result.concurrency]
    return rounds


def section(rounds: list[Round]) -> Section:
    idle = max(r.idle_rss_mb for r in rounds)
    loaded = max(r.peak_rss_mb for r in rounds)
    rows: list[list[Any]] = []
    targets: list[Target] = []
    notes: list[str] = []
    for r in rounds:
        rows.append([r.tasks, r.written, r.executed, r.seconds, r.rate, r.floor.rate, r.ratio, r.concurrency,
                     r.peak_rss_mb])
        targets.append(Target(f"rate against the floor at {r.tasks:,} due tasks", r.ratio, TARGET_RATIO, "x",
                              kind="min"))
        if not r.completed:
            notes.append(f"{r.tasks:,} tasks: the budget ({r.budget:g} s from the first write) cut the round: "
                         f"{r.written:,} written in {r.write_seconds:.0f} s, {r.executed:,} executed, "
                         f"{r.tasks - r.executed:,} not; the rate is over the time until the cut")
        if r.doubled:
            notes.append(f"{r.tasks:,} tasks: {r.doubled} actions came twice")
    targets.append(Target("peak RSS of local.run under the load", loaded, MAX_RSS_MB, " MB"))
    notes.append("floor: GetItem + UpdateItem (claim) + SendMessage + UpdateItem (settle) per task; "
                 + "; ".join(f"before {r.tasks:,}: {r.floor.tasks:,} tasks in {r.floor.seconds:.1f} s with "
                             f"{r.floor.concurrency} thread{'s' if r.floor.concurrency > 1 else ''}, "
                             f"{r.floor.calls / max(1, r.floor.tasks):.1f} calls per task" for r in rounds))
    notes.append(f"peak RSS of local.run at idle (just started): {idle:.0f} MB; at the end of each round: "
                 + ", ".join(f"{r.tasks:,} tasks {r.peak_rss_mb:.0f} MB" for r in rounds))
    figures = {"rounds": [{
        "tasks": r.tasks, "budget_s": r.budget, "written": r.written, "write_s": round(r.write_seconds, 1),
        "executed": r.executed, "doubled": r.doubled, "seconds": round(r.seconds, 2), "completed": r.completed,
        "rate_per_s": r.rate, "floor_rate_per_s": r.floor.rate, "ratio": r.ratio, "concurrency": r.concurrency,
        "floor_tasks": r.floor.tasks, "floor_s": round(r.floor.seconds, 2), "floor_calls": r.floor.calls,
        "invocations": r.invocations, "peak_rss_mb": round(r.peak_rss_mb, 1)} for r in rounds],
        "idle_rss_mb": round(idle, 1), "peak_rss_mb": round(loaded, 1)}
    return Section(
        key="T", title="throughput of the offline runtime: exact tasks due at once, against the floor of the "
                       "minimum calls per task",
        columns=["due tasks", "written", "executed", "seconds", "tasks/s", "floor tasks/s", "ratio",
                 "executor concurrency", "peak RSS MB"],
        rows=rows, targets=targets, notes=notes, figures=figures)


def run(scale: Scale, plots: Path) -> list[Section]:
    return [section(measure(scale))]

