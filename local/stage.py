"""Bring the whole `local` stage up in this process: moto, resources, environment, app, runtime.

The order matters and is the one ``chalice local`` implies: the stage's
environment (config.json's top level, then ``stages.local``) and the values
provisioning produced (TASKS_STREAM_ARN, ALERT_TOPIC_ARN, ...) are in
``os.environ`` before app.py is imported, because app.py reads its settings,
and registers its event sources, at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import secrets
import socket
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from chalice.app import Chalice

from chalicelib.aws import Clients
from chalicelib.settings import Settings
from deploy.event_sources import EventSourceOptions, OptionError
from deploy.provision import Provisioned, create_sample_tables, provision
from local import moto_corrections
from local.aws import LOCAL_HOST, MotoServer, aws_environment, load_chalice_config, stage_environment
from local.invoker import Out, print_line
from local.runtime import STOP_TIMEOUT_SECONDS, Runtime, RuntimeOptions
from local.sample_sources import create_sample_sources
from local.sources.sqs import DEFAULT_MAX_CONCURRENCY
from local.sources.streams import StreamFailurePolicy

PROJECT_DIR = Path(__file__).resolve().parent.parent
SAMPLE_TABLES = ("sample-orders", "sample-customers", "sample-invoices")
SAMPLE_ROWS = 25
_copies = itertools.count(1)


class LocalSettingsError(ValueError):
    pass


@dataclass(frozen=True)
class LocalSettings:
    """The offline runtime's own knobs (LOCAL_* environment variables)."""

    aws_port: int = 4566                   # LOCAL_AWS_PORT: moto's server
    api_port: int = 8000                   # LOCAL_API_PORT: the app's API
    scheduler_jitter_seconds: float = 60.0  # LOCAL_SCHEDULER_JITTER_SECONDS: 0 fires schedules exactly
    ttl_lag_seconds: float = 5.0           # LOCAL_TTL_LAG_SECONDS: expired items live this much longer
    sqs_max_concurrency: int = DEFAULT_MAX_CONCURRENCY  # LOCAL_SQS_MAX_CONCURRENCY: pollers per SQS source

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LocalSettings:
        def number(name: str, default: float, lo: float, hi: float) -> float:
            text = environ.get(name, "").strip()
            if not text:
                return default
            try:
                value = float(text)
            except ValueError:
                value = lo - 1
            if not lo <= value <= hi:
                raise LocalSettingsError(f"{name}={text!r} is invalid: expected a number from {lo:g} to {hi:g}")
            return value

        return cls(
            aws_port=int(number("LOCAL_AWS_PORT", 4566, 0, 65535)),
            api_port=int(number("LOCAL_API_PORT", 8000, 0, 65535)),
            scheduler_jitter_seconds=number("LOCAL_SCHEDULER_JITTER_SECONDS", 60, 0, 3600),
            ttl_lag_seconds=number("LOCAL_TTL_LAG_SECONDS", 5, 0, 86400),
            sqs_max_concurrency=int(number("LOCAL_SQS_MAX_CONCURRENCY", DEFAULT_MAX_CONCURRENCY, 1, 100)),
        )


def stream_failure_policy(environ: Mapping[str, str], default_queue: str) -> StreamFailurePolicy:
    """The stream mapping's failure settings as ``make deploy`` applies them (deploy/event_sources.py,
    from the same STREAM_* variables), so a failing batch is treated offline as on AWS."""
    try:
        options = EventSourceOptions.from_env(environ)
    except OptionError as exc:
        raise LocalSettingsError(str(exc)) from exc
    return StreamFailurePolicy(
        report_batch_item_failures=options.stream_report_batch_item_failures,
        bisect_on_error=options.stream_bisect_on_error,
        max_retry_attempts=options.stream_max_retry_attempts,
        max_record_age_seconds=options.stream_max_record_age_seconds,
        on_failure_queue=options.stream_on_failure_queue or default_queue)


