"""B, burst: a model of a million exact tasks due in the same second, on AWS's default quotas, and a check
of the model against the offline runtime (docs/scale.md).

The model (``simulate``) is a pure, deterministic discrete-time simulation in steps of one second from the
first due message's arrival.  Each step:

* **arrivals**: the due messages the path has put in the due queue by then.  Through Scheduler (today's
  path for a task written more than ``DIRECT_QUEUE_HORIZON_SECONDS`` ahead) one schedule fires per
  invocation, at most ``scheduler_per_s`` a second from ``SCHEDULE_LEAD_SECONDS`` before the due time;
  through a sweeper (``Sweeper``: each minute it queries a time-bucket index and sends the tasks due within its
  horizon, at most 900 s, to the due queue with ``SendMessageBatch``, 10 a call, with ``DelaySeconds``) every
  message sent before the due time becomes visible at the due time, later ones as sent: its rate is its
  ``SendMessageBatch`` calls a second times 10, no Scheduler cap (plug in the sweeper's measured figures);
* **Lambda**: the SQS event source's concurrent invocations start at ``lambda_initial`` (5) when the first
  message is visible and grow by ``lambda_ramp_per_minute`` (300) up to ``lambda_max`` (the account's 1,000,
  the mapping's 1,000 or its ``MaximumConcurrency``); an invocation of a batch of ``batch_size`` takes
  ``seconds_per_batch + batch_size * seconds_per_task`` (the bench's P4 figures), so the executor can run
  ``concurrency * batch_size / that`` tasks a second;
* **DynamoDB**: the state table takes ``table_write_units_per_s`` (a new on-demand table: 4,000) and a task
  costs ``write_units_per_task`` (claim and settle); the status index's partition key (``index_shards``
  keys) takes 1,000 write units a second each, a task writing ``index_hot_writes_per_task`` of them;
* a task runs when it is due (step 0 on) and no limit is spent: the tasks that ran in a step are
  ``min(backlog, each limit)``, and they are as late as the step's end.

An email target is paced by flow control (chalicelib/tasks/flow.py, TASK_TARGET_LIMITS ``{"email": {"rate":
14}}``: SES's usual rate out of the sandbox): a task the executor reaches reserves a start on the target's item
(at most ``flow_item_writes_per_s`` reservations a second, one item's write units) and waits in the due queue
until then, never failing; ``email_per_s`` starts go a second.  The emails' p50, p99 and last are reported
apart, as if every task of the burst were an email.  ``closed_form_last`` is the ramp's arithmetic without steps,
for the test.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.core import RESULTS, Scale, Section, Target
from bench.offline import OfflineRuntime, Planned, peak_concurrency
from bench.throughput import WRITE_SECONDS_PER_TASK
from chalicelib.settings import Settings
from chalicelib.tasks.items import STATUS_SHARDS
from deploy import stage as stages
from local.soak import TASKS_TABLE

TASKS = 1_000_000
TARGET_SECONDS = 300.0            # every task runs within 5 minutes of its due time
DEPLOYED_STAGE = "prod"           # the target row is this stage of .chalice/config.json, as deployed
SWEEP_SECONDS = 900               # SQS's largest DelaySeconds: a sweeper sends this far ahead
INF = float("inf")


@dataclass(frozen=True)
class Quotas:
    """AWS's limits the burst meets (defaults: AWS's default quotas and a new on-demand table's)."""

    scheduler_per_s: float = 1_000.0          # EventBridge Scheduler invocations throttle limit
    lambda_initial: float = 5.0               # SQS event source: five concurrent batches at first
    lambda_ramp_per_minute: float = 300.0     # ... up to 300 more a minute while messages are available
    lambda_max: float = 1_000.0               # account concurrency, and an event source mapping's most
    table_write_units_per_s: float = 4_000.0  # a new on-demand table (twice its previous peak later)
    partition_write_units_per_s: float = 1_000.0
    index_shards: int = 1                     # partition keys the status index spreads one status over
    email_per_s: float = 14.0                 # SES's sending rate, the email target's flow control rate
    flow_item_writes_per_s: float = 1_000.0   # reservations a second on one limited target's item (a partition)


