"""The README's five-minute tour, as a newcomer follows it verbatim: what it waits for is long enough at the
local stage's settings, the variables later pages use are exported, and every tool it runs is installed."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# A verified run on the local stage: a poll finds the backups AVAILABLE and starts the restore, a poll sees
# it restored and compares it, a poll finds the restored table deleted (as `make run` shows, about 15 s).
POLLS_OF_A_VERIFIED_RUN = 3


def local_stage() -> dict[str, str]:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    return {**config["environment_variables"], **config["stages"]["local"]["environment_variables"]}


def test_the_backup_step_waits_for_the_polls_a_verified_run_takes() -> None:
    stage = local_stage()
    assert stage["BACKUP_VERIFY"] not in ("", "none")
    step = README[README.index("**Start a backup run**"):README.index("## Known misses")]
    [sleep] = re.findall(r"^sleep (\d+)$", step, re.MULTILINE)
    assert int(sleep) >= POLLS_OF_A_VERIFIED_RUN * int(stage["BACKUP_MONITOR_DELAY_SECONDS"])
    assert "VERIFYING" in step and "BACKUP_VERIFY=1" in step


def test_the_tour_exports_the_token_the_task_sources_page_uses() -> None:
    assert "$API_TOKEN" in (ROOT / "docs" / "task-sources.md").read_text()
    assert re.search(r"^export API_TOKEN=tour ", README, re.MULTILINE)
    assert "API_TOKEN=tour make run" in README


def test_the_aws_cli_the_tour_runs_is_installed_by_make() -> None:
    assert re.search(r"^aws dynamodb put-item ", README, re.MULTILINE)
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in README
    pins = dict(line.split("==") for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert "awscli" in pins
