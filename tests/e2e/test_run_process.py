"""`make run` as a user runs it: `python -m local.run` in its own process, stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

from local.client import ApiClient, wait_until
from local.soak import STRATEGIES, RuntimeProcess, descendants, task_body

pytestmark = pytest.mark.e2e

PROJECT = Path(__file__).resolve().parents[2]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_make_run_prints_its_banner_and_exits_within_5_seconds_of_ctrl_c(tmp_path: Path) -> None:
    """The banner: URLs, the settings in effect, the shell's settings taken or ignored; an item the app
    dead-letters for want of its due time says so on its invocation line; the run file chalice local reads
    while it runs; Ctrl-C stops it all."""
    run_file = tmp_path / "make-run.json"
    env = {**os.environ, "LOCAL_AWS_PORT": "0", "LOCAL_API_PORT": "0", "LOCAL_WEBHOOK_PORT": "0",
           "PYTHONUNBUFFERED": "1",
           "DUE_ATTRIBUTE": "REMINDER_TIMESTAMP", "BACKUP_SCHEDULE": "rate(1 hour)", "LOCAL_RUN_FILE": str(run_file)}
    env.pop("API_TOKEN", None)
    process = subprocess.Popen([sys.executable, "-m", "local.run"], cwd=PROJECT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        # The banner's last line (the chalice one) may be read a moment after the "try" line before it.
        wait_until(lambda: any(line.startswith("  chalice ") for line in lines), 60, "the banner", 0.1)
        text = "".join(lines)
        api = re.search(r"^  API        (http://127\.0\.0\.1:(\d+))/", text, re.MULTILINE)
        aws = re.search(r"^  AWS        (http://127\.0\.0\.1:(\d+))  \(moto; state: \1/moto-api/data\.json\)",
                        text, re.MULTILINE)
        assert api and aws and api.group(2) != "0" and aws.group(2) != "0", text
        assert "timekeeper offline, stage local" in text and "curl -H 'Authorization: Bearer " in text
        assert re.search(r"^    DUE_ATTRIBUTE +REMINDER_TIMESTAMP  \(from the shell\)$", text, re.MULTILINE), text
        assert re.search(r"^    BACKUP_SCHEDULE +rate\(5 minutes\)$", text, re.MULTILINE), text
        assert re.search(rf"^    LOCAL_API_PORT +{api.group(2)}$", text, re.MULTILINE), text
        assert re.search(r"^    source appointments +table seed-appointments: exact, due REMINDER_TIMESTAMP$", text,
                         re.MULTILINE), text
        assert "TASK_SOURCES" not in text, text  # its JSON is summed up, a line per source
        assert re.search(r"^  webhooks   receiver http://127\.0\.0\.1:[1-9]\d* \(allowed origin; verifies", text,
                         re.MULTILINE), text
        assert "  chalice    .venv/bin/chalice local --stage local --port 8001: " in text, text
        console = re.search(r"^  console    (http://127\.0\.0\.1:\d+/console)  \(a web page for operators", text, re.MULTILINE)
        assert console and console.group(1) == f"{api.group(1)}/console", text
        with urllib.request.urlopen(console.group(1), timeout=10) as page:  # no token needed for the page itself
            assert page.headers["Content-Type"].startswith("text/html") and b"timekeeper console" in page.read()
        assert "  handlers   run in 1 process of their own, moto and the event sources in this one" in text, text
        handlers = descendants(process.pid)  # the handler process: its invocations are the lines checked below
        assert len(handlers) == 1, handlers
        written = json.loads(run_file.read_text())["environment"]  # for chalice local, as the app reads it
        assert written["AWS_ENDPOINT_URL"] == aws.group(1) and written["DUE_ATTRIBUTE"] == "REMINDER_TIMESTAMP"
        assert written["TASKS_STREAM_ARN"].startswith("arn:aws:dynamodb:") and written["API_TOKEN"]
        assert ("    IGNORED BACKUP_SCHEDULE=rate(1 hour): the local stage sets BACKUP_SCHEDULE=rate(5 minutes)"
                in text.splitlines()), text
        ddb = boto3.client("dynamodb", endpoint_url=aws.group(1), region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x")
        ddb.put_item(
            TableName="timekeeper-local-tasks",
            Item={"PK": {"S": "USER#nodue"}, "SK": {"S": "R#1"}, "email": {"S": "nodue@example.com"}})
        def stream_lines() -> list[str]:  # the runtime's invocation lines, not the app's JSON log
            return [line for line in list(lines) if re.match(r"^\d\d:\d\d:\d\d\.\d{3}  task_stream ", line)]
        wait_until(lambda: any("dead-lettered" in line for line in stream_lines()), 30,
                   "the stream's invocation line", 0.1)
        [dead] = [line for line in stream_lines() if "dead-lettered" in line]
        assert " ok; dead-lettered 1: " in dead, dead
        assert "the item has no REMINDER_TIMESTAMP (due time)" in dead and dead.rstrip().endswith(
            "(set DUE_ATTRIBUTE?)"), dead
        os.kill(handlers[0], signal.SIGKILL)  # a handler process that dies: its invocations run in make run's
        wait_until(lambda: any(f"handler process {handlers[0]} ended" in line for line in lines), 10,
                   "the line saying so", 0.1)
        ddb.put_item(TableName="timekeeper-local-tasks",
                     Item={"PK": {"S": "USER#nodue2"}, "SK": {"S": "R#1"}, "email": {"S": "nodue@example.com"}})
        wait_until(lambda: sum("dead-lettered" in line for line in stream_lines()) == 2, 30,
                   "the next stream invocation, in make run's process", 0.1)
        interrupted, before = time.monotonic(), len(lines)
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to every process of the group
        code = process.wait(timeout=5)
        assert time.monotonic() - interrupted < 5.0
        reader.join(2)
        assert code == 0 and "stopped" in [line.strip() for line in lines], "".join(lines[-20:])
        assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in lines[before:]), lines[before:]
        assert not run_file.exists()
        wait_until(lambda: not any(map(running, handlers)), 2, "the handler process to end", 0.1)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_make_run_stops_within_5_seconds_of_sigterm_while_handlers_are_busy() -> None:
    token = secrets.token_urlsafe(24)
    process = RuntimeProcess(token)
    load = threading.Event()
    try:
        api_url, endpoint = process.urls()
        queue_url = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                                 aws_secret_access_key="x").create_queue(QueueName="sigterm")["QueueUrl"]
        api = ApiClient(api_url, token)

        def post_tasks(worker: int) -> None:
            for n in itertools.count():
                if load.is_set():
                    return
                with contextlib.suppress(OSError):
                    api.post("/tasks", task_body(f"busy-{worker}-{n}", STRATEGIES[n % 3], queue_url, 1))

        workers = [threading.Thread(target=post_tasks, args=(w,), daemon=True) for w in range(8)]
        for worker in workers:
            worker.start()
        wait_until(lambda: process.invocations["task_executor"] >= 3, 180,
                   "the executor to be busy", 0.2)
        load.set()  # the runtime stays busy with what was posted; this process only reads its output now
        handlers = descendants(process.process.pid)
        seconds = process.terminate(10)
        assert seconds is not None and seconds < 5.0, f"exited after {seconds}s" + "".join(process.tail)
        assert process.stopped and process.process.returncode == 0, "".join(list(process.tail)[-20:])
        assert handlers  # busy in their own process, and gone with make run
        wait_until(lambda: not any(map(running, handlers)), 2, "the handler process to end", 0.1)
    finally:
        load.set()
        process.kill()
