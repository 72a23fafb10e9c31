"""P3, precision: how late each task's action comes on the offline runtime, per strategy and path,
against the seed's plain ``at(due)`` Scheduler schedule.

Each phase starts ``python -m local.run`` (as ``make run`` does; bench/offline.py) with the
Scheduler emulation's window on (a schedule with FlexibleTimeWindow OFF fires at a random
moment in the LOCAL_SCHEDULER_JITTER_SECONDS after its time, as EventBridge Scheduler does
within the minute) and the stage's settings, writes task items straight into the tasks table
(due times spread evenly over the batch's window, in whole seconds), and waits until every
action came or the phase's time budget ran out.  Lateness is the action message's SentTimestamp
(moto's SQS sets it when it takes the SendMessage, to the millisecond) minus the due time; the
first copy counts, a copy before the due time makes the task early, a second copy doubled, none
by the cut missing (counted at its lateness at the cut: a percentile it reaches is a lower bound,
shown as ">=").  For the webhook path (exact tasks whose action POSTs to the runtime's own
receiver, ``make run``'s) the time the receiver read the signed request stands for the
SentTimestamp.

Each exact row is measured at the TASK_PRECISION its runtime runs with (``precision_env``), against that
precision's own p99 bound (``exact_p99_bound``): the runtime's own delivery, 1 s (the exact target before
issue 25), plus the precision's rounding of the SQS delay (``second``: up to 1 s later; ``subsecond``: none,
the executor waits out the fraction).

Full scale runs five phases, one runtime each, so that a backlog of one path never delays another:

1. at ``second`` (the default): 1,000 exact tasks via the SQS-delay path (due within
   DIRECT_QUEUE_HORIZON_SECONDS: the stream sends them with DelaySeconds), due over a minute;
2. at ``second``: 1,000 exact tasks via EventBridge Scheduler (DIRECT_QUEUE_HORIZON_SECONDS=0; the stage's
   SCHEDULE_LEAD_SECONDS, so their messages come up to a minute early and are sent back) and, in the same
   runtime at the same time, the baseline: one ``at(due)`` schedule per task created straight in the
   emulation, its target the bench queue;
3. at ``subsecond``: the SQS-delay batch due over the first minute (DIRECT_QUEUE_HORIZON_SECONDS just past
   its last task) and the Scheduler batch over the next, in one runtime (``phases`` says why ``second``'s
   are apart);
4. interval tasks due over one processor period, aligned to the interval processor's ticks (which
   start with the runtime), and lazy tasks at the stage's local TTL lag;
5. exact tasks via the SQS-delay path whose action is a webhook, at ``second``.

Quick and tiny scales run two phases: every batch at ``second`` in one runtime, and the SQS-delay and
Scheduler batches at ``subsecond`` in another; a shorter Scheduler window and lead, and interval tasks due
within INTERVAL_DIRECT_SECONDS (the stream sends those itself): the section's notes say so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core import PROJECT, Scale, Section, Target
from bench.offline import ACCOUNT, DUE_QUEUE, REGION, Lateness, OfflineRuntime, Planned, spread
from chalicelib import schedule_expr
from chalicelib.tasks.schedules import INTERVAL_DIRECT_SECONDS
from chalicelib.tasks.timing import PRECISIONS, SECOND, SUBSECOND
from local.aws import load_chalice_config, stage_environment
from local.stage import LocalSettings

#: An exact task's p99 lateness bound at a TASK_PRECISION: the runtime's own delivery (SQS's delay, the poll, the
#: executor, the action's call: 1 s, the exact target before issue 25) plus the precision's own allowance, how
#: much later than the due time its rounding of the SQS delay may deliver (``second`` rounds up: up to 1 s;
#: ``subsecond`` rounds down and the executor waits out the fraction: none).
DELIVERY_SECONDS = 1.0
ROUNDING_ALLOWANCE_SECONDS = {SECOND: 1.0, SUBSECOND: 0.0}
INTERVAL_SLACK_SECONDS = 5.0      # interval p99 at most the processor's period plus this
DUE_QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{DUE_QUEUE}"

SQS_PATH, SCHEDULER_PATH = "exact via SQS delay", "exact via Scheduler"
WEBHOOK_PATH = "exact webhook via SQS delay (receiver's time)"
INTERVAL, LAZY, BASELINE = "interval", "lazy", "at(due), the seed's schedule"
INTERVAL_DIRECT = f"interval, due within {INTERVAL_DIRECT_SECONDS} s (the stream sends it)"


def exact_p99_bound(precision: str) -> float:
    """The p99 lateness an exact task may have at ``precision``: DELIVERY_SECONDS plus its rounding's allowance."""
    return DELIVERY_SECONDS + ROUNDING_ALLOWANCE_SECONDS[precision]


