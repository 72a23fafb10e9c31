"""`make run` as a user runs it: `python -m local.run` in its own process, stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from local.client import wait_until

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parents[2]


def test_make_run_prints_its_banner_and_exits_within_5_seconds_of_ctrl_c() -> None:
    env = {**os.environ, "LOCAL_AWS_PORT": "0", "LOCAL_API_PORT": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("API_TOKEN", None)
    process = subprocess.Popen([sys.executable, "-m", "local.run"], cwd=PROJECT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any(line.startswith("  try ") for line in lines), 60, "the banner", 0.1)
        text = "".join(lines)
        api = re.search(r"^  API        (http://127\.0\.0\.1:(\d+))/", text, re.MULTILINE)
        aws = re.search(r"^  AWS        (http://127\.0\.0\.1:(\d+))  \(moto; state: \1/moto-api/data\.json\)",
                        text, re.MULTILINE)
        assert api and aws and api.group(2) != "0" and aws.group(2) != "0", text
        assert "timekeeper offline, stage local" in text and "curl -H 'Authorization: Bearer " in text
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=5)
        assert time.monotonic() - interrupted < 5.0
        reader.join(2)
        assert code == 0 and "stopped" in [line.strip() for line in lines], "".join(lines[-20:])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