def ensure_port_free(port: int, variable: str, host: str = LOCAL_HOST) -> None:
    """Fail with the variable to change when ``port`` is taken (moto's server would hang instead)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise LocalSettingsError(f"port {port} on {host} is in use ({exc.strerror}); set {variable} "
                                     f"to another port") from exc


def load_app(project_dir: Path) -> ModuleType:
    """Import app.py as Lambda would; a fresh copy if this process imported it already (tests)."""
    if "app" not in sys.modules:
        if str(project_dir) not in sys.path:
            sys.path.insert(0, str(project_dir))
        return importlib.import_module("app")
    name = f"app_local_{next(_copies)}"
    spec = importlib.util.spec_from_file_location(name, project_dir / "app.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {project_dir / 'app.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def warm(app_module: ModuleType) -> None:
    """Build the app's per-container clients now, in one thread: boto3 sessions are not thread-safe,
    and offline, unlike on Lambda, one container serves every handler at once."""
    deps = getattr(app_module, "deps", None)
    clients = getattr(deps(), "clients", None) if callable(deps) else None
    if clients is None:
        return
    for name, attribute in vars(type(clients)).items():
        if isinstance(attribute, cached_property):
            getattr(clients, name)


@dataclass
class LocalStage:
    moto: MotoServer
    runtime: Runtime
    app_module: ModuleType
    environment: dict[str, str]
    provisioned: Provisioned
    _environ: MutableMapping[str, str]
    _saved: dict[str, str | None] = field(default_factory=dict)

    @property
    def app(self) -> Chalice:
        app: Chalice = self.app_module.app
        return app

    @property
    def api_url(self) -> str:
        return self.runtime.api_url

    @property
    def aws_endpoint(self) -> str:
        return self.moto.endpoint

    def banner(self) -> str:
        made = len(self.provisioned.changes)
        text = (self.runtime.banner(self.moto.endpoint)
                + f"\n  provisioned {made} resources with deploy.provision (sample tables: {', '.join(SAMPLE_TABLES)})")
        if self.environment.get("API_AUTH") == "token":
            text += ("\n  API auth   every route but /health and /openapi.json needs: Authorization: Bearer "
                     f"{self.environment['API_TOKEN']}\n             (set API_TOKEN in the shell to choose it)"
                     f"\n  try        curl -H 'Authorization: Bearer {self.environment['API_TOKEN']}' "
                     f"{self.api_url}/backups/runs")
        return text

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop the runtime (its threads get ``timeout`` seconds overall), then moto's server."""
        try:
            self.runtime.stop(timeout)
        finally:
            self.moto.stop()
            restore(self._environ, self._saved)


def apply(environ: MutableMapping[str, str], values: Mapping[str, str],
          saved: dict[str, str | None]) -> None:
    for key, value in values.items():
        saved.setdefault(key, environ.get(key))
        environ[key] = value


def restore(environ: MutableMapping[str, str], saved: Mapping[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


def start_local_stage(local: LocalSettings, *, overrides: Mapping[str, str] | None = None,
                      project_dir: Path = PROJECT_DIR, stage: str = "local", out: Out = print_line,
                      environ: MutableMapping[str, str] | None = None, **runtime_kwargs: Any) -> LocalStage:
    """moto's server, the stage's resources and environment, app.py, and the runtime, all started."""
    environ = os.environ if environ is None else environ
    shell = dict(environ)  # STREAM_* deploy settings are read from the shell, as `make deploy` reads them
    ensure_port_free(local.aws_port, "LOCAL_AWS_PORT")
    ensure_port_free(local.api_port, "LOCAL_API_PORT")
    config = load_chalice_config(project_dir, stage)
    moto = MotoServer(LOCAL_HOST, local.aws_port).start()
    saved: dict[str, str | None] = {}
    try:
        environment = stage_environment(config)
        region = environment.get("AWS_REGION") or "us-east-1"
        environment.update(aws_environment(moto.endpoint, region))
        environment.update(overrides or {})
        if environment.get("API_AUTH") == "token" and not environment.get("API_TOKEN"):
            # The bearer token comes from the shell's API_TOKEN, or a fresh one per start:
            # never from the repository.
            environment["API_TOKEN"] = environ.get("API_TOKEN") or secrets.token_urlsafe(24)
        apply(environ, environment, saved)
        settings = Settings.from_env(environ)
        clients = Clients(settings)
        provisioned = provision(clients, settings)
        create_sample_tables(clients, list(SAMPLE_TABLES), SAMPLE_ROWS, provisioned)
        if settings.task_sources:  # the stage's sample task sources (one table of each seed's shape)
            streams = create_sample_sources(clients)
            provisioned.environment["TASK_SOURCE_STREAMS"] = json.dumps(
                {s.name: streams[s.name] for s in settings.task_sources if s.name in streams})
        environment.update(provisioned.environment)
        apply(environ, provisioned.environment, saved)
        app_module = load_app(project_dir)
        warm(app_module)
        chalice_config = load_chalice_config(project_dir, stage)
        runtime = Runtime(
            app_module.app, moto.endpoint,
            RuntimeOptions(api_port=local.api_port, stage=stage, region=region,
                           scheduler_jitter_seconds=local.scheduler_jitter_seconds,
                           ttl_lag_seconds=local.ttl_lag_seconds,
                           sqs_max_concurrency=local.sqs_max_concurrency,
                           stream_failure=stream_failure_policy(shell, settings.task_dlq)),
            config=chalice_config, out=out, writes=moto_corrections.watch_writes,
            schedule_changes=moto_corrections.watch_schedules, **runtime_kwargs)
        runtime.start()
    except BaseException:
        moto.stop()
        restore(environ, saved)
        raise
    return LocalStage(moto, runtime, app_module, environment, provisioned, environ, saved)