def exact_label(path: str, precision: str) -> str:
    """The row of an exact path measured at ``precision``: ``exact via SQS delay, second``."""
    return f"{path}, {precision}"


def exact_target(label: str, precision: str, count: int, p99: float) -> Target:
    """The p99 target of an exact row, named with its precision and how its bound is made."""
    allowance = ROUNDING_ALLOWANCE_SECONDS[precision]
    return Target(f"{label}: p99 at {count:,} tasks, TASK_PRECISION={precision}'s bound "
                  f"{DELIVERY_SECONDS:g} s + {allowance:g} s of rounding", p99, exact_p99_bound(precision), " s")


def precision_env(precision: str, env: Mapping[str, str]) -> dict[str, str]:
    """A phase's runtime environment at ``precision`` (set even for the default: not the shell's); past the horizon,
    Scheduler's path (the sweeper's keeps only tasks due 12 minutes ahead or more)."""
    assert precision in PRECISIONS, precision
    return {**env, "PAST_HORIZON": "scheduler", "TASK_PRECISION": precision}


@dataclass(frozen=True)
class Batch:
    label: str
    strategy: str         # exact | interval | lazy | at
    count: int
    first: float          # the first due time, seconds after the runtime started
    seconds: float        # due times spread evenly over this many seconds
    action: str = "sqs"   # sqs | webhook (bench/offline.py)


@dataclass(frozen=True)
class Phase:
    name: str
    env: Mapping[str, str]
    batches: tuple[Batch, ...]
    budget: float         # seconds after the runtime started: then the phase is cut

    @property
    def precision(self) -> str:
        return self.env.get("TASK_PRECISION", SECOND)


@dataclass
class PhaseResult:
    phase: Phase
    tasks: dict[str, list[Planned]]
    lateness: dict[str, Lateness]
    completed: bool
    seconds: float
    peak_rss_mb: float
    invocations: dict[str, int]
    scheduler_deliveries: dict[str, int]
    notes: list[str] = field(default_factory=list)


def stage_defaults() -> tuple[float, float, float]:
    """(the interval processor's period, the Scheduler window, the local TTL lag) as ``make run`` has them."""
    config = load_chalice_config(PROJECT, "local")
    expression = schedule_expr.parse(stage_environment(config)["PROCESSOR_SCHEDULE"])
    period = expression.every.total_seconds() if isinstance(expression, schedule_expr.Rate) else 60.0
    local = LocalSettings()
    return period, local.scheduler_jitter_seconds, local.ttl_lag_seconds