@dataclass(frozen=True)
class Executor:
    """The executor's measured times (P4) and its writes per task."""

    batch_size: float = 10.0
    seconds_per_batch: float = 0.02
    seconds_per_task: float = 0.04
    write_units_per_task: float = 2.0         # claim + settle on the state table
    #: writes on the status index's busiest key (keys only): a record made by the claim enters PENDING and leaves it
    #: at the settle (an API task's record, PENDING since its creation, only leaves: 1)
    index_hot_writes_per_task: float = 2.0

    @property
    def invocation_seconds(self) -> float:
        return self.seconds_per_batch + self.batch_size * self.seconds_per_task

    @property
    def tasks_per_invocation_second(self) -> float:
        return self.batch_size / self.invocation_seconds


@dataclass(frozen=True)
class Route:
    """How the due messages reach the due queue: ``rate`` a second (INF: all at once; None: Scheduler's
    invocations, ``Quotas.scheduler_per_s``), from ``lead`` seconds before the due time; ``delayed``: those sent
    before the due time become visible at it (DelaySeconds), and the pollers start then."""

    name: str
    rate: float | None = INF
    lead: int = 0
    delayed: bool = True


SCHEDULER = Route("Scheduler (exact, due beyond the horizon)", rate=None, lead=60, delayed=False)


@dataclass(frozen=True)
class Sweeper:
    """The path that replaces a Scheduler schedule per task due past the horizon: each ``period_s`` it queries a
    time-bucket index for the tasks due within ``horizon_s`` (at most SQS's 900 s of delay) and sends them to the
    due queue, ``batch`` a ``SendMessageBatch`` call, ``calls_per_s`` calls a second in all (its measured
    throughput goes here).  A task's bucket is reached between ``horizon_s`` and ``horizon_s - period_s`` before
    its time: the model takes the later."""

    calls_per_s: float = 200.0   # e.g. 4 threads at 20 ms a call
    batch: int = 10
    horizon_s: int = SWEEP_SECONDS
    period_s: int = 60

    @property
    def rate(self) -> float:
        return self.calls_per_s * self.batch

    def route(self) -> Route:
        return Route(f"sweeper ({self.calls_per_s:,.0f} SendMessageBatch calls/s of {self.batch})", rate=self.rate,
                     lead=max(0, self.horizon_s - self.period_s), delayed=True)


#: The default sweeper: 2,000 messages a second, a million in 500 s, within its 840 s of lead.
SWEEP_PER_S = Sweeper().rate
SWEEP = Sweeper().route()


@dataclass
class Outcome:
    tasks: int
    p50: float
    p99: float
    last: float
    email_last: float
    binding: str                   # the limit that held back the most tasks
    held: dict[str, float] = field(default_factory=dict)   # tasks run in steps each limit held back
    email_p50: float = 0.0         # the same burst as emails paced at the email target's rate
    email_p99: float = 0.0

    def figures(self) -> dict[str, Any]:
        return asdict(self)


def concurrency(quotas: Quotas, since_first: float) -> float:
    """The event source's concurrent invocations ``since_first`` seconds after the first visible message."""
    grown = quotas.lambda_initial + quotas.lambda_ramp_per_minute * max(0.0, since_first) / 60
    return min(quotas.lambda_max, grown)


def limits(quotas: Quotas, executor: Executor, since_first: float) -> dict[str, float]:
    """Tasks a second each limit lets through."""
    return {
        "Lambda concurrency": concurrency(quotas, since_first) * executor.tasks_per_invocation_second,
        "state table write units": quotas.table_write_units_per_s / executor.write_units_per_task,
        "status index partition": (quotas.index_shards * quotas.partition_write_units_per_s
                                   / executor.index_hot_writes_per_task),
    }


