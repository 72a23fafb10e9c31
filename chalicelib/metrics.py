"""CloudWatch metrics: in embedded metric format (EMF), recorded during an invocation and flushed once at its
end; and two read from the executor's log line by metric filters (``LINE_METRICS``).

Domain code records a point with ``deps.metrics`` (``count`` or ``observe``): an
in-memory append under a lock, no AWS call, safe from the executor's and the
stream scheduler's threads.  The invocation's middleware (chalicelib/invocation.py)
calls ``flush`` when the handler returns or raises: the points become EMF
documents (serialised by aws-lambda-powertools' CloudWatch EMF provider, which
the package loads with its Logger anyway: no cold-start cost; a metric's one value
written as a number, ``compact``), one JSON line each on stdout, which
Lambda's log agent turns into CloudWatch metrics; offline (``make run``) the lines
are simply printed.  Logs are billed by the byte, so one log line an invocation may
ride on its first document that agrees with it (``carry``: the executor's line of an execution).
Recording or emitting never raises into the handler: a failure is logged and the
points are dropped.  POWERTOOLS_METRICS_DISABLED=true turns emission off.

``TasksExecuted`` and ``TaskLateness``, one point per execution, are not EMF: an EMF document of the two is
some 290 bytes, more than the execution's log line itself.  The executor's line carries their values as fields
(``"Stage":"prod","Strategy":"exact","TaskLateness":250,"TasksExecuted":1``, ``LinePoints.fields``) and the
deploy puts one CloudWatch Logs metric filter per metric on the executor's log group (deploy/provision.py,
``LineMetric.filter_pattern`` and ``transformation``), which turns them into the same metrics: namespace, name,
unit, dimensions.  Filters do not read lines written before they were put.

Every metric is in the namespace ``Timekeeper`` with the dimension ``Stage``; task
metrics add ``Strategy`` (exact, interval, lazy, or unknown for a record that
names none readable), a started backup run ``Trigger`` (schedule or api).  No
dimension names a task or a table, so the number of metrics stays bounded.  The
names, units and when each is emitted: docs/operations.md.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from chalicelib.log import logger

NAMESPACE = "Timekeeper"
STAGE = "Stage"
STRATEGY = "Strategy"
TRIGGER = "Trigger"
UNKNOWN_STRATEGY = "unknown"

COUNT = "Count"
MILLISECONDS = "Milliseconds"
SECONDS = "Seconds"

# Tasks, each by Strategy.
TASKS_EXECUTED = "TasksExecuted"            # an execution settled (its action ran): DONE or FAILED
TASKS_FAILED = "TasksFailed"                # an execution settled FAILED (docs/executor.md)
TASKS_RETRIED = "TasksRetried"              # attempts of an action after its first (retries)
TASKS_DEAD_LETTERED = "TasksDeadLettered"   # a task record or due message sent to TASK_DLQ
TASKS_SKIPPED_CANCELLED = "TasksSkippedCancelled"      # a due message for a task cancelled since
TASKS_SKIPPED_RESCHEDULED = "TasksSkippedRescheduled"  # a due message for a task moved to another time
TASKS_RAN_AFTER_CHANGE = "TasksRanAfterChange"  # an unclaimed action ran for a task cancelled or moved after its read
TASKS_PACED = "TasksPaced"                  # a due task sent back to wait: over its target's rate or concurrency
TASK_LATENESS = "TaskLateness"              # ms from the due time to the action's start
# Backup runs (Stage only; BackupRunsStarted also by Trigger).
BACKUP_RUNS_STARTED = "BackupRunsStarted"
BACKUP_RUNS_COMPLETED = "BackupRunsCompleted"
BACKUP_RUNS_OVERDUE = "BackupRunsOverdue"   # a poll of a run still not complete past its deadline
BACKUP_TABLES_BACKED_UP = "BackupTablesBackedUp"
BACKUP_TABLES_FAILED = "BackupTablesFailed"
BACKUP_TABLES_STUCK = "BackupTablesStuck"
BACKUPS_DELETED = "BackupsDeleted"
BACKUPS_VERIFIED = "BackupsVerified"          # restore verifications that passed, when a run's verification ends
BACKUP_VERIFICATIONS_FAILED = "BackupVerificationsFailed"  # ... and those that failed (each also alerted)
BACKUP_RUN_DURATION = "BackupRunDuration"   # s from a run's start to its completion


@dataclass(frozen=True)
class LineMetric:
    """A metric CloudWatch Logs extracts from the log lines of ``function`` with a metric filter: a line whose
    field ``name`` is 1 (``counted``: the metric's value is 1) or a number at least 0 (the value is the field's),
    with the values of the fields ``dimensions`` as its dimensions.  CloudWatch computes percentiles over a
    metric filter's values as over EMF's, when none is negative."""

    name: str
    unit: str
    counted: bool
    function: str = "task_executor"
    dimensions: tuple[str, ...] = (STAGE, STRATEGY)

    @property
    def filter_name(self) -> str:
        return self.name  # one log group per function and stage: the metric's name is unique there

    @property
    def filter_pattern(self) -> str:
        return f"{{ $.{self.name} = 1 }}" if self.counted else f"{{ $.{self.name} >= 0 }}"

    def transformation(self, namespace: str = NAMESPACE) -> dict[str, Any]:
        """PutMetricFilter's ``metricTransformations`` entry."""
        return {"metricName": self.name, "metricNamespace": namespace,
                "metricValue": "1" if self.counted else f"$.{self.name}", "unit": self.unit,
                "dimensions": {d: f"$.{d}" for d in self.dimensions}}