def phases(scale: Scale) -> list[Phase]:
    period, window, ttl_lag = stage_defaults()
    if scale.name == "full":
        exact = 1000
        stage = {"LOCAL_SCHEDULER_JITTER_SECONDS": f"{window:g}", "LOCAL_TTL_LAG_SECONDS": f"{ttl_lag:g}"}
        # subsecond's two batches share a runtime: the SQS-delay batch due 6 to 65 s in, within the horizon; the
        # Scheduler batch from 78 s, past it while the stream handles it in the first 12 s (a task due within
        # SCHEDULE_LEAD_SECONDS of the stream's handling goes straight to the due queue: checks() counts the
        # Scheduler's deliveries).  second's do not: the Scheduler batch's early messages, sent back while the
        # SQS-delay batch ran, took its p99 from 1.36 s alone to 3.1 s (measured twice); at subsecond the
        # executor's early margin absorbs that queueing (0.43 s)
        return [
            Phase(f"SQS delay at {SECOND}", precision_env(SECOND, stage),
                  (Batch(exact_label(SQS_PATH, SECOND), "exact", exact, 6, 60),), budget=78),
            # the schedules fire SCHEDULE_LEAD_SECONDS (60) before due, so the first is due 72 s in
            Phase(f"Scheduler at {SECOND}", precision_env(SECOND, {**stage, "DIRECT_QUEUE_HORIZON_SECONDS": "0"}),
                  (Batch(exact_label(SCHEDULER_PATH, SECOND), "exact", exact, 72, 60),
                   Batch(BASELINE, "at", exact, 12, 60)), budget=145),
            Phase(f"exact at {SUBSECOND}",
                  precision_env(SUBSECOND, {**stage, "DIRECT_QUEUE_HORIZON_SECONDS": "66"}),
                  (Batch(exact_label(SQS_PATH, SUBSECOND), "exact", exact, 6, 60),
                   Batch(exact_label(SCHEDULER_PATH, SUBSECOND), "exact", exact, 78, 60)), budget=150),
            # interval tasks due over the second period after the start: the processor's tick at its end
            # sends them all, so their lateness spans a whole period
            Phase("interval and lazy", precision_env(SECOND, stage),
                  (Batch(INTERVAL, "interval", 200, period + 1, period - 2), Batch(LAZY, "lazy", 200, 8, 60)),
                  budget=2 * period + 15),
            Phase("webhook", precision_env(SECOND, stage),
                  (Batch(WEBHOOK_PATH, "exact", exact, 6, 60, "webhook"),), budget=78),
        ]
    # quick and tiny: every batch in one runtime at ``second``, the two exact paths again at ``subsecond``; a
    # shorter window (the lead equals it, as the stage's do)
    window, horizon, first, width, budget = scale.pick(None, (10, 12, 4, 8, 33), (2, 5, 3, 2, 30))
    exact, few = scale.pick(None, 100, 5), scale.pick(None, 30, 3)
    if scale.tiny:
        ttl_lag = 1.0
    env = {"LOCAL_SCHEDULER_JITTER_SECONDS": f"{window:g}", "SCHEDULE_LEAD_SECONDS": f"{window:g}",
           "DIRECT_QUEUE_HORIZON_SECONDS": f"{horizon:g}", "LOCAL_TTL_LAG_SECONDS": f"{ttl_lag:g}"}

    def exact_batches(precision: str) -> tuple[Batch, ...]:
        return (Batch(exact_label(SQS_PATH, precision), "exact", exact, first, width),
                Batch(exact_label(SCHEDULER_PATH, precision), "exact", exact, horizon + first + 3, width))

    return [Phase(f"all at {SECOND}", precision_env(SECOND, env), (
        *exact_batches(SECOND),
        Batch(BASELINE, "at", exact, first, width),
        Batch(INTERVAL_DIRECT, "interval", few, first, width),
        Batch(LAZY, "lazy", few, first, width),
        # few, as interval and lazy: due in the same seconds as the SQS-delay batch, in its runtime, so it
        # adds little load to that batch; full scale measures 1,000 in a phase of their own
        Batch(WEBHOOK_PATH, "exact", few, first, width, "webhook"),
    ), budget=budget), Phase(f"exact at {SUBSECOND}", precision_env(SUBSECOND, env), exact_batches(SUBSECOND),
                             budget=budget)]