def simulate(tasks: int, route: Route, quotas: Quotas, executor: Executor) -> Outcome:
    """The burst, step by step; step ``t`` covers [t, t+1) seconds after the due time."""
    arrived = done = reserved = emailed = 0.0
    ranks = {50: math.ceil(tasks * 0.50), 99: math.ceil(tasks * 0.99), 100: tasks}
    reached: dict[int, float] = {}
    emails: dict[int, float] = {}
    held: dict[str, float] = {}
    first: float | None = None
    rate = quotas.scheduler_per_s if route.rate is None else route.rate
    t = -route.lead
    eps = 1e-9
    while done < tasks - eps:
        before = arrived
        arrived = min(float(tasks), arrived + rate) if math.isfinite(rate) else float(tasks)
        if first is None and arrived > 0:
            first = float(t) if not route.delayed else max(0.0, float(t))
        if t >= 0 and first is not None:
            backlog = arrived - done
            caps = limits(quotas, executor, t - first)
            cap_name, cap = min(caps.items(), key=lambda kv: kv[1])
            ran = min(backlog, cap)
            if ran > 0:
                arrivals = "Scheduler invocations" if route.rate is None else "arrivals"
                held_by = cap_name if backlog > cap + eps else (arrivals if before < tasks else "none")
                held[held_by] = held.get(held_by, 0.0) + ran
            done += ran
            for p, rank in ranks.items():
                if p not in reached and done >= rank - eps:
                    reached[p] = float(t + 1)
            reserved = min(done, reserved + quotas.flow_item_writes_per_s)   # each reaches the executor once
            emailed = min(reserved, emailed + quotas.email_per_s)
            for p, rank in ranks.items():
                if p not in emails and emailed >= rank - eps:
                    emails[p] = float(t + 1)
        t += 1
    # the emails left once every task was reached go at the full rate: the steps that would follow, counted
    for p, rank in ranks.items():
        if p not in emails:
            reserve_end = float(t) + max(0, math.ceil((rank - reserved) / quotas.flow_item_writes_per_s - eps))
            emails[p] = max(reserve_end, float(t) + max(0, math.ceil((rank - emailed) / quotas.email_per_s - eps)))
    binding = max(held.items(), key=lambda kv: kv[1])[0] if held else "none"
    return Outcome(tasks, reached[50], reached[99], reached[100], emails[100], binding, held, emails[50], emails[99])


def closed_form_last(tasks: int, rate: float, initial: float, ramp_per_s: float, most: float) -> float:
    """Seconds until ``tasks`` ran, all visible at 0, at ``rate`` tasks a second per invocation with
    ``initial + ramp_per_s * t`` invocations (at most ``most``): the integral solved, not stepped."""
    full = (most - initial) / ramp_per_s            # when the ramp reaches ``most``
    during = rate * (initial * full + ramp_per_s * full * full / 2)
    if tasks <= during:
        # rate * (initial t + ramp t^2 / 2) = tasks
        return (-initial + math.sqrt(initial * initial + 2 * ramp_per_s * tasks / rate)) / ramp_per_s
    return full + (tasks - during) / (rate * most)


# --- inputs from the bench's own figures ---------------------------------------------------------------


def measured_executor(results: Mapping[str, Any] | None) -> tuple[Executor, str]:
    """Per-batch and per-task seconds from P4's billed executor time for one task an invocation and for ten
    due together (a straight line through the two), or the defaults when results.json lacks them."""
    try:
        p4 = next(s for s in (results or {}).get("sections", []) if s["key"] == "P4")
        workloads = p4["figures"]["workloads"]
        points = []
        for name in ("exact via SQS delay", "exact via SQS delay, 10 due together"):
            w = workloads[name]
            invocations = w["invocations"]["task_executor"]
            points.append((w["tasks"] / invocations, w["billed_seconds"]["task_executor"] / invocations))
        (b1, d1), (b2, d2) = points
        per_task = (d2 - d1) / (b2 - b1)
        per_batch = d1 - b1 * per_task
        if per_task <= 0 or per_batch < 0:
            raise ValueError("not a line")
        write_units = workloads["exact via SQS delay, 10 due together"]["usage_per_task"]["write_units"]
        source = (f"P4's executor: {d1:.3f} s an invocation of {b1:g} task, {d2:.3f} s of {b2:g} "
                  f"(at {p4['figures'].get('call_seconds', 0.02) * 1000:.0f} ms an AWS call)")
        return Executor(seconds_per_batch=per_batch, seconds_per_task=per_task,
                        write_units_per_task=float(write_units)), source
    except (StopIteration, KeyError, TypeError, ValueError, ZeroDivisionError):
        return Executor(), "defaults (results.json has no P4 executor figures)"


