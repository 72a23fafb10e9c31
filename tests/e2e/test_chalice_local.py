"""`chalice local --stage local` as a newcomer runs it (docs/offline.md): the API alone, on Chalice's own
server in its own process, against the offline runtime's moto, never AWS; a clear refusal when nothing is up.

The runtime is started in-process (free ports) with its run file in a temporary directory, as `make run`
writes .local/make-run.json; the shell chalice local runs in has real-looking credentials, a profile that
does not exist and a per-service endpoint at AWS, none of which may be used."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from local.client import ApiClient, emails_to, wait_until
from local.stage import PROJECT_DIR, LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e

CHALICE = str(Path(sys.executable).parent / "chalice")
REAL_LOOKING_SHELL = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_PROFILE": "production",
    "AWS_ENDPOINT_URL_DYNAMODB": "https://dynamodb.eu-west-1.amazonaws.com",
}


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStage]:
    run_file = tmp_path_factory.mktemp("local") / "make-run.json"
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    started = start_local_stage(local, out=lambda line: None, run_file=run_file)
    yield started
    started.stop()
    assert not run_file.exists()  # removed when the runtime stops


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def chalice_local(port: int, run_file: Path, *options: str) -> subprocess.Popen[str]:
    """The documented command line, in a shell of its own (no API_TOKEN: make run's is taken), with ``options``
    (``--no-autoreload``: no restart when a file under the project changes, as other tests write some meanwhile)."""
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    env = {**basics, **REAL_LOOKING_SHELL, "LOCAL_RUN_FILE": str(run_file), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([CHALICE, "local", "--stage", "local", "--port", str(port), *options], cwd=PROJECT_DIR, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=10)
    return output


def test_chalice_local_serves_the_local_stages_api_against_the_runtimes_moto(stage: LocalStage) -> None:
    assert stage.run_file is not None and stage.run_file.stat().st_mode & 0o077 == 0  # it holds the token
    port = free_port()
    process = chalice_local(port, stage.run_file, "--no-autoreload")
    written = PROJECT_DIR / ".local" / f"written-meanwhile-{os.getpid()}"  # as other tests' files (gitignored)
    try:
        api = ApiClient(f"http://127.0.0.1:{port}", stage.environment["API_TOKEN"])

        def listening() -> bool | None:
            if process.poll() is not None:
                raise AssertionError("chalice local exited: " + stop(process))
            try:
                return api.get("/health").status == 200 or None
            except OSError:
                return None
        wait_until(listening, 60, "chalice local to listen", 0.2)
        written.parent.mkdir(exist_ok=True)
        written.write_text("")
        assert api.get("/backups/runs").status == 200
        assert ApiClient(api.base_url).get("/backups/runs").status == 401  # the token is still required
        created = api.post("/tasks", {"id": "via-chalice-local", "run_at": int(time.time()) + 1, "action": {
            "type": "email", "to": "chalice-local@example.com", "subject": "Hello", "body": "from chalice local"}})
        assert created.status == 201, created.body
        item = boto3.client("dynamodb", endpoint_url=stage.aws_endpoint).get_item(
            TableName=stage.environment["TASKS_TABLE"], Key={"PK": {"S": "TASK#via-chalice-local"}, "SK": {"S": "TASK"}})
        assert "Item" in item  # written to the runtime's moto, whatever the shell's credentials said
        # ... and run by the runtime's handlers, which chalice local does not have.
        wait_until(lambda: emails_to(stage.aws_endpoint, "chalice-local@example.com"), 30, "the task's email", 0.5)
    finally:
        written.unlink(missing_ok=True)
        output = stop(process)
    assert "against make run's moto at " + stage.aws_endpoint in output, output
    assert "Restarting local dev server" not in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("options", [(), ("--no-autoreload",)], ids=["reloader", "no-reloader"])
def test_chalice_local_with_nothing_up_says_what_to_start_and_exits(tmp_path: Path, options: tuple[str, ...]) -> None:
    port = free_port()
    process = chalice_local(port, tmp_path / "make-run.json", *options)
    try:
        status = process.wait(timeout=60)
    finally:
        output = stop(process)
    assert status != 0, output  # a script or make sees the refusal
    assert "chalice local --stage local: no make run is up" in output, output
    assert "start `make run` in another terminal first" in output, output
    assert "Traceback" not in output, output
    with socket.socket() as probe:  # it never listened
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_chalice_local_with_a_run_file_left_over_says_make_run_stopped(tmp_path: Path) -> None:
    from chalicelib.chalice_local import write_run_file
    run_file = tmp_path / "make-run.json"
    write_run_file(run_file, {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}", "API_TOKEN": "t"},
                   "http://127.0.0.1:8000", pid=1)
    process = chalice_local(free_port(), run_file)
    try:
        status = process.wait(timeout=60)
    finally:
        output = stop(process)
    assert status != 0, output
    assert "does not answer (it stopped;" in output and "start `make run`" in output, output
