"""A stage as .chalice/config.json describes it: its environment, its settings, its policy file.

``make deploy`` writes the provisioned names and ARNs into the stage's
``environment_variables`` and renders the stage's policy file from them, so
both files say what is deployed; writing only happens when something changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chalicelib.settings import Settings
from deploy import iam

PROJECT = Path(__file__).resolve().parents[1]
DEPLOYED_STAGES = ("dev", "prod")


def config_path(project: Path = PROJECT) -> Path:
    return project / ".chalice" / "config.json"


def policy_path(stage: str, project: Path = PROJECT) -> Path:
    return project / ".chalice" / f"policy-{stage}.json"


def load_config(project: Path = PROJECT) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(config_path(project).read_text())
    return config


def environment(config: Mapping[str, Any], stage: str) -> dict[str, str]:
    """The variables Chalice sets for ``stage``: the top-level ones overridden by the stage's."""
    if stage not in config.get("stages", {}):
        raise KeyError(f"stage {stage!r} is not in .chalice/config.json (stages: {', '.join(config['stages'])})")
    env = dict(config.get("environment_variables", {}))
    env.update(config["stages"][stage].get("environment_variables", {}))
    return env


def settings(config: Mapping[str, Any], stage: str, region: str | None = None) -> Settings:
    env = environment(config, stage)
    if region and "AWS_REGION" not in env:
        env["AWS_REGION"] = region
    return Settings.from_env(env)


def write_json(path: Path, document: Any) -> bool:
    """Write ``document`` as 2-space JSON with a final newline; False when the file already says it."""
    text = json.dumps(document, indent=2) + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def record_environment(stage: str, values: Mapping[str, str], project: Path = PROJECT) -> list[str]:
    """Set ``values`` in the stage's environment_variables; returns the names that changed."""
    config = load_config(project)
    stage_env = config["stages"][stage].setdefault("environment_variables", {})
    changed = sorted(k for k, v in values.items() if stage_env.get(k) != v)
    stage_env.update(values)
    if changed:
        write_json(config_path(project), config)
    return changed


def stage_policy(config: Mapping[str, Any], stage: str, action_targets: Sequence[str] = (),
                 where: iam.Account | None = None) -> iam.Policy:
    env = environment(config, stage)
    return iam.app_policy(settings(config, stage), where or iam.Account.from_environment(env), action_targets)


def render_policy(stage: str, action_targets: Sequence[str] = (), where: iam.Account | None = None,
                  project: Path = PROJECT) -> bool:
    """Write .chalice/policy-<stage>.json from the stage's config; True when it changed."""
    return write_json(policy_path(stage, project),
                      stage_policy(load_config(project), stage, action_targets, where))
