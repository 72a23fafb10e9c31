"""moto's server on 127.0.0.1 and the environment that points every boto3 client at it.

Nothing offline ever reaches AWS: the environment carries an endpoint URL and
dummy credentials, and botocore's account-ID endpoints (which moto does not
serve, and which bypass AWS_ENDPOINT_URL for DynamoDB Streams) are disabled.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from pathlib import Path
from typing import Any

from chalice.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from local import moto_corrections, moto_speed
from local.in_process import InProcessTransport

LOCAL_HOST = "127.0.0.1"
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_SESSION_TOKEN": "local",
    "AWS_SECURITY_TOKEN": "local",
}


POLL_SECONDS = 0.05  # how soon stop() is noticed (moto's ThreadedMotoServer: werkzeug's 0.5 s)


class MotoServer:
    """moto's server in a thread of this process (port 0: a free port), built as moto's ThreadedMotoServer
    builds it, whose loop notices a stop within POLL_SECONDS rather than half a second. moto's state is the
    process's: a server started when no other runs in this process starts empty (what a server stopped
    before it left, a test worker's earlier stage, is gone); one started next to a running one shares its state."""

    _lock = threading.Lock()
    _running_in_process = 0

    def __init__(self, host: str = LOCAL_HOST, port: int = 4566) -> None:
        self.host = host
        self.port = port
        self._running = False
        self._server: BaseWSGIServer | None = None
        self._app: DomainDispatcherApplication | None = None  # the server's WSGI application, shared in process
        self._thread: threading.Thread | None = None
        self._counted = False  # among the servers running in this process

    def start(self) -> MotoServer:
        with MotoServer._lock:
            alone = MotoServer._running_in_process == 0
            MotoServer._running_in_process += 1
            self._counted = True
        try:
            self._start(alone)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, alone: bool) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per AWS call
        moto_corrections.install()  # moto's departures from AWS, corrected
        moto_speed.install()  # moto made fast and small enough to run for days (change feeds, memory bounds)
        self._app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(self.host, self.port, self._app, threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL_SECONDS,),
                                        name="moto-server", daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.host, self.port = str(host), int(port)
        self._running = True
        if alone:
            with urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"),
                                        timeout=10):
                pass
        # Lambda without docker: a function is invoked (the lambda action's asynchronous Invoke), never run.
        request = urllib.request.Request(f"{self.endpoint}/moto-api/config", method="POST",
                                         data=json.dumps({"lambda": {"use_docker": False}}).encode())
        with urllib.request.urlopen(request, timeout=10):
            pass

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def in_process(self) -> InProcessTransport:
        """Answers this process's own clients without a socket while the server runs (local/in_process.py)."""
        return InProcessTransport(self.endpoint, lambda: self._running, self._app)

    def stop(self) -> None:
        if self._running:
            self._running = False
            assert self._server is not None
            self._server.shutdown()  # noticed within POLL_SECONDS; the loop then closes the socket
            if self._thread is not None:
                self._thread.join()
        with MotoServer._lock:
            if self._counted:
                MotoServer._running_in_process -= 1
                self._counted = False

    def state(self) -> dict[str, Any]:
        """moto's view of every resource (/moto-api/data.json): sent emails are under ses.Message."""
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=10) as response:
            data: dict[str, Any] = json.load(response)
        return data


def aws_environment(endpoint: str, region: str) -> dict[str, str]:
    """Environment variables that send every boto3 client to ``endpoint`` with dummy credentials."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        **DUMMY_CREDENTIALS,
    }


def load_chalice_config(project_dir: Path, stage: str) -> Config:
    """The project's .chalice/config.json as Chalice reads it for ``stage``."""
    config_path = project_dir / ".chalice" / "config.json"
    disk = json.loads(config_path.read_text())
    if stage not in disk.get("stages", {}):
        raise ValueError(f"stage {stage!r} is not in {config_path} (stages: {', '.join(disk.get('stages', {}))})")
    return Config(chalice_stage=stage, config_from_disk=disk,
                  user_provided_params={"project_dir": str(project_dir)})


def stage_environment(config: Config) -> dict[str, str]:
    """The stage's environment: config.json's top-level variables overridden by the stage's."""
    return {k: str(v) for k, v in config.environment_variables.items()}