def load_results(path: Path = RESULTS) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
    except (OSError, ValueError):
        return None


def deployed_settings(config: Mapping[str, Any] | None = None) -> Settings:
    """``DEPLOYED_STAGE``'s settings as .chalice/config.json (or ``config``) declares them."""
    return stages.settings(stages.load_config() if config is None else config, DEPLOYED_STAGE, "us-east-1")


def deployed(settings: Settings, sweeper: Sweeper | None = None) -> tuple[str, Route, Quotas]:
    """The stage ``settings`` describe, as deployed, on AWS's default quotas otherwise: its path past the horizon
    (PAST_HORIZON), its state table's warm write throughput (STATE_TABLE_WARM_WRITE_UNITS; 0: a new on-demand
    table's 4,000) and its executor mapping's MaximumConcurrency (EXECUTOR_MAX_CONCURRENCY; 0: the account's)."""
    default = Quotas(index_shards=STATUS_SHARDS)
    warm = float(settings.state_table_warm_write_units)
    most = float(settings.executor_max_concurrency) or default.lambda_max
    quotas = replace(default, table_write_units_per_s=max(default.table_write_units_per_s, warm),
                     lambda_max=min(default.lambda_max, most))
    by_sweeper = settings.past_horizon == "sweeper"
    route = (sweeper or Sweeper()).route() if by_sweeper else SCHEDULER
    table = (f"state table warm at {warm:,.0f} write units" if warm > default.table_write_units_per_s
             else f"state table not warmed ({default.table_write_units_per_s:,.0f} write units)")
    return f"{settings.stage} as deployed: {'sweeper' if by_sweeper else 'Scheduler'}, {table}", route, quotas


def scenarios(executor: Executor, sweeper: Sweeper | None = None,
              settings: Settings | None = None) -> list[tuple[str, Route, Quotas]]:
    """Each path (Scheduler's, the sweeper's) on default quotas and with what it takes to run a million within five
    minutes, in order, then ``DEPLOYED_STAGE`` as deployed (``settings``: its settings, read from
    .chalice/config.json by default), the target's; the status index has ``items.STATUS_SHARDS`` keys a status.
    ``sweeper``: its measured figures (default: ``Sweeper()``)."""
    sweep = (sweeper or Sweeper()).route()
    today = Quotas(index_shards=STATUS_SHARDS)
    warm = replace(today, table_write_units_per_s=12_000.0)
    return [
        ("Scheduler, default quotas", SCHEDULER, today),
        ("Scheduler raised to 5,000/s (a quota increase)", SCHEDULER, replace(today, scheduler_per_s=5_000.0)),
        ("the same, state table warm at 12,000 write units", SCHEDULER, replace(warm, scheduler_per_s=5_000.0)),
        ("sweeper, default quotas", sweep, today),
        deployed(settings or deployed_settings(), sweeper),
    ]


# --- the offline check -----------------------------------------------------------------------------------


@dataclass
class OfflineRun:
    tasks: int
    ran: int = 0
    lateness: list[float] = field(default_factory=list)
    concurrency: int = 1
    invocations: int = 0
    invocation_seconds: float = 0.0
    completed: bool = False

    def percentile(self, p: float) -> float:
        from bench.core import percentile
        return percentile(self.lateness, p)


