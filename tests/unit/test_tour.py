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
EXPORT_STEP = "**Export to S3 and restore from it.**"


def local_stage() -> dict[str, str]:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    return {**config["environment_variables"], **config["stages"]["local"]["environment_variables"]}


def test_the_backup_step_waits_for_the_polls_a_verified_run_takes() -> None:
    stage = local_stage()
    assert stage["BACKUP_VERIFY"] not in ("", "none")
    step = README[README.index("**Start a backup run**"):README.index(EXPORT_STEP)]
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


def test_the_export_step_restores_the_local_stages_export_of_the_table_it_names_on_its_schedule() -> None:
    from chalicelib.settings import Settings

    settings = Settings.from_env({**local_stage(), "API_TOKEN": "tour"})
    step = README[README.index(EXPORT_STEP):README.index("## Known misses")]
    [request] = [json.loads(body.replace("'$EXP'", "20261122T120000Z"))
                 for body in re.findall(r"-d '(\{.*\})'$", step, re.MULTILINE)]
    assert settings.export_bucket and request["table"] in settings.export_tables and request["export"]
    assert settings.backup_table_pattern is not None and settings.backup_table_pattern.fullmatch(request["table"])
    target = settings.restore_target_pattern.replace("<table>", request["table"])
    assert re.fullmatch(re.escape(target).replace(r"\*", ".*"), request["target"])
    assert f"table={request['table']}" in step and f"`{request['table']}` is exported" in step
    every = re.fullmatch(r"rate\((\d+) minutes\)", settings.export_schedule)
    assert every and f"every {every[1]} minutes" in step

