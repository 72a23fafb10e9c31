"""The backup trigger and the interval processor run on the schedules their stage configures.

app.py reads its settings once, at import, and hands BACKUP_SCHEDULE and
PROCESSOR_SCHEDULE to ``@app.schedule``; ``chalice package`` / ``chalice deploy``
import app.py with the stage's environment_variables (.chalice/config.json) and
turn those registrations into the functions' EventBridge rules.  Each test
imports app.py in a fresh interpreter, since a second import in this process
would return the module the suite already loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chalice.config import Config

from tests.deploy.chalice_cache import NO_BYTECODE_WRITES, shared_deployments

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG: dict[str, Any] = json.loads((ROOT / ".chalice" / "config.json").read_text())

# Neither is any stage's value, nor a default of chalicelib/settings.py.
BACKUP = "cron(15 3 ? * MON-FRI *)"
PROCESSOR = "rate(2 minutes)"

REGISTERED = """
import json
from chalice.app import ScheduledEventConfig
import app
print(json.dumps({source.name: source.schedule_expression if isinstance(source.schedule_expression, str)
                  else source.schedule_expression.to_string()
                  for source in app.app.event_sources if isinstance(source, ScheduledEventConfig)}))
"""


def registered_schedules(environment: dict[str, str]) -> dict[str, str]:
    """The schedule event sources app.py registers when imported with ``environment``, by function name."""
    result = subprocess.run([sys.executable, "-c", REGISTERED], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def bare_environment(**variables: str) -> dict[str, str]:
    """A process environment with only the basics, fake credentials and ``variables``."""
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
    return {**basics, **credentials, **variables}


def test_the_backup_trigger_and_interval_processor_run_on_the_configured_schedules() -> None:
    environment = {**os.environ, "BACKUP_SCHEDULE": BACKUP, "PROCESSOR_SCHEDULE": PROCESSOR}
    assert registered_schedules(environment) == {"backup_trigger": BACKUP, "interval_processor": PROCESSOR}


@pytest.mark.parametrize("stage", sorted(CONFIG["stages"]))
def test_each_stage_deploys_the_schedules_its_config_sets(stage: str) -> None:
    variables = dict(Config(chalice_stage=stage, config_from_disk=CONFIG).environment_variables)
    if variables.get("API_AUTH") == "token":
        variables.setdefault("API_TOKEN", "a-token-set-when-the-stage-runs")  # `make run` sets it
    exports = {"export_trigger": variables["EXPORT_SCHEDULE"]} if variables.get("EXPORT_BUCKET") else {}
    assert registered_schedules(bare_environment(**variables)) == {
        "backup_trigger": variables["BACKUP_SCHEDULE"], "interval_processor": variables["PROCESSOR_SCHEDULE"], **exports}


def test_chalice_package_puts_the_stage_schedules_on_the_functions_rules(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A copy of the project whose prod stage sets other schedules, provisioned, packaged by plain chalice."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("app.py", "requirements.txt"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "chalicelib", project / "chalicelib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / ".chalice", project / ".chalice", ignore=shutil.ignore_patterns("deployments"))
    config = json.loads((project / ".chalice" / "config.json").read_text())
    config["stages"]["prod"]["environment_variables"].update(BACKUP_SCHEDULE=BACKUP, PROCESSOR_SCHEDULE=PROCESSOR)
    # What `make deploy` records before chalice may build the stage (app.py refuses plain chalice without them).
    config["stages"]["prod"]["environment_variables"].update(
        TASKS_STREAM_ARN="arn:aws:dynamodb:us-east-1:123456789012:table/timekeeper-prod-tasks/stream/2026-01-01T00:00:00.000",
        SCHEDULER_ROLE_ARN="arn:aws:iam::123456789012:role/timekeeper-prod-scheduler")
    (project / ".chalice" / "config.json").write_text(json.dumps(config))
    out = project / "out"
    with shared_deployments(project, tmp_path_factory):  # the package built earlier in this run, if one was
        subprocess.run([str(BIN / "chalice"), "package", "--stage", "prod", str(out)], cwd=project,
                       env=bare_environment(**NO_BYTECODE_WRITES), check=True, capture_output=True, timeout=600)
    resources = json.loads((out / "sam.json").read_text())["Resources"]
    schedules = {props["Handler"]: [event["Properties"]["Schedule"] for event in props.get("Events", {}).values()
                                    if event["Type"] == "Schedule"]
                 for props in (r["Properties"] for r in resources.values()
                               if r["Type"] == "AWS::Serverless::Function")}
    assert {handler: rules for handler, rules in schedules.items() if rules} == {
        "app.backup_trigger": [BACKUP], "app.interval_processor": [PROCESSOR]}