def offline_run(size: int, budget: float) -> OfflineRun:
    """``size`` exact tasks due at once on the offline runtime (as T writes them), their lateness, and what the
    model needs from it: the executor's invocations at once and their mean time and batch."""
    result = OfflineRun(size)
    with OfflineRuntime() as runtime:
        time.sleep(1.0)
        began = time.time()
        due = math.ceil(began + size * WRITE_SECONDS_PER_TASK + 2)   # as T: the writes done by then
        tasks = [Planned(f"b{i}", "exact", due) for i in range(size)]
        runtime.write_items(TASKS_TABLE, [runtime.task_item(t) for t in tasks])
        result.completed = runtime.wait({t.id for t in tasks}, began + budget, quiet=1.0)
        sent = runtime.sent_times()
        result.lateness = [min(sent[t.id]) - due for t in tasks if sent.get(t.id)]
        result.ran = len(result.lateness)
        spans = list(runtime.process.spans.get("task_executor", []))   # a fresh runtime: only these tasks'
        result.concurrency = max(1, peak_concurrency(spans))
        result.invocations = len(spans)
        result.invocation_seconds = sum(took for _, took in spans) / len(spans) if spans else math.nan
    return result


def offline_model(run: OfflineRun) -> Outcome:
    """The model with the offline runtime's own figures: every message visible at the due time, its
    pollers at their most at once, its measured invocation time and batch, no DynamoDB limit."""
    batch = run.ran / run.invocations if run.invocations else 1.0
    executor = Executor(batch_size=batch, seconds_per_batch=run.invocation_seconds, seconds_per_task=0.0)
    quotas = Quotas(lambda_initial=run.concurrency, lambda_max=run.concurrency, table_write_units_per_s=INF,
                    index_shards=1, partition_write_units_per_s=INF, email_per_s=INF)
    return simulate(max(1, run.ran), Route("offline"), quotas, executor)


