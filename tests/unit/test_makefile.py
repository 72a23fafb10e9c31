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
def test_the_install_prints_a_timed_line_per_step_and_lets_the_installer_show_its_progress(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    recipe = subprocess.run(["make", "-n", "-B", f"VENV={venv}", f"{venv}/.installed"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    steps = re.findall(r'^echo "\[setup (.*?)\]"? ?(.*)$', recipe, flags=re.MULTILINE)
    assert [text.split(":")[0].split(" ")[0] for _, text in steps] == ["creating", "installing", "done"], recipe
    assert all(elapsed.startswith("$(( $(date +%s)") for elapsed, _ in steps[1:]), recipe
    # the requirements go in by the pinned uv, or by pip when uv cannot be had; neither hides its progress
    pinned_uv = re.search(r"pip install -q uv==(\d+\.\d+\.\d+)", recipe)
    assert pinned_uv, recipe
    installs = [line for line in recipe.splitlines() if "install" in line and "requirements-dev.txt" in line
                and not line.lstrip().startswith("echo")]
    assert len(installs) == 2, recipe
    assert any(f"{venv}/bin/uv pip install --python {venv}/bin/python -r requirements-dev.txt" in line
               for line in installs), recipe
    assert any(f"{venv}/bin/pip install --progress-bar on -r requirements-dev.txt" in line for line in installs), recipe
    assert not any("--quiet" in line or " -q " in line for line in installs), recipe



@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_suite_writes_bytecode_once_for_all_its_processes_even_where_the_environment_turns_it_off(
        tmp_path: Path) -> None:
    """`make test` turns PYTHONDONTWRITEBYTECODE off for itself: with it on (as on some CI machines) each of the
    suite's processes compiled every module it imported again (about 16 s of CPU a worker's collection alone).
    Run for real with a venv whose ruff, mypy and pytest only report what they were given."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    seen = tmp_path / "seen"
    for tool in ("ruff", "mypy", "pytest"):
        script = venv / "bin" / tool
        script.write_text(f'#!/bin/sh\necho "{tool}=[$PYTHONDONTWRITEBYTECODE]" >> {seen}\n')
        script.chmod(0o755)
    (venv / ".installed").touch()
    subprocess.run(["make", f"VENV={venv}", "test"], cwd=ROOT, capture_output=True, text=True, check=True,
                   env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert sorted(seen.read_text().split()) == ["mypy=[]", "pytest=[]", "ruff=[]"]
