"""``chalice local --stage local``: the app's API alone, on Chalice's own server, against ``make run``'s moto.

``chalice local`` imports app.py with the stage's variables (.chalice/config.json) and serves its routes;
it runs no event handler and provisions nothing.  So the local stage's API needs what ``make run``
made: moto's endpoint, the provisioned names and ARNs, the API token.  ``make run`` writes them, once it
is up, to its run file (LOCAL_RUN_FILE, default ``.local/make-run.json``, gitignored, readable by its
owner only) and removes it when it stops.  When app.py is imported by ``chalice local`` for the local
stage, ``use_make_run`` lays that environment over the process's: every AWS client goes to moto's
endpoint with dummy credentials, whatever credentials, profile or endpoints the shell has, and the token
is the shell's API_TOKEN or else ``make run``'s.  Without a ``make run`` that answers, it refuses at
import, before any AWS client exists, with one message saying what to start, and ends the process
with a failure status (Chalice imports the app in a thread of its reloader's worker, where an exception
would leave a process that never listens, and whose parent would exit 0: ``end_refused``).  app.py
imports this module only under ``chalice local`` (never on Lambda; it is here because app.py imports
chalicelib only), and the offline runtime (local/stage.py) writes the file
with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

PROJECT_DIR = Path(__file__).resolve().parent.parent
DEFAULT_RUN_FILE = ".local/make-run.json"
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# What the shell may have that would send a client elsewhere than moto, or fail to build one.
SHELL_AWS_DROPPED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")


class NotRunning(RuntimeError):
    """No ``make run`` to serve the local stage's API against: what to start."""


def run_file(environ: Mapping[str, str], project_dir: Path = PROJECT_DIR) -> Path:
    """Where ``make run`` writes its environment (LOCAL_RUN_FILE, relative to the project)."""
    return project_dir / (environ.get("LOCAL_RUN_FILE") or DEFAULT_RUN_FILE)


def write_run_file(path: Path, environment: Mapping[str, str], api_url: str, pid: int | None = None) -> None:
    """``make run``'s environment for ``chalice local``, readable by its owner only (it holds the token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"pid": os.getpid() if pid is None else pid, "api_url": api_url,
                       "environment": dict(environment)}, indent=2)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text + "\n")


def remove_run_file(path: Path) -> None:
    """Remove the run file if it is this process's (another ``make run`` may have written it since)."""
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def answers(endpoint: str, timeout: float = 1.0) -> bool:
    """Whether something listens at the endpoint (moto's server, if the run file is right)."""
    parts = urlsplit(endpoint)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=timeout):
            return True
    except OSError:
        return False


def make_run_environment(path: Path) -> dict[str, str]:
    """The environment ``make run`` wrote, once checked: its moto answers, on this machine; NotRunning else."""
    start = ("start `make run` in another terminal first (chalice local serves the local stage's API against "
             "its moto: it provisions nothing and runs no event handler), then chalice local again")
    try:
        written = json.loads(path.read_text())
        environment = {str(k): str(v) for k, v in written["environment"].items()}
        endpoint = environment["AWS_ENDPOINT_URL"]
    except FileNotFoundError as exc:
        raise NotRunning(f"no make run is up (no {path}): {start}") from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotRunning(f"{path} is not make run's ({exc!r}): {start}") from exc
    if urlsplit(endpoint).hostname not in LOCAL_HOSTS:
        raise NotRunning(f"{path} names the endpoint {endpoint!r}, not moto's on this machine: {start}")
    if not answers(endpoint):
        raise NotRunning(f"make run's moto at {endpoint} does not answer (it stopped; {path} is left over): "
                         f"{start}")
    return environment


def use_make_run(environ: MutableMapping[str, str], path: Path | None = None) -> str:
    """Lay ``make run``'s environment over ``environ`` (the shell's API_TOKEN kept); a line to print.
    NotRunning when there is none."""
    path = run_file(environ) if path is None else path
    environment = make_run_environment(path)
    token = environ.get("API_TOKEN")
    for name in SHELL_AWS_DROPPED:
        environ.pop(name, None)
    for name in [n for n in environ if n.startswith("AWS_ENDPOINT_URL_")]:  # per-service endpoints
        environ.pop(name)
    environ.update(environment)
    if token:
        environ["API_TOKEN"] = token
    origin = "the shell's API_TOKEN" if token else "make run's token"
    return (f"chalice local: the local stage's API against make run's moto at {environment['AWS_ENDPOINT_URL']} "
            f"(its tables, queues and handlers; {origin}: Authorization: Bearer {environ.get('API_TOKEN', '')})")


def serve_against_make_run(environ: MutableMapping[str, str]) -> None:
    """What app.py calls under ``chalice local`` for the local stage: use ``make run``, or say what to start
    and end the process (from Chalice's server thread, only ``os._exit`` ends it) with a failure status."""
    try:
        line = use_make_run(environ)
    except NotRunning as exc:
        sys.stderr.write(f"chalice local --stage local: {exc}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        end_refused(environ)
    print(line, flush=True)


def end_refused(environ: Mapping[str, str]) -> NoReturn:
    """End ``chalice local`` with a failure status.  With its reloader (the default), app.py is imported in a
    worker process (CHALICE_WORKER set) whose parent, Chalice's ParentProcess, exits 0 for any status of
    its worker but a restart request (chalice/cli/reloader.py): so the parent is ended too (SIGTERM: status
    143 to a shell).  Without it (--no-autoreload) the process itself is ``chalice local``: status 2."""
    if environ.get("CHALICE_WORKER") and os.getppid() > 1:
        with contextlib.suppress(OSError):
            os.kill(os.getppid(), signal.SIGTERM)
    os._exit(2)
