"""P4, cost: AWS calls, stream records and dollars per executed task, per strategy and path, end to end,
against seed 001's design.

Each workload (exact via SQS delay, exact via Scheduler, interval, lazy; N tasks each) runs in its own
moto account, driven in-process on an injected clock by ``tests/functional/lambda_sim.py``, which delivers
what Lambda's sources would (the stream in batches, the due queue with its delays, TTL deletes, Scheduler
firing, the processor's minute) to app.py's handlers through Chalice's test client.  The tasks are plain
items written by another program (``put_item`` through the bench's own client, not counted: the item write
is excluded), due a few minutes apart at arbitrary fractions of a second, each with an email action; and
the exact path via SQS delay once more per downstream action type (lambda, eventbridge, stepfunctions, on a
function, bus and state machine of the bench's moto: local/sample_targets.py; webhook, on the offline
receiver of local/webhook_receiver.py on a loopback port, its secret in moto's SSM), whose own AWS price per
execution is listed apart (bench/prices.py ``ACTION_PRICES``), as the email's is.

Counted: every call the app's clients make (a ``before-call`` hook), attributed to the function being
invoked; the emulation's own calls are not the app's, and Scheduler firing its target is a Scheduler
invocation, priced as such.  Calls include the action (one SendEmail); dollars exclude it.  Stream records
per task are read back from the table's stream (the item's own write, every write the app makes to it,
and for lazy tasks the TTL delete).  Write and read units are worked out from the items each call touches,
before and after, and every index the tables have (read from DescribeTable): bench/capacity.py.  Lambda:
every invocation is a request; its billed duration is its calls one after another at ``CALL_SECONDS`` each
(the action's excluded) plus the time it waited on the clock (an early message waits out its last second),
at the function's memory from .chalice/config.json.  Lambda's SQS poller makes one ReceiveMessage and one
DeleteMessageBatch per batch it delivers (its idle long polls are a fixed cost).  The interval processor's
queries are shared by the interval tasks due meanwhile (a fixed cost per minute: the more tasks, the cheaper
each); for the other strategies they are not counted.  Scheduler's delivery into the due queue is an SQS
request (one per schedule fired), as the poller's are.  Every service's requests are priced
(``prices.SERVICE_PRICES``).  The dollars target of exact tasks due past the horizon is the path the stage's
PAST_HORIZON chooses (``past_horizon``); the other path's row is printed without one.

Logs: the handlers run at the stage's LOG_LEVEL (.chalice/config.json), their JSON lines and EMF documents
counted in bytes (not printed) per invocation, priced as CloudWatch Logs ingestion, and so are Lambda's own
START, END and REPORT lines of each invocation (``platform_log_lines``).  Storage: each task's record in the
state table and its index entries, measured once the task finished, kept TASK_RECORD_RETENTION_DAYS (its
TTL), priced as DynamoDB storage; the tasks' own items are the user's, as their writes are.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chalice.test import Client, InvokeResponse, TestLambdaClient

from bench import capacity, prices, seed_tasks, task_stage
from bench.core import PROJECT, CallCounter, Scale, Section, Target, percentile
from bench.prices import Usage
from bench.stream_batch import MotoCpu
from chalicelib import ddb
from chalicelib.aws import Clients, Deps
from chalicelib.log import logger
from chalicelib.metrics import Metrics
from chalicelib.settings import Settings
from chalicelib.tasks import executor, interval, items, sweep_plan
from chalicelib.tasks.model import DueMessage, TaskKey
from local.sample_targets import SampleTargets, provision_sample_targets
from local.webhook_receiver import WebhookReceiver
from tests.aws_limits import item_size
from tests.configured_lambda import ConfiguredLambdaClient

if TYPE_CHECKING:
    from tests.fixtures import FakeClock

# app.py (and the test helpers that import it) are imported where they are used: after bench.task_stage
# has set the environment they read at import.

#: One AWS call's share of a Lambda's billed duration (a round trip in the region).
CALL_SECONDS = 0.020
#: The action's own calls: counted as calls, left out of the dollars (the action is the user's cost).
ACTION_OPERATIONS = frozenset({"sesv2:SendEmail", "lambda:Invoke", "events:PutEvents",
                               "stepfunctions:StartExecution"})
#: Each action type's call, one per execution.
ACTION_CALL = {"email": "sesv2:SendEmail", "lambda": "lambda:Invoke", "eventbridge": "events:PutEvents",
               "stepfunctions": "stepfunctions:StartExecution"}
#: The webhook action's signing secret, in moto's SSM (the receiver verifies each request with it).
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"timekeeper bench P4 signing key").decode()
WEBHOOK_PARAMETER = "/bench/p4/webhook"
#: Lambda's SQS poller: one ReceiveMessage and one DeleteMessageBatch per batch delivered.
POLLER_REQUESTS_PER_BATCH = 2
STREAM_BATCH = 100
TARGET_CALLS = {"exact via SQS delay": 5.0, "exact via Scheduler": 6.0}
#: $ a million beyond the action, every unit counted: one task a batch, full batches of 10 (the path past the horizon:
#: ``TARGET_PAST_HORIZON_DOLLARS``).
TARGET_DOLLARS = {"exact via SQS delay": 3.0, "exact via SQS delay, 10 due together": 2.0}


@dataclass(frozen=True)
class Workload:
    name: str
    strategy: str
    first_due: timedelta     # the first task's due time after the start
    spread: timedelta        # the last task's due time after the first
    functions: frozenset[str]  # the handlers whose invocations the tasks cost
    action: str = "email"    # the tasks' action type
    together: int = 1        # tasks due at the same time, in groups of this many (the executor's batches)
    deduplicated: bool = False  # the action says ``target_deduplicates``: one write a task, no claim
    window_seconds: int = 0  # each task's flexible window (``window_seconds``; 0: none)
    settings: tuple[tuple[str, Any], ...] = ()  # the stage's settings this workload changes

    @property
    def swept(self) -> bool:
        """Its tasks past the horizon wait for the sweeper (PAST_HORIZON=sweeper)."""
        return ("past_horizon", "sweeper") in self.settings

    def tasks(self, n: int) -> int:
        """How many tasks the workload runs at a scale of ``n``: whole groups of ``together``."""
        return n if self.together == 1 else self.together * max(1, n // self.together)


DENSE = "exact via SQS delay, 10 due together"
#: The due times of "exact via SQS delay", each task with a flexible window: tasks whose windows meet share a batch.
WINDOWED = "exact via SQS delay, window_seconds 300"
ONE_HOP = "exact via SQS delay, 16-26 min ahead (one re-queue hop)"
HORIZON_SECONDS = Settings.from_env({}).direct_queue_horizon_seconds
#: One write a task (docs/executor.md, "One write"): the target drops a repeat, in full batches of 10.
ONE_WRITE = tuple(f"exact via SQS delay, {action} action, target_deduplicates, 10 due together"
                  for action in ("stepfunctions", "webhook"))
PATH_FUNCTIONS = frozenset({"task_stream", "task_executor", "due_dead_letter"})
SWEPT = "exact via the sweeper (PAST_HORIZON=sweeper)"
#: The sweeper's row prices the processor's minute (its fixed cost: a Lambda request, a read of each progress, a
#: query a shard, their duration and log lines, measured on idle ticks) at this many tasks past the horizon a
#: minute (one a second); what a tick costs beyond an idle one (the entries read, the sends) is the tasks' own.
SWEEPER_TASKS_PER_MINUTE = 60.0
IDLE_TICKS = 3
WORKLOADS = (
    Workload("exact via SQS delay", "exact", timedelta(minutes=2), timedelta(minutes=10), PATH_FUNCTIONS),
    Workload("exact via Scheduler", "exact", timedelta(minutes=40), timedelta(minutes=10), PATH_FUNCTIONS,
             settings=(("past_horizon", "scheduler"),)),
    # due 13 to 23 min ahead with no horizon of the stage's own (the sweeper keeps what is due past 12 min): the
    # cost of a task due days ahead, with fewer minutes to emulate
    Workload(SWEPT, "exact", timedelta(minutes=13), timedelta(minutes=10), PATH_FUNCTIONS | {"interval_processor"},
             settings=(("past_horizon", "sweeper"), ("direct_queue_horizon_seconds", 0))),
    # due past SQS's 900 s delay and within DIRECT_QUEUE_HORIZON_SECONDS (1,800 s): the executor sends it back once
    Workload(ONE_HOP, "exact", timedelta(minutes=16), timedelta(minutes=10), PATH_FUNCTIONS),
    Workload("interval", "interval", timedelta(minutes=2), timedelta(minutes=10),
             PATH_FUNCTIONS | {"interval_processor"}),
    Workload("lazy", "lazy", timedelta(minutes=2), timedelta(minutes=10), PATH_FUNCTIONS),
    Workload(DENSE, "exact", timedelta(minutes=2), timedelta(minutes=10), PATH_FUNCTIONS, together=10),
    Workload(WINDOWED, "exact", timedelta(minutes=2), timedelta(minutes=10), PATH_FUNCTIONS, window_seconds=300),
    *(Workload(f"exact via SQS delay, {action} action", "exact", timedelta(minutes=2), timedelta(minutes=10),
               PATH_FUNCTIONS, action) for action in ("lambda", "eventbridge", "stepfunctions", "webhook")),
    *(Workload(name, "exact", timedelta(minutes=2), timedelta(minutes=10), PATH_FUNCTIONS, action, together=10,
               deduplicated=True) for name, action in zip(ONE_WRITE, ("stepfunctions", "webhook"), strict=True)),
)


# --- measuring the app's calls ----------------------------------------------------------------------------

class Capacity(capacity.Meter):
    """DynamoDB request units of the app's calls, worked out from the items before and after each write and the
    tables' own index definitions (bench/capacity.py); its reads of the items through ``reader`` are the bench's
    own work, left out of the handler's CPU time."""

    def __init__(self, reader: Any) -> None:
        super().__init__(reader, wrap=lambda hook: HANDLER_CPU.excluding(hook))


