"""A Lambda function's cold start loads what every handler needs, and its own handler's modules only when it runs.

Every function of the stage imports app.py whole, so whatever app.py imports at the top
every function pays for at its cold start (bench P5: ``import app`` at most 1.2x
``import boto3``).  app.py imports the settings, the client bundle, the authorizer
choice and the HTTP plumbing at the top; each handler imports its chalicelib module
when it first runs.  Each test imports app.py in a fresh interpreter with a stage's
environment, as Lambda does, and looks at ``sys.modules``: no timing, so it holds on
a busy machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chalice.config import Config

ROOT = Path(__file__).resolve().parents[2]
CONFIG: dict[str, Any] = json.loads((ROOT / ".chalice" / "config.json").read_text())

# The chalicelib modules app.py needs at import: the settings read at import, the client
# bundle its container builds, the route authorizer and the routes' JSON plumbing, with the
# structured logger (aws-lambda-powertools).  Every function's handler logs, so loading the
# logger later would only move its cost into the first invocation, not save it.  Likewise the
# middleware every function runs (chalicelib.invocation) and the metrics it flushes
# (chalicelib.metrics: Powertools' package loads its EMF provider with the Logger anyway).
AT_IMPORT = frozenset({
    "chalicelib", "chalicelib.auth", "chalicelib.aws", "chalicelib.container", "chalicelib.invocation",
    "chalicelib.log", "chalicelib.metrics", "chalicelib.names", "chalicelib.schedule_expr", "chalicelib.settings",
    "chalicelib.web",
})

# The modules of the action types' package (chalicelib/tasks/actions/), which loads them all.
ACTION_MODULES = frozenset(f"chalicelib.tasks.actions.{path.stem}" for path in (ROOT / "chalicelib" / "tasks" / "actions").glob("*.py")
                           if path.stem != "__init__")

# Loaded by some handlers only: the time-zone database (schedule_fire.py: task recurrence).
NOT_AT_IMPORT = frozenset({"zoneinfo"})

LOADED = "import json, sys; import app; print(json.dumps(sorted(sys.modules)))"


def modules_after_import(stage: str) -> set[str]:
    """Every module in ``sys.modules`` after ``import app`` in a fresh interpreter with the stage's environment."""
    variables = dict(Config(chalice_stage=stage, config_from_disk=CONFIG).environment_variables)
    if variables.get("API_AUTH") == "token":
        variables.setdefault("API_TOKEN", "a-token-set-when-the-stage-runs")  # `make run` sets it
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    environment = {**basics, "AWS_DEFAULT_REGION": "us-east-1", **variables}
    result = subprocess.run([sys.executable, "-c", LOADED], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return set(loaded)


@pytest.mark.parametrize("stage", sorted(CONFIG["stages"]))
def test_importing_app_loads_no_handlers_module_until_that_handler_runs(stage: str) -> None:
    loaded = modules_after_import(stage)
    variables = dict(Config(chalice_stage=stage, config_from_disk=CONFIG).environment_variables)
    # A stage declaring task sources parses them at import (chalicelib.sources: app.py binds a stream function
    # per source), and checks their actions' templates against the action types.
    sources = json.loads(variables.get("TASK_SOURCES") or "{}")
    checked = {"chalicelib.sources"} if sources else set()
    if any("action" in s for s in sources.values()):  # the action types, with what their fields need
        checked |= {"chalicelib.tasks", "chalicelib.tasks.actions", *ACTION_MODULES, "chalicelib.tasks.webhook",
                    "chalicelib.ddb", "chalicelib.tasks.task_fields"}
    if any("retry" in s for s in sources.values()):  # read by the task's own parser (chalicelib.tasks.task_fields)
        checked |= {"chalicelib.tasks", "chalicelib.tasks.task_fields"}
    if variables.get("TASK_WEBHOOK_ORIGINS") or variables.get("TASK_WEBHOOK_SECRETS"):  # parsed at import
        checked |= {"chalicelib.tasks", "chalicelib.tasks.webhook"}
    assert {name for name in loaded if name.split(".")[0] == "chalicelib"} == AT_IMPORT | checked


def test_importing_app_leaves_what_only_some_handlers_use_unloaded() -> None:
    assert modules_after_import("prod") & NOT_AT_IMPORT == set()