#: The metrics read from the executor's line of an execution, not from EMF (the module's docstring).
LINE_METRICS = (
    LineMetric(TASK_LATENESS, MILLISECONDS, counted=False),
    LineMetric(TASKS_EXECUTED, COUNT, counted=True),
)
LINE_METRIC_NAMES = frozenset(metric.name for metric in LINE_METRICS)


@dataclass
class LinePoints:
    """The line metrics of one log line (one execution): each one's value, and the strategy they are by."""

    strategy: str = UNKNOWN_STRATEGY
    values: dict[str, float] = field(default_factory=dict)

    def record(self, name: str, strategy: str | None, value: float = 1) -> None:
        if name not in LINE_METRIC_NAMES:
            raise ValueError(f"{name} is not a line metric (LINE_METRICS)")
        self.strategy, self.values[name] = strategy or UNKNOWN_STRATEGY, value

    def fields(self, stage: str) -> dict[str, Any]:
        """The fields the line carries for the filters of its metrics (``LineMetric``): the dimensions' values and
        each metric's value, whole numbers without ``.0`` (bytes are billed); none when nothing was recorded."""
        if not self.values:
            return {}
        return {STAGE: stage, STRATEGY: self.strategy,
                **{metric.name: _number(self.values[metric.name]) for metric in LINE_METRICS
                   if metric.name in self.values}}


def _number(value: float) -> float | int:
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


# EMF: at most 100 metrics per document and 100 values per metric (Powertools publishes on its own at 100).
PER_DOCUMENT = 99

Emit = Callable[[str], None]
Dimensions = tuple[tuple[str, str], ...]