class LogBytes:
    """A stream that counts the bytes written to it (UTF-8): the app's log lines and EMF documents."""

    def __init__(self) -> None:
        self.bytes = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.bytes += len(text.encode("utf-8", "replace"))
        return len(text)

    def flush(self) -> None:
        pass

    def line(self, text: str) -> None:
        """An EMF document, as ``metrics.print_line`` writes it to stdout."""
        self.write(text + "\n")


def stage_log_level(stage_name: str = "prod") -> str:
    """The stage's LOG_LEVEL in .chalice/config.json (its own, or the shared one)."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    stage = config.get("stages", {}).get(stage_name, {})
    return str(stage.get("environment_variables", {}).get("LOG_LEVEL")
               or config.get("environment_variables", {}).get("LOG_LEVEL") or "INFO")


@contextmanager
def counted_logs(level: str) -> Iterator[LogBytes]:
    """The app's logger at ``level``, its lines counted instead of printed (the bench's stdout is its tables)."""
    import logging

    counter = LogBytes()
    handler = logger.registered_handler
    if not isinstance(handler, logging.StreamHandler):
        raise TypeError(f"the app's log handler is not a stream: {handler!r}")
    previous_stream, previous_level = handler.setStream(counter), logger.log_level
    logger.setLevel(level)
    try:
        yield counter
    finally:
        logger.setLevel(previous_level)
        handler.setStream(previous_stream)


@dataclass
class Invocations:
    """Per function: invocations, the app's calls made during them, their billed seconds and units."""

    count: Counter[str] = field(default_factory=Counter)
    calls: dict[str, Counter[str]] = field(default_factory=dict)
    billed_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    write_units: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    index_write_units: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # of write_units
    read_units: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    log_bytes: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    platform_log_bytes: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # START/END/REPORT
    cpu_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # see HandlerCpu
    cpu_before_action: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class Meter:
    """What the app's clients of the current workload count, and what each invocation cost."""

    counter: CallCounter
    capacity: capacity.Meter
    invocations: Invocations = field(default_factory=Invocations)
    logs: LogBytes = field(default_factory=LogBytes)


#: What Lambda's REPORT line says of a Python handler of this app: its Max Memory Used (MB) and a cold start's
#: Init Duration (ms), typical figures; each changes the line by a digit or two at most.
MAX_MEMORY_USED_MB = 92
INIT_DURATION_MS = 512.34


def platform_log_lines(billed_seconds: float, memory_mb: int, cold: bool) -> str:
    """The lines Lambda itself writes to the function's log group for one invocation, in its text log format
    (https://docs.aws.amazon.com/lambda/latest/dg/python-logging.html): START, END and REPORT (its Init Duration on
    a cold start), each with the invocation's request id (a UUID).  Pure."""
    request = "8f507cfc-2b45-4697-b07a-ac58fc914c95"
    ms = billed_seconds * 1000
    report = (f"REPORT RequestId: {request}\tDuration: {ms:.2f} ms\tBilled Duration: {math.ceil(ms)} ms\t"
              f"Memory Size: {memory_mb} MB\tMax Memory Used: {min(memory_mb, MAX_MEMORY_USED_MB)} MB\t"
              + (f"Init Duration: {INIT_DURATION_MS:.2f} ms\t" if cold else ""))
    return f"START RequestId: {request} Version: $LATEST\nEND RequestId: {request}\n{report}\n"


class MeteredLambda(ConfiguredLambdaClient):
    """Chalice's test Lambda client (each function's configured time in its context), noting what each
    invocation cost (the emulation invokes through it)."""

    def __init__(self, app: Any, config: Any, meter: Meter, clock: FakeClock) -> None:
        super().__init__(app, config)
        self.meter, self._clock = meter, clock

    def invoke(self, function_name: str, payload: Any | None = None) -> InvokeResponse:
        counter, capacity, out = self.meter.counter, self.meter.capacity, self.meter.invocations
        calls, slept = Counter(counter.calls), self._clock.slept
        writes, reads, logged = capacity.write_units, capacity.read_units, self.meter.logs.bytes
        indexed = capacity.index_write_units
        cpu = HANDLER_CPU.begin()
        try:
            return super().invoke(function_name, payload)
        finally:
            made = Counter(counter.calls)
            made.subtract(calls)
            made = +made
            cold = not out.count[function_name]  # each workload runs in new containers
            out.count[function_name] += 1
            out.calls.setdefault(function_name, Counter()).update(made)
            timed = sum(n for op, n in made.items() if op not in ACTION_OPERATIONS)
            billed = max(0.001, timed * CALL_SECONDS + self._clock.slept - slept)
            out.billed_seconds[function_name] += billed
            out.platform_log_bytes[function_name] += len(platform_log_lines(
                billed, memory_sizes().get(function_name, 128), cold).encode())
            out.write_units[function_name] += capacity.write_units - writes
            out.index_write_units[function_name] += capacity.index_write_units - indexed
            out.read_units[function_name] += capacity.read_units - reads
            out.log_bytes[function_name] += self.meter.logs.bytes - logged
            out.cpu_seconds[function_name] += HANDLER_CPU.since(cpu)
            out.cpu_before_action[function_name].extend(HANDLER_CPU.actions())


class MeteredClient(Client):
    """Chalice's test client whose Lambda client is a ``MeteredLambda``."""

    def __init__(self, app: Any, meter: Meter, clock: FakeClock) -> None:
        super().__init__(app, project_dir=str(PROJECT))
        self._meter, self._clock = meter, clock
        self._metered_lambda: MeteredLambda | None = None

    @property
    def lambda_(self) -> TestLambdaClient:
        if self._metered_lambda is None:
            self._metered_lambda = MeteredLambda(self._app, self._chalice_config, self._meter, self._clock)
        return self._metered_lambda


# --- one workload -------------------------------------------------------------------------------------------