def run_phase(phase: Phase, quiet: float) -> PhaseResult:
    with OfflineRuntime(phase.env) as runtime:
        began = runtime.started
        tasks = {b.label: spread(f"{b.strategy}{i}", b.strategy, b.count, began + b.first, b.seconds, b.action)
                 for i, b in enumerate(phase.batches)}
        written = [t for b in phase.batches if b.strategy != "at" for t in tasks[b.label]]
        runtime.write_tasks(written)
        for batch in phase.batches:
            if batch.strategy == "at":
                runtime.create_at_schedules(tasks[batch.label])
        ids = {t.id for group in tasks.values() for t in group}
        completed = runtime.wait(ids, began + phase.budget, quiet)
        cut = time.time()
        sent = runtime.sent_times()
        result = PhaseResult(
            phase, tasks, {label: Lateness.of(label, group, sent, cut) for label, group in tasks.items()},
            completed, cut - began, runtime.peak_rss_mb(), dict(runtime.process.invocations),
            dict(runtime.process.deliveries))
        result.notes += checks(result, runtime.queue_arn)
        return result


def checks(result: PhaseResult, bench_queue_arn: str) -> list[str]:
    notes: list[str] = []
    if not result.completed:
        missing = sum(late.missing for late in result.lateness.values())
        notes.append(f"phase '{result.phase.name}': the budget ({result.phase.budget:g} s after the runtime "
                     f"started) cut it with {missing} of {sum(map(len, result.tasks.values()))} actions not "
                     "come: counted missing, their lateness at the cut a lower bound")
    for label in (b.label for b in result.phase.batches if b.label.startswith(SCHEDULER_PATH)):
        via_scheduler = len(result.tasks[label])
        fired = result.scheduler_deliveries.get(DUE_QUEUE_ARN, 0)
        ran = len(result.lateness[label].values)
        notes.append(f"{label}: the Scheduler emulation delivered {fired} due messages for "
                     f"{via_scheduler} tasks" + (f"; {ran - fired} that ran did not go through it (the stream "
                                                  "handled them too late for a schedule)" if fired < ran else ""))
    hooks = len(result.tasks.get(WEBHOOK_PATH, []))
    if hooks:
        notes.append(f"{WEBHOOK_PATH}: lateness is when local.run's receiver read the signed POST (its clock, "
                     "to the microsecond; the request's webhook-timestamp is whole seconds) minus due")
    baseline = len(result.tasks.get(BASELINE, []))
    if baseline:
        notes.append(f"{BASELINE}: {result.scheduler_deliveries.get(bench_queue_arn, 0)} deliveries for "
                     f"{baseline} schedules")
    return notes


def measure(scale: Scale) -> list[PhaseResult]:
    """Each phase after the other; at tiny scale (the suite's check that P3 runs, not a measurement) at once."""
    quiet = scale.pick(3.0, 2.0, 1.0)
    if scale.tiny:
        with ThreadPoolExecutor(thread_name_prefix="p3-phase") as pool:
            return list(pool.map(lambda phase: run_phase(phase, quiet), phases(scale)))
    return [run_phase(phase, quiet) for phase in phases(scale)]