def print_line(line: str) -> None:
    """Lambda's log agent reads EMF from stdout (as Powertools' own flush writes it)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Metrics:
    """The points recorded since the last flush, by dimension set; ``emit`` takes each EMF document as a line."""

    def __init__(self, emit: Emit = print_line, stage: str = "", namespace: str = NAMESPACE) -> None:
        self.emit = emit
        self.stage = stage
        self.namespace = namespace
        self._lock = threading.Lock()
        self._points: dict[Dimensions, dict[str, tuple[str, list[float]]]] = {}
        self._line: Mapping[str, Any] | None = None

    def count(self, name: str, value: float = 1, /, **dimensions: str) -> None:
        """Add ``value`` to a counter (one value per flush: the invocation's sum)."""
        self._record(name, COUNT, float(value), dimensions, accumulate=True)

    def observe(self, name: str, unit: str, value: float, /, **dimensions: str) -> None:
        """Record one observation (kept apart, so CloudWatch computes percentiles over them)."""
        self._record(name, unit, float(value), dimensions, accumulate=False)

    def task(self, name: str, strategy: str | None, value: float = 1) -> None:
        """A task counter by strategy."""
        self.count(name, value, **{STRATEGY: strategy or UNKNOWN_STRATEGY})

    def _record(self, name: str, unit: str, value: float, dimensions: Mapping[str, str], accumulate: bool) -> None:
        try:
            if name in LINE_METRIC_NAMES:  # read from the execution's line by a metric filter: never EMF as well
                raise ValueError(f"{name} is a line metric: chalicelib/metrics.py LinePoints")
            key = tuple(sorted(dimensions.items()))
            with self._lock:
                unit_values = self._points.setdefault(key, {}).setdefault(name, (unit, []))
                values = unit_values[1]
                if accumulate and values:
                    values[0] += value
                else:
                    values.append(value)
        except Exception:  # never the handler's problem
            logger.warning("metric not recorded", extra={"metric": name}, exc_info=True)

    def carry(self, line: Mapping[str, Any]) -> bool:
        """Write the log ``line`` (its JSON fields: chalicelib/log.py ``line_fields``) at the flush, on the first
        EMF document that ``agrees`` with it: one line for both (EMF lets a document carry other top-level properties, which CloudWatch
        Logs indexes as log fields), as its logger would with no document to ride on.  Logs are billed by the
        byte: a lone execution's line and its metrics cost one JSON line, not two.  One line a flush: False
        when one is carried already (the caller logs its own)."""
        with self._lock:
            if self._line is not None:
                return False
            self._line = dict(line)
            return True

    def pending(self) -> dict[Dimensions, dict[str, tuple[str, list[float]]]]:
        with self._lock:
            return {k: {n: (u, list(v)) for n, (u, v) in m.items()} for k, m in self._points.items()}

    def flush(self, metadata: Mapping[str, Any] | None = None) -> int:
        """Emit every point recorded since the last flush as EMF documents; the number emitted.  Never raises:
        a failure is logged and its points dropped (they are never emitted twice)."""
        with self._lock:
            points, self._points = self._points, {}
            line, self._line = self._line, None
        emitted = 0
        try:
            if points and not is_metrics_disabled():
                for document in self.documents(points, metadata or {}):
                    carries = line is not None and agrees(line, document, metadata or {})
                    if carries and line is not None:  # the line names the invocation (its request id, once)
                        document = {**line, **{k: v for k, v in document.items() if k not in (metadata or {})}}
                    self.emit(json.dumps(document, separators=(",", ":")))
                    emitted, line = emitted + 1, None if carries else line
        except Exception:
            logger.warning("metrics could not be emitted", extra={"emitted": emitted}, exc_info=True)
        if line is not None:  # no document to ride on: written alone, as the logger writes it
            logger.info(str(line.get("message", "")),
                        extra={k: v for k, v in line.items() if k not in ("level", "message")})
        return emitted

    def documents(self, points: Mapping[Dimensions, Mapping[str, tuple[str, list[float]]]],
                  metadata: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The EMF documents of ``points``: one per dimension set, split so none passes EMF's limits."""
        for dimensions, metrics in points.items():
            longest = max(len(values) for _, values in metrics.values())
            for start in range(0, longest, PER_DOCUMENT):
                chunk = [(name, unit, values[start:start + PER_DOCUMENT])
                         for name, (unit, values) in sorted(metrics.items()) if values[start:start + PER_DOCUMENT]]
                for first in range(0, len(chunk), PER_DOCUMENT):
                    provider = AmazonCloudWatchEMFProvider(
                        namespace=self.namespace, dimension_set={STAGE: self.stage, **dict(dimensions)},
                        metadata_set=dict(metadata))
                    provider.service = ""  # no "service" dimension: alarms match the documented set exactly
                    for name, unit, values in chunk[first:first + PER_DOCUMENT]:
                        for value in values:
                            provider.add_metric(name=name, unit=unit, value=value)
                    yield compact(provider.serialize_metric_set(
                        metrics=provider.metric_set, dimensions=provider.dimension_set, metadata=provider.metadata_set))


def agrees(line: Mapping[str, Any], document: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """True when the log ``line`` may ride on the EMF ``document``: no field both have, the metadata aside, differs
    (a line's ``Strategy`` is its line metrics' dimension: a document of another strategy would change it)."""
    return all(document[k] == v for k, v in line.items() if k in document and k not in metadata)


def compact(document: Mapping[str, Any]) -> dict[str, Any]:
    """An EMF document with each metric's values as short as EMF reads them: one value as a number, not a list of
    one (``[1.0]`` -> ``1``), whole numbers without ``.0``.  CloudWatch extracts the same values."""
    names = {m["Name"] for directive in document["_aws"]["CloudWatchMetrics"] for m in directive["Metrics"]}
    out = dict(document)
    for name in names & out.keys():
        raw = out[name] if isinstance(out[name], list) else [out[name]]
        values = [int(v) if isinstance(v, float) and v.is_integer() else v for v in raw]
        out[name] = values[0] if len(values) == 1 else values
    return out


def strategy_of_record(record: Any) -> str | None:
    """The strategy a DynamoDB stream record's item names (new image, else old), if any: for the
    dead-letter count of a record that could not be read as a task."""
    try:
        dynamodb = record.get("dynamodb") or {}
        image = dynamodb.get("NewImage") or dynamodb.get("OldImage") or {}
        value = image.get("strategy", {}).get("S")
    except AttributeError:
        return None
    return value if value in ("exact", "interval", "lazy") else None
