"""Plain ``chalice deploy`` / ``chalice package`` of a stage ``make deploy`` has not provisioned is refused.

On a fresh clone the stage has no TASKS_STREAM_ARN (``make deploy`` records it after creating
the tasks table), so ``chalice package`` would write the stream mapping with ``"Stream": ""``
and ``chalice deploy`` would fail half-way.  app.py refuses at import with a message that says
what to run; ``make deploy`` and ``python -m deploy.cli package`` run chalice through
deploy/bytecode.py, which they may (the first provisions first, the second merges the stream in).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chalicelib.settings import DEPLOY_TOOL_VARIABLE, chalice_command, unprovisioned_refusal

ROOT = Path(__file__).resolve().parents[2]
CHALICE = str(Path(sys.executable).parent / "chalice")
STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/timekeeper-prod-tasks/stream/2026-01-01T00:00:00.000"
ROLE = "arn:aws:iam::123456789012:role/timekeeper-prod-scheduler"
PROVISIONED = {"STAGE": "prod", "TASKS_STREAM_ARN": STREAM, "SCHEDULER_ROLE_ARN": ROLE}
FRESH = {"STAGE": "prod", "TASKS_STREAM_ARN": "", "SCHEDULER_ROLE_ARN": ""}


@pytest.mark.parametrize("argv, command", [
    ([CHALICE, "deploy", "--stage", "prod"], "deploy"),
    (["chalice", "--debug", "package", "--stage", "prod", "out"], "package"),
    (["chalice", "--project-dir", "deploy", "local"], "local"),
    (["chalice"], None),
    (["/usr/bin/pytest", "deploy"], None),
    ([], None),
])
def test_the_chalice_command_is_read_past_chalices_own_options(argv: list[str], command: str | None) -> None:
    assert chalice_command(argv) == command


@pytest.mark.parametrize("command", ["deploy", "package"])
def test_chalice_building_an_unprovisioned_stage_is_told_to_run_make_deploy_first(command: str) -> None:
    refusal = unprovisioned_refusal(FRESH, ["chalice", command, "--stage", "prod"])
    assert refusal is not None
    assert "make deploy STAGE=prod" in refusal and "TASKS_STREAM_ARN" in refusal
    assert "python -m deploy.cli package --stage prod" in refusal


@pytest.mark.parametrize("environ, argv", [
    (PROVISIONED, ["chalice", "deploy", "--stage", "prod"]),                  # after make deploy
    (PROVISIONED, ["chalice", "package", "--stage", "prod", "out"]),
    ({**FRESH, DEPLOY_TOOL_VARIABLE: "1"}, ["chalice", "package", "--stage", "prod", "out"]),  # deploy.cli package
    ({**FRESH, "STAGE": "local"}, ["chalice", "local", "--stage", "local"]),   # chalice local serves HTTP only
    (FRESH, ["chalice", "delete", "--stage", "prod"]),
    (FRESH, ["/var/runtime/bootstrap.py"]),                                   # the Lambda runtime
    (FRESH, ["python", "-m", "local.run"]),                                   # the offline runtime, tests
])
def test_everything_else_imports_the_app(environ: dict[str, str], argv: list[str]) -> None:
    assert unprovisioned_refusal(environ, argv) is None


def fresh_clone(root: Path) -> Path:
    """The app as a fresh clone has it: the committed config, no stream ARN recorded."""
    for name in ("app.py", "requirements.txt"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "chalicelib", root / "chalicelib", ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".chalice").mkdir()
    for path in (ROOT / ".chalice").glob("*.json"):
        shutil.copy(path, root / ".chalice" / path.name)
    return root


def chalice_environment() -> dict[str, str]:
    """Dummy credentials and an endpoint nothing listens on: a refusal must come before any AWS call."""
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    return {**basics, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}


@pytest.mark.parametrize("args", [["package", "--stage", "prod", "out"], ["deploy", "--stage", "prod"]])
def test_plain_chalice_on_a_fresh_clone_refuses_and_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    project = fresh_clone(tmp_path)
    result = subprocess.run([CHALICE, *args], cwd=project, env=chalice_environment(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "Run `make deploy STAGE=prod` first" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "out").exists()
    assert not (project / ".chalice" / "deployed").exists()
    assert not (project / ".chalice" / "deployments").exists()
