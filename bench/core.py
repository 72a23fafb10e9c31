"""What every bench section shares: the scale it runs at, how AWS calls are counted
and slowed, and the shape of a section's result (a table, figures, targets, plots).

Every figure is a count (AWS calls, bytes, tasks) with the N it used, or a ratio
against a baseline measured in the same run: absolute times differ between machines.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
PLOTS = PROJECT / "docs" / "bench"
RESULTS = PROJECT / "bench" / "results.json"

#: Dummy credentials and the region every in-process bench uses (moto's mock_aws).
BENCH_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
}


@dataclass(frozen=True)
class Scale:
    """How big a run is: ``full`` (make bench), ``quick`` (BENCH_QUICK=1) or ``tiny`` (the suite's check)."""

    name: str

    def pick(self, full: Any, quick: Any, tiny: Any) -> Any:
        return {"full": full, "quick": quick, "tiny": tiny}[self.name]

    @property
    def tiny(self) -> bool:
        return self.name == "tiny"


FULL, QUICK, TINY = Scale("full"), Scale("quick"), Scale("tiny")


@dataclass
class Target:
    """A figure the issue sets a limit on: reported met or not, never hidden."""

    name: str
    figure: float
    limit: float
    unit: str = ""
    #: "max": the figure must be at most the limit; "min": at least.
    kind: str = "max"

    @property
    def met(self) -> bool:
        return self.figure <= self.limit if self.kind == "max" else self.figure >= self.limit

    def describe(self) -> str:
        sign = "<=" if self.kind == "max" else ">="
        verdict = "met" if self.met else "MISSED"
        return f"{self.name}: {fmt(self.figure)}{self.unit} (target {sign} {fmt(self.limit)}{self.unit}) {verdict}"


@dataclass
class Section:
    """One part of the bench: a table for stdout and the README, figures for results.json."""

    key: str                      # "P1", "P2", ... as the issue names them
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)   # paths relative to the project

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["targets"] = [{**asdict(t), "met": t.met} for t in self.targets]
        return data


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render(section: Section) -> list[str]:
    """A markdown table (it reads on stdout as well as in the README)."""
    lines = [f"### {section.key}: {section.title}", ""]
    lines.append("| " + " | ".join(section.columns) + " |")
    lines.append("|" + "|".join("---" for _ in section.columns) + "|")
    lines.extend("| " + " | ".join(fmt(cell) for cell in row) + " |" for row in section.rows)
    if section.targets:
        lines.append("")
        lines.extend(f"- {target.describe()}" for target in section.targets)
    if section.notes:
        lines.append("")
        lines.extend(f"- {note}" for note in section.notes)
    return lines


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


# --- counting and slowing AWS calls ------------------------------------------------


class CallCounter:
    """AWS calls made by the given clients, by ``service:Operation``, counted with a botocore
    event hook (``before-call``: once per API call, whatever botocore's retries do)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def attach(self, *clients: Any) -> CallCounter:
        for client in clients:
            client.meta.events.register("before-call.*.*", self._count)
        return self

    def _count(self, model: Any, **_: Any) -> None:
        self.calls[f"{model.service_model.service_name}:{model.name}"] += 1

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def of(self, *operations: str) -> int:
        """Calls of the named operations (``"ListBackups"`` or ``"dynamodb:ListBackups"``)."""
        return sum(n for op, n in self.calls.items() if op in operations or op.split(":")[1] in operations)

    def reset(self) -> Counter[str]:
        taken, self.calls = self.calls, Counter()
        return taken


class Latency:
    """Adds ``seconds`` of wall time to every HTTP request the given clients send
    (``before-send``: once per attempt), as a network round trip to AWS would."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def attach(self, *clients: Any) -> Latency:
        for client in clients:
            # Registered first so it runs before moto's own before-send handler answers.
            client.meta.events.register_first("before-send.*.*", self._wait)
        return self

    def _wait(self, **_: Any) -> None:
        if self.seconds > 0:
            time.sleep(self.seconds)


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as took: ...`` then ``took[0]`` is the wall time in seconds."""
    took = [0.0]
    start = time.perf_counter()
    try:
        yield took
    finally:
        took[0] = time.perf_counter() - start


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return float(ordered[rank - 1])


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


class Clock:
    """The benches' injected clock; ``sleep`` (the app's pacing) moves it instead of waiting."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
