"""The stage deploys on arm64 (docs/benchmarks.md, "Lambda memory and architecture"): Chalice packages the
runtime dependencies for the function's architecture, which holds with no build step only while every one of
them, with what it requires, installs as a pure-Python wheel."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _applies(requirement: str) -> bool:
    """A requirement of this interpreter's install, extras aside."""
    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"extra": ""})


def binary_distributions(requirements: list[str]) -> list[str]:
    """The installed distributions among ``requirements`` and what they require (extras aside) whose wheel is
    not pure Python (``Root-Is-Purelib: false``, or a tag naming a platform)."""
    seen: set[str] = set()
    binary = []
    pending = [Requirement(r).name.lower() for r in requirements]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        wheel = dist.read_text("WHEEL") or ""
        tags = re.findall(r"^Tag: (\S+)", wheel, re.MULTILINE)
        if "Root-Is-Purelib: true" not in wheel or any(not tag.endswith("-none-any") for tag in tags):
            binary.append(name)
        pending.extend(Requirement(r).name.lower() for r in dist.requires or [] if _applies(r))
    return sorted(binary)


def _runtime_requirements() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def test_the_stage_deploys_on_arm64() -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    assert config["lambda_architecture"] == "arm64"
    assert all("lambda_architecture" not in stage for stage in config["stages"].values())


def test_every_runtime_dependency_is_a_pure_python_wheel() -> None:
    assert len(_runtime_requirements()) >= 4
    assert binary_distributions(_runtime_requirements()) == []


def test_a_dependency_with_a_compiled_wheel_is_found() -> None:
    assert binary_distributions(["cryptography"]) == ["cffi", "cryptography"]
