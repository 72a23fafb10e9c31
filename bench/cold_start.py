"""P5, cold start: ``import app`` against ``import boto3``, each in fresh interpreters.

Lambda's cold start is the interpreter plus the handler module's imports; the part
this app controls is what ``import app`` loads beyond boto3, which every Python
Lambda that calls AWS loads anyway.  Each run is a new ``python`` process timing
its own import with ``time.perf_counter`` (interpreter start-up excluded, the same
for both); the two kinds alternate so that a busy machine slows both alike, and the
figure is the ratio of the medians.  One more run with ``-X importtime`` names the
packages whose own import time is largest.

Both are imported from bytecode: boto3's came with its installation, and the app is
imported from a copy of app.py and chalicelib compiled afresh before the runs, so the
figure is what the app loads and runs at import, the same whether or not the tests left
``__pycache__`` in the checkout (the timed runs write none).  A package shipped without
bytecode also compiles the app's sources at each cold start: that is not in the figure.
"""

from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.core import PROJECT, Scale, Section, Target, median

TARGET_RATIO = 1.2
TIMER = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def stage_environment(stage: str = "prod") -> dict[str, str]:
    """The environment a deployed function of the stage has (config.json's shared and stage variables)."""
    config = json.loads((PROJECT / ".chalice" / "config.json").read_text())
    env = {k: str(v) for k, v in config.get("environment_variables", {}).items()}
    env.update({k: str(v) for k, v in config["stages"][stage].get("environment_variables", {}).items()})
    return env


def _environment() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "SYSTEMROOT")}
    return {**keep, **stage_environment(), "AWS_DEFAULT_REGION": "us-east-1", "PYTHONDONTWRITEBYTECODE": "1"}


def packaged_app(into: Path) -> Path:
    """A copy of what ``chalice package`` ships of the app (app.py, chalicelib), with its bytecode compiled afresh."""
    shutil.copy(PROJECT / "app.py", into / "app.py")
    shutil.copytree(PROJECT / "chalicelib", into / "chalicelib", ignore=shutil.ignore_patterns("__pycache__"))
    if not compileall.compile_dir(into, quiet=1):
        raise RuntimeError(f"the app's sources in {into} do not compile")
    return into


def import_seconds(module: str, env: dict[str, str], cwd: Path) -> float:
    out = subprocess.run([sys.executable, "-c", TIMER.format(module=module)], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def slowest_imports(env: dict[str, str], cwd: Path, top: int = 8) -> list[tuple[str, float]]:
    """Own import time (microseconds summed per top-level package) of ``import app``, largest first."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import app"], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True)
    own: Counter[str] = Counter()
    for line in out.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S.*)$", line)
        if match:
            own[match.group(2).strip().split(".")[0]] += int(match.group(1))
    return [(name, micros / 1000) for name, micros in own.most_common(top)]


def measure(runs: int, cwd: Path) -> tuple[list[float], list[float]]:
    env = _environment()
    import_seconds("app", env, cwd)  # the first run warms the file cache; not counted
    app_times: list[float] = []
    boto_times: list[float] = []
    for _ in range(runs):
        boto_times.append(import_seconds("boto3", env, cwd))
        app_times.append(import_seconds("app", env, cwd))
    return app_times, boto_times


def run(scale: Scale, plots: Path) -> list[Section]:
    runs = scale.pick(15, 3, 1)
    with tempfile.TemporaryDirectory(prefix="timekeeper-p5-") as tmp:
        package = packaged_app(Path(tmp))
        app_times, boto_times = measure(runs, package)
        slow = slowest_imports(_environment(), package)
    app_s, boto_s = median(app_times), median(boto_times)
    ratio = app_s / boto_s
    section = Section(
        key="P5", title=f"cold start: `import app` against `import boto3` (median of {runs} fresh interpreters each)",
        columns=["import", "median ms", "min ms", "max ms", "ratio to boto3"],
        rows=[["boto3", boto_s * 1000, min(boto_times) * 1000, max(boto_times) * 1000, 1.0],
              ["app", app_s * 1000, min(app_times) * 1000, max(app_times) * 1000, ratio]],
        targets=[Target("import app / import boto3", ratio, TARGET_RATIO, "x")],
        figures={"runs": runs, "app_ms": app_times, "boto3_ms": boto_times, "ratio": ratio},
    )
    section.notes.append("largest own import time, by package: "
                         + ", ".join(f"{name} {ms:.0f} ms" for name, ms in slow))
    section.figures["slowest_imports_ms"] = dict(slow)
    return [section]