@dataclass
class Measured:
    workload: Workload
    tasks: int
    executed: Counter[str]             # task id -> times its action ran
    invocations: Invocations
    stream_records: int
    schedules_fired: int
    memory_mb: dict[str, int]
    record_bytes: float = 0.0        # a finished task's record in the state table, on average
    stored_bytes: float = 0.0        # what it takes in storage: its index entries and overheads included
    record_days: float = 0.0         # how long it stays (TASK_RECORD_RETENTION_DAYS)
    idle_tick: Usage | None = None   # the sweeper's row: one idle processor tick (its fixed cost a minute)

    def _functions(self) -> list[str]:
        return [f for f in self.invocations.count if f in self.workload.functions]

    def calls(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for function in self._functions():
            total.update(self.invocations.calls.get(function, Counter()))
        return total

    def calls_per_task(self) -> float:
        return sum(self.calls().values()) / self.tasks

    @property
    def app_log_bytes(self) -> float:
        """The app's JSON lines and EMF documents."""
        return sum(self.invocations.log_bytes[f] for f in self._functions())

    @property
    def platform_log_bytes(self) -> float:
        """Lambda's own START, END and REPORT lines."""
        return sum(self.invocations.platform_log_bytes[f] for f in self._functions())

    def usage(self) -> Usage:
        """Per task; the sweeper's row with the processor's fixed cost a minute shared by SWEEPER_TASKS_PER_MINUTE
        tasks, in place of the idle ticks' worth of its invocations during the workload."""
        measured = self.measured_usage()
        if self.idle_tick is None:
            return measured
        ticks, idle = self.invocations.count["interval_processor"], self.idle_tick.as_dict()
        return Usage(**{kind: value - idle[kind] * ticks / self.tasks + idle[kind] / SWEEPER_TASKS_PER_MINUTE
                        for kind, value in measured.as_dict().items()})

    def measured_usage(self) -> Usage:
        inv, n = self.invocations, self.tasks
        functions = self._functions()
        calls = self.calls()
        sqs = sum(c for op, c in calls.items() if op.startswith("sqs:"))
        polled = sum(inv.count[f] for f in functions if f in ("task_executor", "due_dead_letter"))
        gb_seconds = sum(inv.billed_seconds[f] * self.memory_mb[f] / 1024 for f in functions) / n
        arm64 = lambda_architecture() == "arm64"  # priced at the architecture the stage deploys
        return Usage(
            lambda_requests=sum(inv.count[f] for f in functions) / n,
            lambda_gb_seconds=0.0 if arm64 else gb_seconds,
            lambda_arm64_gb_seconds=gb_seconds if arm64 else 0.0,
            write_units=sum(inv.write_units[f] for f in functions) / n,
            read_units=sum(inv.read_units[f] for f in functions) / n,
            # Scheduler's delivery of each schedule into the due queue is an SQS request too.
            sqs_requests=(sqs + POLLER_REQUESTS_PER_BATCH * polled + self.schedules_fired) / n,
            sns_publishes=sum(c for op, c in calls.items() if op.startswith("sns:")) / n,
            scheduler_invocations=self.schedules_fired / n,
            log_bytes=(self.app_log_bytes + self.platform_log_bytes) / n,
            kms_requests=sum(c for op, c in calls.items() if op == "ssm:GetParameter") / n,  # WithDecryption
            stored_byte_months=prices.byte_months(self.stored_bytes, self.record_days),
        )


def quiet() -> Metrics:
    """Metrics that go nowhere: the bench counts AWS calls; the EMF lines would only fill its output."""
    return Metrics(emit=lambda line: None)


def memory_sizes(stage_name: str = "prod") -> dict[str, int]:
    """Each function's memory (MB) in the stage, as Chalice resolves it (128 when nothing sets it)."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    stage = config.get("stages", {}).get(stage_name, {})
    functions = ("task_stream", "task_executor", "due_dead_letter", "interval_processor")
    sizes = {}
    for name in functions:
        sizes[name] = int(stage.get("lambda_functions", {}).get(name, {}).get("lambda_memory_size")
                          or stage.get("lambda_memory_size")
                          or config.get("lambda_functions", {}).get(name, {}).get("lambda_memory_size")
                          or config.get("lambda_memory_size") or 128)
    return sizes


def _item(workload: Workload, i: int, n: int, start: Any, settings: Any, targets: SampleTargets,
          hook: str = "") -> dict[str, Any]:
    groups = math.ceil(n / workload.together)
    step = workload.spread / max(1, groups - 1)
    group = i // workload.together
    fraction = timedelta(seconds=round((group * 0.37) % 1, 3))  # due at arbitrary fractions of a second
    due = start + workload.first_due + step * group + fraction
    window = {"window_seconds": workload.window_seconds} if workload.window_seconds else {}
    return {"PK": f"{_prefix(workload)}{i}", "SK": "TASK", "strategy": workload.strategy,
            settings.due_attribute: due.isoformat(), "action": _action(workload, i, targets, hook), **window}


def _action(workload: Workload, i: int, targets: SampleTargets, hook: str = "") -> dict[str, Any]:
    """The task's action: the workload's type, its JSON naming the task (``_subject``) as an email's subject does."""
    named = {"subject": _subject(workload, i)}
    actions: dict[str, dict[str, Any]] = {
        "email": {"type": "email", "to": "ada@example.com", "subject": _subject(workload, i), "body": "p4"},
        "lambda": {"type": "lambda", "function_arn": targets.function_arn, "payload": named},
        "eventbridge": {"type": "eventbridge", "event_bus_arn": targets.bus_arn, "source": "bench.p4",
                        "detail_type": "p4", "detail": named},
        "stepfunctions": {"type": "stepfunctions", "state_machine_arn": targets.machine_arn, "input": named},
        "webhook": {"type": "webhook", "url": f"{hook}/p4", "secret": f"ssm:{WEBHOOK_PARAMETER}",
                    "body": json.dumps(named)},
    }
    return {**actions[workload.action], **({"target_deduplicates": True} if workload.deduplicated else {})}


class Delivered:
    """The tasks (their ``_subject``) each downstream action call named, read from the app's calls."""

    def __init__(self) -> None:
        self.subjects: Counter[str] = Counter()
        self._lock = threading.Lock()

    def attach(self, clients: Clients) -> Delivered:
        clients.lambda_.meta.events.register("provide-client-params.lambda.Invoke", self._note)
        clients.events.meta.events.register("provide-client-params.events.PutEvents", self._note)
        clients.stepfunctions.meta.events.register("provide-client-params.states.StartExecution", self._note)
        return self

    def _note(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "Invoke":
            named = json.loads(params["Payload"])["payload"]
        elif model.name == "PutEvents":
            named = json.loads(params["Entries"][0]["Detail"])
        else:
            named = json.loads(params["input"])
        with self._lock:
            self.subjects[str(named.get("subject"))] += 1


def _prefix(workload: Workload) -> str:
    return f"P4#{[w.name for w in WORKLOADS].index(workload.name)}#"  # a variant of a row (a test's) keeps its prefix


def _subject(workload: Workload, i: int) -> str:
    return f"p4 {workload.name} {i}"


def _record_bytes(stage: task_stage.Stage, workload: Workload, n: int) -> tuple[float, float]:
    """The average DynamoDB size of the workload's tasks' records in the state table, as they were left, and what
    each takes in storage (its index entries included, 100 bytes overhead each: ``capacity.stored_bytes``)."""
    table = capacity.Table.described(stage.setup.dynamodb.describe_table(TableName=stage.settings.state_table)["Table"])
    sizes, stored = [], []
    for i in range(n):
        key = items.record_key(TaskKey(f"{_prefix(workload)}{i}", "TASK").task_id)
        found = stage.setup.dynamodb.get_item(TableName=stage.settings.state_table, Key=ddb.serialize(key),
                                              ConsistentRead=True).get("Item")
        sizes.append(item_size(found) if found else 0)
        stored.append(capacity.stored_bytes(table, found))
    return sum(sizes) / max(1, n), sum(stored) / max(1, n)


def _stream_records(stage: task_stage.Stage, prefix: str) -> int:
    """Records of the items whose key starts with ``prefix`` in the tasks table's stream, from its start."""
    streams = stage.setup.session.client("dynamodbstreams", region_name=stage.settings.region)
    arn = stage.settings.tasks_stream_arn
    [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    count = 0
    while iterator:
        page = streams.get_records(ShardIterator=iterator, Limit=1000)
        count += sum(1 for r in page["Records"] if r["dynamodb"]["Keys"]["PK"]["S"].startswith(prefix))
        if not page["Records"]:
            break
        iterator = page.get("NextShardIterator")
    return count


@contextmanager
def webhook_receiver(clock: FakeClock) -> Iterator[WebhookReceiver]:
    """The webhook action's receiver on a loopback port, on the emulation's clock (it checks the timestamp)."""
    receiver = WebhookReceiver(WEBHOOK_SECRET, clock=lambda: clock.now.timestamp()).start()
    try:
        yield receiver
    finally:
        receiver.stop()


def measure(workloads: Sequence[Workload], tasks: int,
            observe: Callable[[Workload, Clients, task_stage.Stage], None] = lambda *_: None) -> list[Measured]:
    """Each workload in turn on one provisioned account and one emulation, each with a new container's deps:
    ``tasks`` each (``Workload.tasks``); ``observe`` sees each workload's app clients once they are metered."""
    import app as app_module
    from tests.fixtures import FakeClock
    from tests.functional.lambda_sim import LambdaSim
    from tests.functional.task_support import emails_sent

    results = []
    clock = FakeClock()
    with (task_stage.stage() as stage, counted_logs(stage_log_level()) as logs, webhook_receiver(clock) as receiver,
          HANDLER_CPU.counting()):
        targets = provision_sample_targets(stage.setup)
        stage.setup.session.client("ssm", region_name=stage.settings.region).put_parameter(
            Name=WEBHOOK_PARAMETER, Value=WEBHOOK_SECRET, Type="SecureString", Overwrite=True)
        stage.settings = replace(stage.settings, task_action_target_arns=(
            targets.function_arn, targets.bus_arn, targets.machine_arn), task_webhook_origins=(receiver.origin,),
            task_webhook_secrets=(f"ssm:{WEBHOOK_PARAMETER}",), task_webhook_allow_loopback=True)
        # The processor has been running: its first run does not look back an hour.
        interval.save_progress(Deps(settings=stage.settings, clients=stage.setup, clock=clock, metrics=quiet()),
                               int(clock.now.timestamp()))
        meter = Meter(CallCounter(), Capacity(stage.setup.dynamodb), logs=logs)
        # The processor's minute matters only to the interval tasks: they run first, then it ticks once a day.
        ordered = sorted(workloads, key=lambda w: "interval_processor" not in w.functions)
        sim = LambdaSim(Deps(settings=stage.settings, clients=stage.setup, clock=clock, metrics=quiet()),
                        MeteredClient(app_module.app, meter, clock), clock)
        for workload in ordered:
            n = workload.tasks(tasks)
            task_stage.new_container()
            sim.processor_period = (timedelta(minutes=1) if "interval_processor" in workload.functions
                                    else timedelta(days=1))
            clients = Clients(stage.settings, session=stage.setup.session)
            built = task_stage.build_all(clients)
            meter.counter = CallCounter().attach(*built)
            HANDLER_CPU.attach(*built)
            delivered = Delivered().attach(clients)
            meter.capacity = Capacity(stage.setup.dynamodb).attach(clients.dynamodb)
            meter.invocations = Invocations()
            # PAST_HORIZON=scheduler but where a workload says otherwise: a tick of a stage that never kept a task
            # for the sweeper reads its progress only; the sweeper's row prices its minute (idle_tick)
            settings = replace(stage.settings, **{"past_horizon": "scheduler", **dict(workload.settings)})
            app_module.container.use(Deps(settings=settings, clients=clients, clock=clock, sleep=clock.sleep,
                                          metrics=Metrics(emit=logs.line)))
            sim.deps.settings = settings
            idle: Usage | None = None
            try:
                if workload.swept:  # the sweeper has been running; its idle minute measured first
                    interval.save_progress(Deps(settings=settings, clients=stage.setup, clock=clock, metrics=quiet()),
                                           int(clock.now.timestamp()) - 1, sweep_plan.PROGRESS_KEY)
                    for tick in range(IDLE_TICKS + 1):  # the first one catches up its lookahead, uncounted
                        clock.now += timedelta(minutes=1)
                        sim.step()
                        if tick == 0:
                            meter.invocations = Invocations()
                    idle = Measured(replace(workload, functions=frozenset({"interval_processor"})),
                                    max(1, meter.invocations.count["interval_processor"]), Counter(),
                                    meter.invocations, 0, 0, memory_sizes()).measured_usage()
                    meter.invocations = Invocations()
                observe(workload, clients, stage)
                start = clock.now
                for i in range(n):
                    stage.setup.dynamodb.put_item(TableName=stage.settings.tasks_table,
                                                  Item=ddb.serialize(_item(workload, i, n, start, stage.settings,
                                                                           targets, receiver.origin)))
                subjects = frozenset(_subject(workload, i) for i in range(n))

                def executed(subjects: frozenset[str] = subjects, workload: Workload = workload,
                             delivered: Delivered = delivered) -> Counter[str]:
                    if workload.action == "webhook":
                        return Counter(s for s in (str(json.loads(r.body).get("subject")) for r in receiver.received
                                                   if r.verified) if s in subjects)
                    if workload.action != "email":
                        return Counter({s: c for s, c in delivered.subjects.items() if s in subjects})
                    return Counter(str(m.subject) for m in emails_sent() if str(m.subject) in subjects)

                sim.run(until=lambda n=n: len(executed()) == n,
                        limit=workload.first_due + workload.spread + timedelta(hours=1))
                for _ in range(1000):  # the stream records the executions made, and anything else pending now
                    if not sim.step():
                        break
            finally:
                app_module.container.use(None)
                sim.deps.settings = stage.settings
                if workload.swept:  # the workloads after it run on a stage that never kept a task for the sweeper
                    stage.setup.dynamodb.delete_item(TableName=settings.state_table, Key=sweep_plan.PROGRESS_KEY)
            results.append(Measured(workload, n, executed(), meter.invocations,
                                    _stream_records(stage, _prefix(workload)), sim.schedules_fired, memory_sizes(),
                                    *_record_bytes(stage, workload, n), stage.settings.task_record_retention_days,
                                    idle_tick=idle))
            sim.schedules_fired = 0
    return sorted(results, key=lambda m: workloads.index(m.workload))


def sweeper_row(section: Section, figures: dict[str, Any], measured: Sequence[Measured]) -> None:
    """The sweeper's row against Scheduler's: the processor's fixed cost a month."""
    by_name = {m.workload.name: m for m in measured}
    swept = by_name.get(SWEPT)
    idle = swept.idle_tick if swept is not None else None
    if swept is None or idle is None:
        return
    dollars, month = prices.per_million(swept.usage()), prices.per_million(idle) / 1e6 * 60 * 24 * 30
    figures["sweeper"] = {"dollars_per_million": dollars, "tasks_per_minute": SWEEPER_TASKS_PER_MINUTE,
                          "idle_tick": idle.as_dict(), "fixed_dollars_a_month": month}
    scheduler = by_name.get("exact via Scheduler")
    versus = f"; via Scheduler ${prices.per_million(scheduler.usage()):.2f}" if scheduler else ""
    section.notes.append(
        f"{SWEPT}: ${dollars:.2f} a million{versus}; the processor's minute (a Lambda request, each progress read, "
        f"a query of each of SWEEP_SHARDS partitions, its duration and lines, measured on {IDLE_TICKS} idle ticks) "
        f"is a fixed ${month:.2f} a month, shared in the row by {SWEEPER_TASKS_PER_MINUTE:g} tasks a minute past "
        "the horizon; what a tick costs beyond an idle one (the entries read, the sends ten to a call) is the tasks'")


#: Exact tasks due past the horizon, every unit counted, on the stage's default path (PAST_HORIZON): Scheduler's, or
#: a cheaper one of the same precision (the sweeper).
TARGET_PAST_HORIZON_DOLLARS = 4.50
#: Each path an exact task due past the horizon may take (PAST_HORIZON's values) and the workload measuring it.
PAST_HORIZON_PATHS = {dict(w.settings)["past_horizon"]: w.name for w in WORKLOADS if "past_horizon" in dict(w.settings)}


def past_horizon(stage_name: str = "prod") -> str:
    """The stage's PAST_HORIZON in .chalice/config.json (the stage's, then the top-level one; the setting's default
    when neither sets it): the default path of exact tasks due past the horizon."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    env = {**config.get("environment_variables", {}),
           **config.get("stages", {}).get(stage_name, {}).get("environment_variables", {})}
    return Settings.from_env({k: str(v) for k, v in env.items() if k == "PAST_HORIZON"}).past_horizon


def past_horizon_targets(dollars: Mapping[str, float], default: str) -> tuple[list[Target], list[str]]:
    """(the target of the ``default`` path past the horizon, dollars a million beyond the action, and a note of
    each other path measured, which has none: optional) from each workload's ``dollars``. Pure."""
    targets, notes = [], []
    for value, name in PAST_HORIZON_PATHS.items():
        if name not in dollars:
            continue
        if value == default:
            targets.append(Target(f"exact tasks due past the horizon, the stage's default path (PAST_HORIZON={value}): "
                                  "$ per million tasks beyond the action", dollars[name], TARGET_PAST_HORIZON_DOLLARS,
                                  "$"))
        else:
            notes.append(f"{name}, the optional path past the horizon (PAST_HORIZON={value}; the stage's is "
                         f"{default}): ${dollars[name]:.2f} a million beyond the action, no target")
    return targets, notes


# --- the executor alone: one message, and full batches of 10 ---------------------------------------------------

EXECUTOR_BATCH = 10
TARGET_EXECUTOR_ONE = 3.0      # calls besides the action: read what is due, claim, settle
TARGET_EXECUTOR_BATCHED = 2.0  # on average over full batches of 10


def executor_calls(batches: int, batch_size: int) -> float:
    """AWS calls per one-time exact task the executor makes besides its action (SendEmail), when its due
    messages come ``batch_size`` at a time, all due now (``executor.run_batch`` as ``task_executor`` calls it)."""
    from tests.fixtures import FakeClock

    with task_stage.stage() as stage:
        clock = FakeClock()
        clients = Clients(stage.settings, session=stage.setup.session)
        counter = CallCounter().attach(*task_stage.build_all(clients))
        deps = Deps(settings=stage.settings, clients=clients, clock=clock, sleep=clock.sleep, metrics=quiet())
        n = batches * batch_size
        for i in range(n):
            item = {"PK": f"EXEC#{i}", "SK": "TASK", "run_at": clock.now.isoformat(), "strategy": "exact",
                    "action": {"type": "email", "to": "bench@example.com", "subject": f"exec-{i}", "body": "b"}}
            stage.setup.dynamodb.put_item(TableName=stage.settings.tasks_table, Item=ddb.serialize(item))
        for b in range(batches):
            records = [{"messageId": f"m{i}", "body": DueMessage(TaskKey(f"EXEC#{i}", "TASK"), clock.now).to_json()}
                       for i in range(b * batch_size, (b + 1) * batch_size)]
            assert executor.run_batch(deps, records) == {"batchItemFailures": []}
        calls = counter.calls
        return (counter.total - calls["sesv2:SendEmail"]) / n


# --- the exactly-once floor ---------------------------------------------------------------------------------

#: The app's log and metric bytes per task at INFO (CloudWatch Logs ingestion) at most this many.
TARGET_LOG_BYTES = 300.0
#: Our dollars at most this many times the floor of the same path and density.
TARGET_FLOOR_RATIO = 1.10
SEND_BATCH = 10  # SendMessageBatch: the stream sends the due messages of a burst ten to a call


def floor_usage(batch: int, scheduler: bool = False, read: bool = False, writes: float = 2.0) -> Usage:
    """What no exactly-once execution can do without, per task, when the executor's deliveries carry ``batch``
    tasks: a claim write and a settle write (one unit each; ``writes`` 1: the settle alone, where the target drops
    a repeat), the queue (the send, ten to a SendMessageBatch, or with ``scheduler`` Scheduler's invocation and its
    own SQS request a task; the poller's receive and delete and one Lambda request a batch; no duration) and, with
    ``read``, the read of the item (strongly consistent: a unit, alone or in a BatchGetItem)."""
    return Usage(
        lambda_requests=1 / batch,
        write_units=writes,
        read_units=1.0 if read else 0.0,
        sqs_requests=(1.0 if scheduler else 1 / SEND_BATCH) + POLLER_REQUESTS_PER_BATCH / batch,
        scheduler_invocations=1.0 if scheduler else 0.0,
    )


def above_floor(usage: Usage, floor: Usage) -> dict[str, float]:
    """Dollars per million by which ``usage`` exceeds ``floor``, by kind of usage (only the kinds above it). Pure."""
    ours, least = prices.cost(usage), prices.cost(floor)
    return {kind: (ours[kind] - least[kind]) * 1e6 for kind in ours if ours[kind] - least[kind] > 1e-12}


def headroom(floor: Usage, batch: int, arm64: bool, memory_mb: int, ratio: float = 1.10,
             scheduler: bool = False) -> dict[str, float]:
    """What a target of ``ratio`` x the floor leaves for everything the floor omits, dollars per million: the
    allowance, the item's read and the duration of the read and the floor's own writes (``CALL_SECONDS`` each, one
    after another, a batch's tasks at once: the floor counts no duration), with ``scheduler`` the re-queue hop that
    Scheduler's 60 s firing precision forces (a send, the poller's receive and delete, a Lambda request), and what
    is left after them, with the bytes of log a task that would buy with no record kept.
    Pure: the arithmetic behind the 1.10x targets (docs/benchmarks.md)."""
    allowance = (ratio - 1) * prices.per_million(floor)
    read = prices.per_million(replace(floor, read_units=1.0)) - prices.per_million(floor)
    # the read, then the writes; a batch's tasks run at once, so a batch's invocation is shared by its tasks
    gb_seconds = (1 + floor.write_units) * CALL_SECONDS / batch * memory_mb / 1024
    duration = prices.per_million(Usage(**{"lambda_arm64_gb_seconds" if arm64 else "lambda_gb_seconds": gb_seconds}))
    hop = prices.per_million(Usage(sqs_requests=1 + POLLER_REQUESTS_PER_BATCH, lambda_requests=1)) if scheduler else 0.0
    left = allowance - read - duration - hop
    return {"allowance": allowance, "read": read, "duration_of_its_calls": duration, "hop": hop, "left": left,
            "log_bytes_left_with_no_record": max(0.0, left) / 1e6 / prices.LOG_INGESTION.usd}


#: How the note on a floor's gap names each kind of usage.
GAP_LABELS = {"lambda_requests": "Lambda requests", "lambda_gb_seconds": "duration", "lambda_arm64_gb_seconds":
              "duration", "write_units": "write units", "read_units": "the read", "sqs_requests": "SQS requests",
              "sns_publishes": "SNS", "scheduler_invocations": "Scheduler", "log_bytes": "logs",
              "stored_byte_months": "the record kept", "kms_requests": "KMS"}
#: The floor each measured workload is held to: (executor batch, through Scheduler).
FLOORS = {"exact via SQS delay": (1, False), DENSE: (EXECUTOR_BATCH, False), "exact via Scheduler": (1, True)}
#: Write units a task where the target drops a repeat: the settle alone.
ONE_WRITE_UNITS = 1.0


# --- the seed's design ------------------------------------------------------------------------------------

def seed_usage(n: int, memory_mb: int = 128) -> Usage:
    """Seed 001 per task: its INSERT in the stream consumer's batch (up to 100, CreateSchedule one after another),
    one Scheduler invocation and one invocation of the target function (which only runs the action)."""
    stream_invocations = math.ceil(n / STREAM_BATCH) / n
    gb = memory_mb / 1024
    return Usage(
        lambda_requests=stream_invocations + seed_tasks.TARGET_INVOCATIONS,
        lambda_gb_seconds=(seed_tasks.CREATE_SCHEDULE_CALLS * CALL_SECONDS + 0.001) * gb,
        scheduler_invocations=seed_tasks.SCHEDULER_INVOCATIONS,
    )


SEED_CALLS_PER_TASK = seed_tasks.CREATE_SCHEDULE_CALLS + 1  # and the action, in the target
SEED_STREAM_RECORDS_PER_TASK = 1


# --- the section --------------------------------------------------------------------------------------------

def run(scale: Scale, plots: Path) -> list[Section]:
    n = scale.pick(50, 12, 4)
    seed = seed_usage(n)
    seed_dollars = prices.per_million(seed)
    section = Section(
        key="P4", title=f"cost per executed task, end to end ({n} tasks per strategy), against seed 001's design",
        columns=["strategy / path", "tasks", "ran once", "AWS calls/task", "executor calls/task",
                 "stream records/task", "Lambda invocations/task", "write units/task", "read units/task",
                 "$ per million tasks", "vs seed", "action's own $ per million (apart)"])
    figures: dict[str, Any] = {"tasks": n, "call_seconds": CALL_SECONDS, "prices": prices.table(), "workloads": {},
                               "log_level": stage_log_level()}
    measured = measure(WORKLOADS, n)
    for m in measured:
        workload = m.workload
        usage = m.usage()
        dollars = prices.per_million(usage)
        once = sum(1 for c in m.executed.values() if c == 1)
        executor = sum(m.invocations.calls.get("task_executor", Counter()).values()) / m.tasks
        section.rows.append([workload.name, m.tasks, once, m.calls_per_task(), executor, m.stream_records / n,
                             usage.lambda_requests, usage.write_units, usage.read_units, dollars,
                             dollars / seed_dollars, prices.action_per_million(workload.action)])
        calls = m.calls()
        figures["workloads"][workload.name] = {
            "tasks": m.tasks, "executed_once": once,
            "executed_twice_or_more": sum(1 for c in m.executed.values() if c > 1),
            "missing": m.tasks - len(m.executed), "calls_per_task": m.calls_per_task(),
            "calls_by_operation": dict(calls), "invocations": dict(m.invocations.count),
            "billed_seconds": dict(m.invocations.billed_seconds), "stream_records": m.stream_records,
            "schedules_fired": m.schedules_fired, "usage_per_task": usage.as_dict(),
            "log_bytes_per_task": m.app_log_bytes / m.tasks, "record_bytes": m.record_bytes, "stored_bytes": m.stored_bytes,
            "record_days": m.record_days, "platform_log_bytes_per_task": m.platform_log_bytes / m.tasks,
            "index_write_units_per_task": sum(m.invocations.index_write_units[f] for f in m._functions()) / m.tasks,
            "dollars_per_task": prices.cost(usage), "dollars_per_million": dollars, "action": workload.action,
            "action_dollars_per_million": prices.action_per_million(workload.action)}
        section.notes.append(f"{workload.name}, calls per task: " + ", ".join(
            f"{op.split(':')[1]} {c / m.tasks:.2f}" for op, c in calls.most_common()))
        if workload.name in FLOORS:
            batch, scheduler = FLOORS[workload.name]
            floor = prices.per_million(floor_usage(batch, scheduler))
            read = prices.per_million(floor_usage(batch, scheduler, read=True)) - floor
            figures["workloads"][workload.name].update(floor_dollars_per_million=floor, floor_batch=batch,
                                                       floor_read_dollars_per_million=read)
            density = "one task per batch" if batch == 1 else f"full batches of {batch}"
            section.notes.append(
                f"{workload.name}: the exactly-once floor, {density}: ${floor:.2f} a million (a claim and a settle "
                "write, " + ("Scheduler's invocation and its SQS request" if scheduler else "the send, ten to a call")
                + f", the poller's receive and delete and a Lambda request a batch; the read adds ${read:.3f}); "
                f"ours ${dollars:.2f}, {dollars / floor:.2f}x")
            gap = above_floor(usage, floor_usage(batch, scheduler))
            room = headroom(floor_usage(batch, scheduler), batch, lambda_architecture() == "arm64",
                            m.memory_mb.get("task_executor", 128), TARGET_FLOOR_RATIO, scheduler)
            figures["workloads"][workload.name].update(above_floor_dollars_per_million=gap, headroom=room)
            section.notes.append(
                f"{workload.name}: above its floor, $ a million: " + ", ".join(
                    f"{GAP_LABELS.get(kind, kind)} {value:.3f}" for kind, value in
                    sorted(gap.items(), key=lambda kv: -kv[1]))
                + f"; {TARGET_FLOOR_RATIO:.2f}x allows ${room['allowance']:.3f}, of which the read takes "
                f"${room['read']:.3f} and the duration of the read and the two writes "
                f"({CALL_SECONDS * 1000:.0f} ms each) ${room['duration_of_its_calls']:.3f}"
                + (f", the re-queue hop Scheduler's 60 s precision forces ${room['hop']:.2f}" if scheduler else "")
                + f": ${room['left']:.3f} left, {room['log_bytes_left_with_no_record']:.0f} bytes of log a task with "
                "no record kept")
            section.targets.append(Target(f"{workload.name}: $ per million / the exactly-once floor ({density})",
                                          dollars / floor, TARGET_FLOOR_RATIO, "x"))
            section.targets.append(Target(f"{workload.name}: log and metric bytes per task at {stage_log_level()}",
                                          m.app_log_bytes / m.tasks, TARGET_LOG_BYTES, " B"))
        if workload.name in TARGET_CALLS:
            section.targets.append(Target(f"{workload.name}: AWS calls per task", m.calls_per_task(),
                                          TARGET_CALLS[workload.name]))
        if workload.name in TARGET_DOLLARS:
            section.targets.append(Target(f"{workload.name}: $ per million tasks beyond the action", dollars,
                                          TARGET_DOLLARS[workload.name], "$"))
        if workload.name in ONE_WRITE:
            floor = prices.per_million(floor_usage(EXECUTOR_BATCH, writes=ONE_WRITE_UNITS))
            figures["workloads"][workload.name].update(floor_dollars_per_million=floor, floor_batch=EXECUTOR_BATCH,
                                                       floor_write_units=ONE_WRITE_UNITS)
            section.notes.append(
                f"{workload.name}: the floor with one write (the target drops a repeat, so no claim: "
                f"docs/executor.md, One write), full batches of {EXECUTOR_BATCH}: ${floor:.2f} a million; ours "
                f"${dollars:.2f}, {dollars / floor:.2f}x, {usage.write_units:.2f} write units a task; the seed's "
                f"${seed_dollars:.2f}")
            section.targets.append(Target(f"{workload.name}: write units per task", usage.write_units,
                                          ONE_WRITE_UNITS))
            section.targets.append(Target(f"{workload.name}: $ per million tasks beyond the action, below the "
                                          "seed's", dollars, seed_dollars, "$"))
    by_name = {m.workload.name: prices.per_million(m.usage()) for m in measured}
    sweeper_row(section, figures, measured)
    default = past_horizon()
    targets, notes = past_horizon_targets(by_name, default)
    figures["past_horizon"] = {"default": default, "paths": dict(PAST_HORIZON_PATHS)}
    section.targets += targets
    section.notes += notes
    if ONE_HOP in by_name and "exact via Scheduler" in by_name:
        hop, schedule = by_name[ONE_HOP], by_name["exact via Scheduler"]
        figures["one_hop_vs_scheduler"] = {"one_hop": hop, "scheduler": schedule, "saved": schedule - hop}
        section.notes.append(
            f"due 15 to 30 minutes ahead (within DIRECT_QUEUE_HORIZON_SECONDS = {HORIZON_SECONDS}): "
            f"the due queue with one re-queue hop ${hop:.2f} a million, a Scheduler schedule ${schedule:.2f}: "
            f"${schedule - hop:.2f} less a million")
    by_measured = {m.workload.name: m for m in measured}
    if WINDOWED in by_measured and "exact via SQS delay" in by_measured:
        plain, windowed = (by_measured[name].invocations.count["task_executor"] / by_measured[name].tasks
                           for name in ("exact via SQS delay", WINDOWED))
        seconds = by_measured[WINDOWED].workload.window_seconds
        figures["window"] = {"executor_invocations_per_task": {"without": plain, "with": windowed},
                             "window_seconds": seconds}
        section.notes.append(f"window_seconds: task_executor invocations per task, the same due times: {plain:.2f} "
                             f"without a window, {windowed:.2f} with window_seconds {seconds} (tasks whose windows "
                             "meet share a batch)")
    one, batched = executor_calls(n, 1), executor_calls(max(1, n // EXECUTOR_BATCH), EXECUTOR_BATCH)
    figures["executor_calls_besides_action"] = {"one_message": one, f"batches_of_{EXECUTOR_BATCH}": batched}
    section.notes.append(f"the executor alone, calls per one-time task besides the action: {one:.2f} a message at "
                         f"a time, {batched:.2f} in full batches of {EXECUTOR_BATCH} (one BatchGetItem a batch, "
                         "then a claim and a settle each)")
    section.targets.append(Target("executor: calls per task besides the action, one message", one,
                                  TARGET_EXECUTOR_ONE))
    section.targets.append(Target(f"executor: calls per task besides the action, batches of {EXECUTOR_BATCH}",
                                  batched, TARGET_EXECUTOR_BATCHED))
    section.rows.append(["seed 001 (CreateSchedule + Scheduler invokes the target)", n, "n/a",
                         float(SEED_CALLS_PER_TASK), 0.0, float(SEED_STREAM_RECORDS_PER_TASK),
                         seed.lambda_requests, 0.0, 0.0, seed_dollars, 1.0, prices.action_per_million("email")])
    figures["seed"] = {"usage_per_task": seed.as_dict(), "dollars_per_task": prices.cost(seed),
                       "dollars_per_million": seed_dollars, "calls_per_task": SEED_CALLS_PER_TASK}
    section.figures = figures
    section.notes.append(
        f"calls include the action (one SendEmail, Invoke, PutEvents or StartExecution); dollars exclude it, its "
        "own price per execution is the last column (SES $0.10 per 1,000 emails; a Lambda request, the function's "
        "duration being yours; an EventBridge event; a Step Functions Standard state transition per state run); "
        f"Lambda duration = calls x "
        f"{CALL_SECONDS * 1000:.0f} ms + waits, at the functions' memory; tasks due "
        "a few seconds apart (batches of one message), written in one burst by another program (stream batches "
        "of up to 100; an API task's record adds write units to the same transaction, not calls); "
        "prices: bench/prices.py (us-east-1 list prices, sources and dates)")
    section.notes.append(
        f"logs at {stage_log_level()} (the app's JSON lines and EMF, and Lambda's own START/END/REPORT lines, priced "
        "as CloudWatch Logs ingestion), bytes per task, the app's + Lambda's: " + ", ".join(
            f"{m.workload.name} {m.app_log_bytes / m.tasks:,.0f} + {m.platform_log_bytes / m.tasks:,.0f}"
            for m in measured)
        + "; a finished task's record kept TASK_RECORD_RETENTION_DAYS "
        f"({measured[0].record_days:g} days, its TTL) and priced as storage, bytes (its index entries and overheads "
        "included): " + ", ".join(f"{m.workload.name} {m.stored_bytes:,.0f}" for m in measured)
        + "; Scheduler's delivery into the due queue counted as one SQS request a task")
    return [section, memory_section(measured)]


# --- Lambda memory and architecture: the handlers' CPU seconds per task, priced at each memory size -------------

class HandlerCpu:
    """The handlers' own CPU time, in-process: the process's CPU time during an invocation (every thread's: the
    executor and the stream handler make their calls on threads), less moto's, answering the calls (AWS's side of a
    round trip: each answer's thread time, as bench/stream_batch.py's ``MotoCpu`` counts it), less the bench's own
    work inside the app's calls (hooks wrapped by ``excluding``: ``Capacity``'s reads of the items, moto's answers to
    them included once)."""

    def __init__(self) -> None:
        self.bench_seconds = 0.0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._moto = MotoCpu(skip=lambda: bool(getattr(self._local, "excluded", False)))  # the bench's own: below
        self._invocation: tuple[float, float, float] | None = None
        self._actions: list[float] = []

    @property
    def moto_seconds(self) -> float:
        return self._moto.seconds

    @contextmanager
    def counting(self) -> Iterator[HandlerCpu]:
        with self._moto.counting():
            yield self

    def excluding(self, hook: Any) -> Any:
        """``hook`` (a botocore event handler), its CPU time counted as the bench's, not the handler's."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._local, "excluded", False):
                return hook(*args, **kwargs)
            self._local.excluded = True
            start = time.thread_time()
            try:
                return hook(*args, **kwargs)
            finally:
                self._local.excluded = False
                with self._lock:
                    self.bench_seconds += time.thread_time() - start

        return timed

    def start(self) -> tuple[float, float, float]:
        with self._lock:
            return time.process_time(), self.moto_seconds, self.bench_seconds

    def begin(self) -> tuple[float, float, float]:
        """An invocation starts: ``start()``, and the CPU before each action call is noted from here."""
        started = self.start()
        with self._lock:
            self._invocation, self._actions = started, []
        return started

    def actions(self) -> list[float]:
        """The handler's CPU seconds from the invocation's start to each of its action calls (``begin``)."""
        with self._lock:
            taken, self._actions, self._invocation = self._actions, [], None
        return taken

    def attach(self, *clients: Any) -> HandlerCpu:
        """Note the handler's CPU time at each action call the given clients make (``ACTION_OPERATIONS``)."""
        for client in clients:
            client.meta.events.register("before-call.*.*", self._action)
        return self

    def _action(self, model: Any, **_: Any) -> None:
        started = self._invocation
        if started is not None and f"{model.service_model.service_name}:{model.name}" in ACTION_OPERATIONS:
            spent = self.since(started)
            with self._lock:
                self._actions.append(spent)

    def since(self, started: tuple[float, float, float]) -> float:
        """The handler's CPU seconds since ``started`` (``start()``)."""
        cpu, moto, bench = started
        with self._lock:
            return max(0.0, time.process_time() - cpu - (self.moto_seconds - moto) - (self.bench_seconds - bench))


HANDLER_CPU = HandlerCpu()

#: Lambda allocates CPU in proportion to memory: the equivalent of one vCPU at 1,769 MB
#: (https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html).
FULL_VCPU_MB = 1769
MEMORY_SIZES = (128, 256, 512, 1024, 1769)
#: What the handler's CPU, stretched, may add to a task's lateness (its p99, measured up to the task's action call), at
#: each TASK_PRECISION: ``second`` promises less than a second late, its delay rounded up; ``subsecond`` on time to the
#: delivery's latency.
LATENESS_BUDGET_SECONDS = {"second": 1.0, "subsecond": 0.1}
#: The workloads whose invocations the CPU figures come from: the email action (the others' targets run in-process,
#: the webhook's receiver on a thread of this process: their CPU would count as the handler's).
CPU_WORKLOADS = ("exact via SQS delay", "exact via Scheduler", DENSE, "interval", "lazy")


def lambda_architecture(stage_name: str = "prod") -> str:
    """The stage's Lambda architecture as Chalice resolves ``lambda_architecture`` (the stage's, then the
    top-level one; x86_64 when nothing sets it)."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    stage = config.get("stages", {}).get(stage_name, {})
    return str(stage.get("lambda_architecture") or config.get("lambda_architecture") or "x86_64")


def cpu_stretch(memory_mb: int) -> float:
    """How many times longer CPU work takes at ``memory_mb`` than on a full vCPU: 1,769 / memory, never less than
    1 (a Python handler runs on one vCPU at a time: the GIL)."""
    return max(1.0, FULL_VCPU_MB / memory_mb)


def billed_seconds(wait_seconds: float, cpu_seconds: float, memory_mb: int) -> float:
    """Billed duration: the wait-bound part (calls x ``CALL_SECONDS`` + waits, the same at any memory) plus the CPU
    seconds (measured as a full vCPU's) stretched by the memory's CPU share.  Added, not overlapped: a handler's CPU
    work between its calls runs while no call is in flight (the upper bound; the threaded parts overlap some)."""
    return wait_seconds + cpu_seconds * cpu_stretch(memory_mb)


def duration_per_million(wait_seconds: float, cpu_seconds: float, memory_mb: int,
                         price: prices.Price = prices.LAMBDA_GB_SECOND) -> float:
    """Dollars a million of the duration billed for ``wait_seconds`` and ``cpu_seconds`` (a task's) at ``memory_mb``.
    Below 1,769 MB the CPU part costs the same GB-seconds at every size (stretched as much as the memory shrinks):
    only the wait-bound part grows with memory."""
    return billed_seconds(wait_seconds, cpu_seconds, memory_mb) * memory_mb / 1024 * price.usd * 1e6


def choose_memory(wait_seconds: float, cpu_seconds: float, cpu_before_action: float, budget: float) -> int:
    """The cheapest memory size (``MEMORY_SIZES``; the smaller on a tie) for a function whose task costs
    ``wait_seconds`` and ``cpu_seconds``, among those at which ``cpu_before_action`` (its CPU before a task's action,
    0 for a function that runs none) stretched is within ``budget``; the largest if none is.  Pure."""
    fits = [m for m in MEMORY_SIZES if cpu_before_action * cpu_stretch(m) <= budget]
    if not fits:
        return MEMORY_SIZES[-1]
    return min(fits, key=lambda m: (duration_per_million(wait_seconds, cpu_seconds, m), m))


@dataclass(frozen=True)
class FunctionCpu:
    """One function's figures over the CPU workloads: per task, and the worst workload's per invocation."""

    function: str
    invocations: float          # per task
    wait_seconds: float         # per task: calls x CALL_SECONDS + waits
    cpu_seconds: float          # per task
    cpu_per_invocation: float   # the largest average over the workloads (the dense batches' for the executor)
    cpu_before_action: float    # p99 over the tasks: the invocation's CPU before the task's action call (0: none)


def function_cpu(measured: Sequence[Measured]) -> list[FunctionCpu]:
    chosen = [m for m in measured if m.workload.name in CPU_WORKLOADS]
    tasks = sum(m.tasks for m in chosen)
    out = []
    for function in sorted({f for m in chosen for f in m.invocations.count if f in m.workload.functions}):
        runs = [m for m in chosen if m.invocations.count[function]]
        out.append(FunctionCpu(
            function, sum(m.invocations.count[function] for m in runs) / tasks,
            sum(m.invocations.billed_seconds[function] for m in runs) / tasks,
            sum(m.invocations.cpu_seconds[function] for m in runs) / tasks,
            max(m.invocations.cpu_seconds[function] / m.invocations.count[function] for m in runs),
            percentile([s for m in runs for s in m.invocations.cpu_before_action[function]], 99)
            if any(m.invocations.cpu_before_action[function] for m in runs) else 0.0))
    return out


def task_precision(stage_name: str = "prod") -> str:
    """The stage's TASK_PRECISION in .chalice/config.json (the setting's default, ``second``, when unset)."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    stage = config.get("stages", {}).get(stage_name, {})
    return str(stage.get("environment_variables", {}).get("TASK_PRECISION")
               or config.get("environment_variables", {}).get("TASK_PRECISION") or "second")


def memory_section(measured: Sequence[Measured]) -> Section:
    """P4's runs once more: each function's CPU seconds per task priced at each memory size, and the choice."""
    configured, architecture, precision = memory_sizes(), lambda_architecture(), task_precision()
    price = prices.LAMBDA_GB_SECOND_ARM64 if architecture == "arm64" else prices.LAMBDA_GB_SECOND
    section = Section(
        key="P4m", title="Lambda memory and architecture: each function's CPU per task, priced at each memory size",
        columns=["function", "memory MB", "CPU stretch", "wait-bound ms/task", "CPU ms/task", "billed ms/task",
                 "x86 duration $/million", "arm64 duration $/million", "an invocation's CPU, stretched, ms",
                 "task lateness added p99 ms", "chosen (second)", "chosen (subsecond)", "configured"])
    figures: dict[str, Any] = {"full_vcpu_mb": FULL_VCPU_MB, "lateness_budget_seconds": LATENESS_BUDGET_SECONDS,
                               "architecture": architecture, "task_precision": precision,
                               "workloads": list(CPU_WORKLOADS), "functions": {}}
    for f in function_cpu(measured):
        chosen = {p: choose_memory(f.wait_seconds, f.cpu_seconds, f.cpu_before_action, budget)
                  for p, budget in LATENESS_BUDGET_SECONDS.items()}
        at = configured.get(f.function, 128)
        figures["functions"][f.function] = {
            **asdict(f), "chosen_mb": chosen, "configured_mb": at,
            "by_memory": {m: {"billed_seconds": billed_seconds(f.wait_seconds, f.cpu_seconds, m),
                              "x86_dollars_per_million": duration_per_million(f.wait_seconds, f.cpu_seconds, m),
                              "arm64_dollars_per_million": duration_per_million(
                                  f.wait_seconds, f.cpu_seconds, m, prices.LAMBDA_GB_SECOND_ARM64),
                              "invocation_cpu_seconds": f.cpu_per_invocation * cpu_stretch(m),
                              "lateness_seconds": f.cpu_before_action * cpu_stretch(m)} for m in MEMORY_SIZES}}
        for m in MEMORY_SIZES:
            section.rows.append([
                f.function, m, cpu_stretch(m), f.wait_seconds * 1000, f.cpu_seconds * 1000,
                billed_seconds(f.wait_seconds, f.cpu_seconds, m) * 1000,
                duration_per_million(f.wait_seconds, f.cpu_seconds, m),
                duration_per_million(f.wait_seconds, f.cpu_seconds, m, prices.LAMBDA_GB_SECOND_ARM64),
                f.cpu_per_invocation * cpu_stretch(m) * 1000, f.cpu_before_action * cpu_stretch(m) * 1000,
                "yes" if m == chosen["second"] else "", "yes" if m == chosen["subsecond"] else "",
                "yes" if m == at else ""])
        lateness = f.cpu_before_action * cpu_stretch(at)
        section.notes.append(
            f"{f.function}: {f.invocations:.2f} invocations a task, CPU {f.cpu_seconds * 1000:.1f} ms a task "
            f"({f.cpu_per_invocation * 1000:.1f} ms an invocation, the worst workload's average); chosen "
            f"{chosen['second']} MB at TASK_PRECISION=second, {chosen['subsecond']} MB at subsecond; configured {at} MB "
            f"({architecture}): duration ${duration_per_million(f.wait_seconds, f.cpu_seconds, at, price):.3f} a "
            f"million tasks, CPU stretch {cpu_stretch(at):.1f}x"
            + (f", adds {lateness * 1000:.0f} ms to a task's lateness (p99)" if f.cpu_before_action else ""))
        if f.cpu_before_action:
            by_workload = {m.workload.name: percentile(m.invocations.cpu_before_action[f.function], 99)
                           * cpu_stretch(at) for m in measured
                           if m.workload.name in CPU_WORKLOADS and m.invocations.cpu_before_action[f.function]}
            figures["functions"][f.function]["lateness_p99_seconds_by_workload"] = by_workload
            section.notes.append(f"{f.function} at {at} MB, a task's lateness added, p99 by workload: " + ", ".join(
                f"{name} {seconds * 1000:.0f} ms" for name, seconds in by_workload.items()))
            section.targets.append(Target(
                f"{f.function}: lateness its CPU adds at {at} MB, p99 (TASK_PRECISION={precision})",
                lateness, LATENESS_BUDGET_SECONDS[precision], " s"))
    exact = next((m for m in measured if m.workload.name == "exact via SQS delay"), None)
    if exact is not None:
        usage = exact.usage()
        cpu_gb_seconds = sum(exact.invocations.cpu_seconds[f] * cpu_stretch(exact.memory_mb[f]) * exact.memory_mb[f]
                             / 1024 for f in exact._functions()) / exact.tasks
        arm64 = architecture == "arm64"
        with_cpu = prices.per_million(replace(
            usage, lambda_gb_seconds=usage.lambda_gb_seconds + (0.0 if arm64 else cpu_gb_seconds),
            lambda_arm64_gb_seconds=usage.lambda_arm64_gb_seconds + (cpu_gb_seconds if arm64 else 0.0)))
        figures["exact_via_sqs_delay_with_cpu_dollars_per_million"] = with_cpu
        section.notes.append(
            f"exact via SQS delay: P4's ${prices.per_million(usage):.2f} a million (calls x "
            f"{CALL_SECONDS * 1000:.0f} ms + waits) is ${with_cpu:.2f} with the handlers' CPU at the configured memory")
    section.notes.append(
        f"model: Lambda allocates CPU in proportion to memory, one vCPU at {FULL_VCPU_MB:,} MB (AWS: configuration-"
        "memory); billed = calls x 20 ms + waits + CPU x max(1, 1769 / memory); CPU = the process's CPU time during "
        "the invocation less moto's answers and the bench's own reads, this machine's second taken as a vCPU second; "
        f"from the workloads {', '.join(CPU_WORKLOADS)}; a task's lateness added = the invocation's CPU up to the "
        "task's action call, stretched (p99 over the tasks, dense batches of 10 included); budget "
        + ", ".join(f"{s:g} s at {p}" for p, s in LATENESS_BUDGET_SECONDS.items())
        + f"; prices ${prices.LAMBDA_GB_SECOND.usd} (x86) and ${prices.LAMBDA_GB_SECOND_ARM64.usd} (arm64) a GB-second")
    section.figures = figures
    return section