def throughput_check(results: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The model against T's rounds (results.json: the offline runtime, N exact tasks due at once, cut by a
    budget): each round's executed tasks, every message visible at the due time, its pollers (``concurrency``)
    at once, the batch its invocations took, and the time per task of T's floor (the four calls a task needs, on
    as many threads, measured apart from the run): the model's last against the round's seconds."""
    try:
        t = next(s for s in (results or {}).get("sections", []) if s["key"] == "T")
        rounds = t["figures"]["rounds"]
    except (StopIteration, KeyError, TypeError):
        return []
    checks = []
    for r in rounds:
        invocations = r["invocations"]["task_executor"]
        if not r["executed"] or not invocations or not r["floor_rate_per_s"]:
            continue
        batch = r["executed"] / invocations
        per_invocation = batch * r["concurrency"] / r["floor_rate_per_s"]
        quotas = Quotas(lambda_initial=r["concurrency"], lambda_max=r["concurrency"], table_write_units_per_s=INF,
                        partition_write_units_per_s=INF, email_per_s=INF, flow_item_writes_per_s=INF)
        model = simulate(r["executed"], Route("offline"), quotas,
                         Executor(batch_size=batch, seconds_per_batch=per_invocation, seconds_per_task=0.0))
        checks.append({"tasks": r["tasks"], "executed": r["executed"], "completed": r["completed"],
                       "measured_s": r["seconds"], "model_s": model.last, "ratio": model.last / r["seconds"]})
    return checks


# --- the section ------------------------------------------------------------------------------------------


def minutes(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def section(executor: Executor, source: str, offline: OfflineRun | None,
            results: Mapping[str, Any] | None = None, settings: Settings | None = None) -> Section:
    """``settings``: ``DEPLOYED_STAGE``'s (default: from .chalice/config.json), whose row is the target's."""
    rows: list[list[Any]] = []
    figures: dict[str, Any] = {"tasks": TASKS, "executor": asdict(executor), "executor_source": source,
                               "scenarios": {}}
    proposed: Outcome | None = None
    today: Outcome | None = None
    target_name = ""
    for name, route, quotas in scenarios(executor, settings=settings):
        outcome = simulate(TASKS, route, quotas, executor)
        rows.append([name, TASKS, outcome.p50, outcome.p99, outcome.last, minutes(outcome.last), outcome.binding,
                     outcome.email_p50, outcome.email_p99, minutes(outcome.email_last)])
        figures["scenarios"][name] = {"route": asdict(route), "quotas": asdict(quotas), **outcome.figures()}
        today = today or outcome
        proposed, target_name = outcome, name
    assert today is not None and proposed is not None
    notes = [f"executor: {executor.batch_size:g} tasks a batch, {executor.invocation_seconds:.3f} s an invocation "
             f"({source}); {executor.write_units_per_task:g} write units a task",
             f"email at {Quotas().email_per_s:g}/s (flow control: TASK_TARGET_LIMITS email rate "
             f"{Quotas().email_per_s:g}; a task over it waits in the due queue for its start, never failing): "
             f"the last of {TASKS:,} emails goes {minutes(today.email_last)} after the due time, whatever the path; "
             f"while they wait, the unsent ones come back every {SWEEP_SECONDS} s: at most "
             f"{TASKS / SWEEP_SECONDS:,.0f} due messages a second, "
             f"{TASKS / SWEEP_SECONDS / executor.tasks_per_invocation_second:,.0f} executor invocations at once"]
    for check in throughput_check(results):
        notes.append(f"T's round of {check['tasks']:,} due at once ({check['executed']:,} executed"
                     f"{'' if check['completed'] else ' before its budget cut it'}): the model puts them done at "
                     f"{check['model_s']:.0f} s against {check['measured_s']:.1f} s measured ({check['ratio']:.2f}x)")
    figures["throughput_check"] = throughput_check(results)
    if offline is not None:
        model = offline_model(offline)
        rows.append([f"offline runtime, {offline.tasks:,} due at once (measured)", offline.ran,
                     offline.percentile(50), offline.percentile(99), offline.percentile(100), "", "measured",
                     "", "", ""])
        rows.append([f"offline runtime, {offline.tasks:,} due at once (model)", model.tasks, model.p50, model.p99,
                     model.last, "", model.binding, "", "", ""])
        ratio = model.last / offline.percentile(100) if offline.lateness else math.nan
        notes.append(f"offline check: {offline.ran:,} of {offline.tasks:,} ran"
                     f"{'' if offline.completed else ' before the budget ran out'}; the model given the run's "
                     f"{offline.concurrency} invocations at once, {offline.invocations:,} invocations of "
                     f"{offline.invocation_seconds:.3f} s on average, puts the last at {model.last:.0f} s against "
                     f"{offline.percentile(100):.1f} s measured ({ratio:.2f}x)")
        figures["offline"] = {"tasks": offline.tasks, "ran": offline.ran, "completed": offline.completed,
                              "p50_s": offline.percentile(50), "p99_s": offline.percentile(99),
                              "last_s": offline.percentile(100), "concurrency": offline.concurrency,
                              "invocations": offline.invocations,
                              "invocation_seconds": offline.invocation_seconds, "model": model.figures(),
                              "model_over_measured_last": ratio}
    targets = [Target(f"{label} of {TASKS:,} exact tasks due at once, {target_name}, AWS's default quotas",
                      figure, TARGET_SECONDS, " s")
               for label, figure in (("p50", proposed.p50), ("p99", proposed.p99), ("last", proposed.last))]
    return Section(key="B", title=f"burst: {TASKS:,} exact tasks due in the same second, modelled on AWS's "
                                  "default quotas (seconds after the due time)",
                   columns=["path", "tasks", "p50 s", "p99 s", "last s", "last", "binding limit", "email p50 s",
                            "email p99 s", "last email"],
                   rows=rows, targets=targets, notes=notes, figures=figures)


def run(scale: Scale, plots: Path) -> list[Section]:
    results = load_results()
    executor, source = measured_executor(results)
    size, budget = scale.pick((10_000, 240.0), (300, 60.0), (0, 0.0))
    offline = offline_run(size, budget) if size else None
    return [section(executor, source, offline, results)]
