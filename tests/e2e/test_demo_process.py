"""`make demo` as a user runs it: `python -m local.demo` in its own process prints what it runs and the
summary table, not the runtime's invocation lines or the API's access log.  It runs with `--quick` (the same
flows, the tests' timing): what it prints does not depend on how far ahead its tasks are due."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parents[2]


def test_make_demo_prints_the_summary_table_and_nothing_of_the_runtimes_chatter() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("LOCAL_AWS_PORT", "LOCAL_API_PORT", "LOCAL_WEBHOOK_PORT"):  # free ports, as the demo picks by itself
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "local.demo", "--quick"], cwd=PROJECT, env=env, text=True,
                          capture_output=True, timeout=180)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert done.stderr == ""
    lines = out.splitlines()
    assert lines[0].startswith("make demo: 6 flows at once on the offline runtime"), out
    assert re.search(r"^step +result  seconds  detail$", out, re.MULTILINE), out
    assert sum(1 for line in lines if re.match(r"^\d (backups|tasks|seed|cancelled|webhook|downstream)", line)) == 6, out
    assert lines[-1].startswith("all steps passed in "), out
    assert not re.search(r'"(GET|POST|DELETE|PATCH) /', out), "the API's access log is printed"
    assert not re.search(r"^\d\d:\d\d:\d\d\.\d{3}  ", out, re.MULTILINE), "invocation lines are printed"
    assert len(lines) <= 13, out
