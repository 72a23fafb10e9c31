"""A stage as .chalice/config.json describes it: its environment, its settings, its policy files.

``make deploy`` writes the provisioned names and ARNs into the stage's
``environment_variables`` and renders each function's policy file from them
(.chalice/policy-<stage>-<function>.json, which the stage's
``lambda_functions.<function>.iam_policy_file`` names), so the files say what
is deployed; writing only happens when something changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chalicelib.settings import Settings, backup_name_prefix_of
from deploy import iam

PROJECT = Path(__file__).resolve().parents[1]
DEPLOYED_STAGES = ("dev", "prod")


def config_path(project: Path = PROJECT) -> Path:
    return project / ".chalice" / "config.json"


def policy_file(stage: str, function: str) -> str:
    """The name, relative to .chalice/, of a function's policy file (its ``iam_policy_file``)."""
    return f"policy-{stage}-{function}.json"


def policy_path(stage: str, function: str, project: Path = PROJECT) -> Path:
    return project / ".chalice" / policy_file(stage, function)


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


def stage_policies(config: Mapping[str, Any], stage: str, action_targets: Sequence[str] = (),
                   where: iam.Account | None = None, stream_on_failure_queue: str = "") -> dict[str, iam.Policy]:
    """Each function's policy on ``stage``, by function name."""
    env = environment(config, stage)
    return iam.function_policies(settings(config, stage), where or iam.Account.from_environment(env),
                                 action_targets, stream_on_failure_queue)


def policy_wiring(config: Mapping[str, Any], stage: str) -> dict[str, str]:
    """The ``iam_policy_file`` the stage's config gives each function (stages.<stage>.lambda_functions)."""
    functions = config["stages"][stage].get("lambda_functions", {})
    return {name: str(options["iam_policy_file"]) for name, options in functions.items()
            if "iam_policy_file" in options}


def check_policy_wiring(config: Mapping[str, Any], stage: str) -> None:
    """Each function of the stage is pointed at its own policy file, and nothing else is.

    Otherwise Chalice would silently give a function .chalice/policy-<stage>.json.
    """
    expected = {name: policy_file(stage, name) for name in iam.function_names(settings(config, stage))}
    wiring = policy_wiring(config, stage)
    if wiring != expected:
        raise ValueError(f"stage {stage}: .chalice/config.json must set stages.{stage}.lambda_functions."
                         f"<function>.iam_policy_file to exactly {expected} (it says {wiring})")


def render_policies(stage: str, action_targets: Sequence[str] = (), where: iam.Account | None = None,
                    project: Path = PROJECT, stream_on_failure_queue: str = "") -> list[str]:
    """Write .chalice/policy-<stage>-<function>.json for each function; the names of the files that changed."""
    config = load_config(project)
    check_policy_wiring(config, stage)
    policies = stage_policies(config, stage, action_targets, where, stream_on_failure_queue)
    return [policy_file(stage, name) for name, policy in policies.items()
            if write_json(policy_path(stage, name, project), policy)]


def prefixes_overlap(a: str, b: str) -> bool:
    """Whether a backup name ``<a>-<table part>-<time>`` can also read as ``<b>-<table part'>-<time>``.

    It can exactly when the prefixes are equal or one is the other followed by ``-`` (and more):
    ``timekeeper`` and ``timekeeper-prod`` overlap, ``timekeeper-prod`` and ``timekeeper-prod2`` do not.
    """
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


def backup_prefix_conflicts(prefixes: Mapping[str, str]) -> list[str]:
    """One message per pair of stages (``{stage: BACKUP_NAME_PREFIX}``) whose backup names could overlap."""
    stages = sorted(prefixes)
    return [f"stages {a} and {b} have backup name prefixes {prefixes[a]!r} and {prefixes[b]!r}: "
            f"each stage's retention could take the other's backups for its own"
            for i, a in enumerate(stages) for b in stages[i + 1:] if prefixes_overlap(prefixes[a], prefixes[b])]


def backup_prefixes(config: Mapping[str, Any]) -> dict[str, str]:
    """Every stage's BACKUP_NAME_PREFIX (set, or derived from its STAGE)."""
    return {name: backup_name_prefix_of(environment(config, name)) for name in config.get("stages", {})}
