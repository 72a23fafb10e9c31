"""The first `make run` or `make test` installs the virtualenv and says so as it goes: a line per step with
the seconds since the install began, and pip's own progress (never --quiet).  Read with `make -n`, which
prints the recipe without running it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_install_prints_a_timed_line_per_step_and_lets_pip_show_its_progress(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    recipe = subprocess.run(["make", "-n", "-B", f"VENV={venv}", f"{venv}/.installed"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    steps = re.findall(r'^echo "\[setup (.*?)\]"? ?(.*)$', recipe, flags=re.MULTILINE)
    assert [text.split(":")[0].split(" ")[0] for _, text in steps] == ["creating", "upgrading", "installing", "done"], recipe
    assert all(elapsed.startswith("$(( $(date +%s)") for elapsed, _ in steps[1:]), recipe
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert len(installs) == 2 and not any("--quiet" in line or " -q " in line for line in installs), recipe