def section(results: Sequence[PhaseResult], scale: Scale, plot: str | None) -> Section:
    period, _, _ = stage_defaults()
    window = {r.phase.env.get("LOCAL_SCHEDULER_JITTER_SECONDS", "0") for r in results}
    rows: list[list[Any]] = []
    figures: dict[str, Any] = {"phases": []}
    targets: list[Target] = []
    ours: list[Lateness] = []
    for result in results:
        figures["phases"].append({
            "name": result.phase.name, "env": dict(result.phase.env), "budget_s": result.phase.budget,
            "seconds": round(result.seconds, 1), "completed": result.completed,
            "peak_rss_mb": round(result.peak_rss_mb, 1), "invocations": result.invocations,
            "scheduler_deliveries": result.scheduler_deliveries})
        for batch in result.phase.batches:
            late = result.lateness[batch.label]
            figures[batch.label] = {**late.figures(), "phase": result.phase.name,
                                    "task_precision": result.phase.precision}
            rows.append([batch.label, late.count, len(late.values), late.cell(50), late.cell(99), late.cell(100),
                         late.early, late.missing, late.doubled, result.phase.precision, result.phase.name])
            p99, _ = late.percentile(99)
            if batch.strategy == "exact":
                targets.append(exact_target(batch.label, result.phase.precision, late.count, p99))
            elif batch.strategy == "interval":
                targets.append(Target(f"{batch.label}: p99 ({late.count:,} tasks)", p99,
                                      period + INTERVAL_SLACK_SECONDS, " s"))
            if batch.strategy != "at":
                ours.append(late)
    for what in ("early", "missing", "doubled"):
        targets.append(Target(f"{what}, every strategy and path", sum(getattr(x, what) for x in ours), 0))
    section = Section(
        key="P3", title="precision on the offline runtime: lateness of the action (SentTimestamp minus due), "
                        f"Scheduler window {'/'.join(sorted(window))} s",
        columns=["strategy / path", "N", "ran", "p50 s", "p99 s", "max s", "early", "missing", "doubled", "TASK_PRECISION",
                 "phase"],
        rows=rows, targets=targets, figures=figures, plots=[plot] if plot else [])
    section.notes += [note for r in results for note in r.notes]
    section.notes.append("an exact row's p99 bound at each TASK_PRECISION: " + ", ".join(
        f"{p} {exact_p99_bound(p):g} s" for p in PRECISIONS) + f"; that is {DELIVERY_SECONDS:g} s of the "
        "runtime's own delivery plus the precision's rounding of the SQS delay "
        f"(second: rounded up, up to {ROUNDING_ALLOWANCE_SECONDS[SECOND]:g} s later; subsecond: rounded down, "
        "the executor waits out the fraction)")
    section.notes.append("peak RSS of local.run per phase: " + ", ".join(
        f"{r.phase.name} {r.peak_rss_mb:.0f} MB" for r in results))
    if scale.name != "full":
        section.notes.append(f"{scale.name} scale: one runtime for every batch at {SECOND}, one for the exact "
                             f"batches at {SUBSECOND} (less load than {SECOND}'s), the Scheduler window and "
                             f"SCHEDULE_LEAD_SECONDS {'/'.join(sorted(window))} s instead of 60 s; interval tasks "
                             f"due within {INTERVAL_DIRECT_SECONDS} s go straight to the due queue, so the "
                             f"processor's {period:g} s period is not measured")
    return section


def plot_lateness(results: Sequence[PhaseResult], path: Path) -> None:
    """The lateness CDF of each strategy and path, the baseline dashed; a curve that stops short of 1
    has missing tasks (the legend says how many)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 5.2))
    longest = 0.0
    for result in results:
        for batch in result.phase.batches:
            late = result.lateness[batch.label]
            values = sorted(late.values)
            if not values:
                continue
            longest = max(longest, values[-1])
            xs = [values[0], *values]
            ys = [0.0] + [(i + 1) / late.count for i in range(len(values))]
            label = f"{batch.label} (N={late.count:,}" + (f", {late.missing:,} missing)" if late.missing else ")")
            ax.step(xs, ys, where="post", label=label, linestyle="--" if batch.strategy == "at" else "-")
    for precision in PRECISIONS:  # each precision's p99 bound for exact tasks
        ax.axvline(exact_p99_bound(precision), color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
    ticks = [t for t in (0, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600) if t <= max(2.0, longest * 1.2)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(FixedLocator([]))
    ax.set_xlim(0, max(2.0, longest * 1.2))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("lateness: action's SentTimestamp (webhook: received) minus due (s, linear to 1 s, then log)")
    ax.set_ylabel("fraction of the tasks")
    ax.set_title("P3: lateness per strategy and path against at(due), offline runtime\n"
                 "(a curve that stops below 1: the rest had not run when the budget ran out)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(scale: Scale, plots: Path) -> list[Section]:
    results = measure(scale)
    path = plots / "p3_lateness.png"
    plot_lateness(results, path)
    try:
        shown = str(path.resolve().relative_to(PROJECT))
    except ValueError:
        shown = str(path)
    return [section(results, scale, shown)]
