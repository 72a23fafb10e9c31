"""Bring the whole `local` stage up in this process: moto, resources, environment, app, runtime.

The order matters and is the one ``chalice local`` implies: the stage's
environment (config.json's top level, then ``stages.local``) and the values
provisioning produced (TASKS_STREAM_ARN, ALERT_TOPIC_ARN, ...) are in
``os.environ`` before app.py is imported, because app.py reads its settings,
and registers its event sources, at import.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
from chalice.app import Chalice

from chalicelib.auth import PUBLIC_ROUTES
from chalicelib.aws import Clients
from chalicelib.chalice_local import DEFAULT_RUN_FILE, remove_run_file, write_run_file
from chalicelib.log import logger
from chalicelib.settings import VARIABLES, Settings
from chalicelib.sources import TaskSource
from deploy.event_sources import EventSourceOptions, OptionError
from deploy.provision import Provisioned, create_sample_tables, provision
from local import moto_speed
from local.app_module import PROJECT_DIR as PROJECT_DIR  # re-exported
from local.app_module import load_app, warm
from local.aws import LOCAL_HOST, MotoServer, aws_environment, load_chalice_config, stage_environment
from local.handler_processes import HandlerProcesses
from local.invoker import Out, print_line
from local.runtime import STOP_TIMEOUT_SECONDS, Runtime, RuntimeOptions
from local.sample_sources import SourceTable, provision_sources
from local.sample_targets import SampleTargets, provision_sample_targets
from local.sources.sqs import DEFAULT_MAX_CONCURRENCY
from local.sources.streams import StreamFailurePolicy
from local.webhook_receiver import WebhookReceiver, new_secret

SAMPLE_TABLES = ("sample-orders", "sample-customers", "sample-invoices")
SAMPLE_ROWS = 25
HANDLERS_READY_SECONDS = 60.0  # the handler processes import the app and build its clients within this


# The offline runtime's own variables and their defaults (docs/configuration.md lists them; a test checks).
LOCAL_VARIABLES = {
    "LOCAL_AWS_PORT": "4566",
    "LOCAL_API_PORT": "8000",
    "LOCAL_SCHEDULER_JITTER_SECONDS": "60",
    "LOCAL_TTL_LAG_SECONDS": "5",
    "LOCAL_SQS_MAX_CONCURRENCY": str(DEFAULT_MAX_CONCURRENCY),
    "LOCAL_RUN_FILE": DEFAULT_RUN_FILE,
    "LOCAL_WEBHOOK_PORT": "8010",
    "LOCAL_HANDLER_PROCESSES": "1",
}
# The signing secret of the local receiver's webhooks (in moto's SSM, fresh each start), which the stage allows.
LOCAL_WEBHOOK_SECRET = "ssm:/timekeeper-local/webhook-secret"

# The app's settings a user most often changes, shown in the banner as they are in effect (a backup
# selection only when set); any setting about sources (its name says SOURCE) is shown too.
BANNER_SETTINGS = ("DUE_ATTRIBUTE", "TTL_ATTRIBUTE", "BUCKET_ATTRIBUTE", "DEFAULT_STRATEGY", "BACKUP_SCHEDULE",
                   "PROCESSOR_SCHEDULE", "BACKUP_TABLES", "BACKUP_TABLE_PATTERN", "BACKUP_TABLE_TAG")
SHOWN_WHEN_SET = frozenset({"BACKUP_TABLES", "BACKUP_TABLE_PATTERN", "BACKUP_TABLE_TAG"})
# Shell variables the banner says nothing more about: the token has its own line, and the AWS_* values
# the runtime sets (moto's endpoint and dummy credentials) must win for nothing to reach AWS.
SHELL_QUIET = frozenset({"API_TOKEN"})


def banner_settings() -> tuple[str, ...]:
    return BANNER_SETTINGS


def source_lines(sources: Sequence[TaskSource], tables: Mapping[str, SourceTable] | None = None) -> list[str]:
    """The banner's line per task source (TASK_SOURCES is JSON: the banner says what it declares), and under
    it what ``make run`` did to its table, or what to do when it could not run it."""
    tables = tables or {}
    lines = []
    for source in sources:
        if source.strategy == "lazy":
            when = f"TTL {source.ttl_attribute}" + (f", due {source.due_attribute}" if source.due_attribute else "")
        elif source.strategy == "interval" and source.bucket_index:
            when = f"bucket {source.bucket_attribute} ({source.bucket_format}) on {source.bucket_index}"
        else:
            when = f"due {source.due_attribute}"
        lines.append(f"    source {source.name:<21} table {source.table}: {source.strategy}, {when}"
                     f"{', every ' + source.recurrence if source.recurrence else ''}")
        note = tables[source.name].note if source.name in tables else ""
        if note:
            lines.append(f"      {note}")
    return lines


def token_lines(token: str, api_url: str) -> str:
    """The banner's lines of API_AUTH=token: the routes that need no token (auth.PUBLIC_ROUTES), the token."""
    public = sorted({path for path, _ in PUBLIC_ROUTES})
    return (f"\n  API auth   every route but {', '.join(public[:-1])} and {public[-1]} needs: Authorization: Bearer "
            f"{token}\n             (set API_TOKEN in the shell to choose it)"
            f"\n  try        curl -H 'Authorization: Bearer {token}' {api_url}/backups/runs")


@dataclass(frozen=True)
class ShellReport:
    """What the shell's environment did to the app's settings: taken where the stage sets nothing,
    ignored (shell value, the stage's value) where the stage sets its own."""

    taken: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def of(cls, shell: Mapping[str, str], stage: Mapping[str, str]) -> ShellReport:
        taken: dict[str, str] = {}
        ignored: dict[str, tuple[str, str]] = {}
        for variable in VARIABLES:
            name = variable.name
            if name not in shell or name in SHELL_QUIET:
                continue
            if name not in stage:
                taken[name] = shell[name]
            elif shell[name] != stage[name]:
                ignored[name] = (shell[name], stage[name])
        return cls(taken, ignored)


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
    run_file: str = DEFAULT_RUN_FILE       # LOCAL_RUN_FILE: make run's environment, for chalice local
    webhook_port: int = 0                  # LOCAL_WEBHOOK_PORT: the webhook receiver (from_env: 8010)
    handler_processes: int = 0             # LOCAL_HANDLER_PROCESSES: 0 runs handlers in moto's process (from_env: 1)

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

        default = {name: float(value) for name, value in LOCAL_VARIABLES.items() if name != "LOCAL_RUN_FILE"}
        return cls(
            aws_port=int(number("LOCAL_AWS_PORT", default["LOCAL_AWS_PORT"], 0, 65535)),
            api_port=int(number("LOCAL_API_PORT", default["LOCAL_API_PORT"], 0, 65535)),
            scheduler_jitter_seconds=number("LOCAL_SCHEDULER_JITTER_SECONDS",
                                            default["LOCAL_SCHEDULER_JITTER_SECONDS"], 0, 3600),
            ttl_lag_seconds=number("LOCAL_TTL_LAG_SECONDS", default["LOCAL_TTL_LAG_SECONDS"], 0, 86400),
            sqs_max_concurrency=int(number("LOCAL_SQS_MAX_CONCURRENCY", default["LOCAL_SQS_MAX_CONCURRENCY"], 1, 100)),
            run_file=environ.get("LOCAL_RUN_FILE", "").strip() or DEFAULT_RUN_FILE,
            webhook_port=int(number("LOCAL_WEBHOOK_PORT", default["LOCAL_WEBHOOK_PORT"], 0, 65535)),
            handler_processes=int(number("LOCAL_HANDLER_PROCESSES", default["LOCAL_HANDLER_PROCESSES"], 0, 8)),
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


def ensure_export_bucket(clients: Clients, settings: Settings) -> str | None:
    """The stage's EXPORT_BUCKET in moto's S3, made with Object Lock on as a locked bucket of another account
    would be (exports to S3, docs/backups.md); None when the stage makes no exports. A bucket made already (a
    restart of `make run` against the same moto) is kept as it is."""
    if not settings.export_bucket:
        return None
    try:
        clients.s3.create_bucket(Bucket=settings.export_bucket, ObjectLockEnabledForBucket=True)
    except clients.s3.exceptions.BucketAlreadyOwnedByYou:
        return settings.export_bucket
    clients.s3.put_object_lock_configuration(Bucket=settings.export_bucket, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled"})
    return settings.export_bucket


def enable_export_pitr(clients: Clients, settings: Settings) -> list[str]:
    """Point-in-time recovery on for the tables the stage exports by name (EXPORT_TABLES; an export needs it),
    those that exist: the ones turned on."""
    existing = set(clients.dynamodb.list_tables()["TableNames"]) if settings.export_bucket else set()
    tables = [t for t in settings.export_tables if t in existing]
    for table in tables:
        clients.dynamodb.update_continuous_backups(
            TableName=table, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
    return tables


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


@dataclass
class LocalStage:
    moto: MotoServer
    runtime: Runtime
    app_module: ModuleType
    environment: dict[str, str]
    provisioned: Provisioned
    _environ: MutableMapping[str, str]
    _saved: dict[str, str | None] = field(default_factory=dict)
    shell: ShellReport = field(default_factory=ShellReport)
    effective: dict[str, str] = field(default_factory=dict)  # the banner's settings, as the app reads them
    sources: list[str] = field(default_factory=list)  # the banner's line per task source
    log_level: int | None = None  # the shared logger's level before app.py set the stage's (restored on stop)
    run_file: Path | None = None  # where make run wrote its environment for chalice local (removed on stop)
    webhook: WebhookReceiver | None = None  # the receiver of the stage's webhook tasks
    targets: SampleTargets | None = None  # the sample lambda, eventbridge and stepfunctions targets
    handlers: HandlerProcesses | None = None  # the processes the event handlers run in (LOCAL_HANDLER_PROCESSES)

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
        if self.handlers is not None:
            count = self.handlers.count
            text += (f"\n  handlers   run in {count} process{'es' if count > 1 else ''} of their own, moto and the "
                     "event sources in this one (LOCAL_HANDLER_PROCESSES)")
        text += "\n" + self.settings_text()
        if self.targets is not None:
            text += "\n" + self.targets.banner_line()
        if self.environment.get("API_AUTH") == "token":
            text += token_lines(self.environment["API_TOKEN"], self.api_url)
        text += f"\n  console    {self.api_url}/console  (a web page for operators; sign in with the API token: docs/console.md)"
        if self.webhook is not None:
            text += (f"\n  webhooks   receiver {self.webhook.origin} (allowed origin; verifies the signature with "
                     f"{LOCAL_WEBHOOK_SECRET}, drops a duplicate webhook-id; GET {self.webhook.origin}/received "
                     "lists what it got)")
        if self.run_file is not None:
            text += (f"\n  chalice    .venv/bin/chalice local --stage local --port 8001: the API alone, against this "
                     f"moto (it reads {self.run_file.name}, written for it: LOCAL_RUN_FILE)")
        return text

    def settings_text(self) -> str:
        """The settings in effect a user may have changed, the ports, and what became of the shell's."""
        port = {"LOCAL_AWS_PORT": self.moto.endpoint.rsplit(":", 1)[-1],
                "LOCAL_API_PORT": self.api_url.rstrip("/").rsplit(":", 1)[-1]}
        lines = ["  settings   in effect (.chalice/config.json, stage local; docs/configuration.md)"]
        for name, value in [*self.effective.items(), *port.items()]:
            origin = "  (from the shell)" if name in self.shell.taken else ""
            lines.append(f"    {name:<28} {value}{origin}")
        lines.extend(self.sources)
        lines.append("  shell      the local stage takes LOCAL_*, API_TOKEN, STREAM_* and any app setting it does "
                     "not set itself")
        for name, (shell_value, stage_value) in self.shell.ignored.items():
            lines.append(f"    IGNORED {name}={shell_value}: the local stage sets {name}={stage_value}")
        return "\n".join(lines)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """Stop the runtime (its threads get ``timeout`` seconds overall), then moto's server."""
        try:
            if self.run_file is not None:
                remove_run_file(self.run_file)
            self.runtime.stop(timeout)
        finally:
            if self.handlers is not None:
                self.handlers.stop()
            if self.webhook is not None:
                self.webhook.stop()
            self.moto.stop()
            restore(self._environ, self._saved)
            if self.log_level is not None:
                logger.setLevel(self.log_level)


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
                      environ: MutableMapping[str, str] | None = None, run_file: Path | None = None,
                      **runtime_kwargs: Any) -> LocalStage:
    """moto's server, the stage's resources and environment, app.py, and the runtime, all started; with
    ``run_file``, the app's environment written there for ``chalice local`` (chalicelib/chalice_local.py)."""
    environ = os.environ if environ is None else environ
    shell = dict(environ)  # STREAM_* deploy settings are read from the shell, as `make deploy` reads them
    ensure_port_free(local.aws_port, "LOCAL_AWS_PORT")
    ensure_port_free(local.api_port, "LOCAL_API_PORT")
    ensure_port_free(local.webhook_port, "LOCAL_WEBHOOK_PORT")
    config = load_chalice_config(project_dir, stage)
    moto = MotoServer(LOCAL_HOST, local.aws_port).start()
    webhook_secret = new_secret()
    receiver = WebhookReceiver(webhook_secret, local.webhook_port, LOCAL_HOST).start()
    saved: dict[str, str | None] = {}
    handlers: HandlerProcesses | None = None
    log_level = logger.log_level  # app.py sets the stage's level on the logger this process shares
    try:
        environment = stage_environment(config)
        origins = [o for o in environment.get("TASK_WEBHOOK_ORIGINS", "").split(",") if o.strip()]
        if receiver.origin not in origins:  # on another port than config.json's (LOCAL_WEBHOOK_PORT=0)
            environment["TASK_WEBHOOK_ORIGINS"] = ",".join([*origins, receiver.origin])
        region = environment.get("AWS_REGION") or "us-east-1"
        environment.update(aws_environment(moto.endpoint, region))
        environment.update(overrides or {})
        if environment.get("API_AUTH") == "token" and not environment.get("API_TOKEN"):
            # The bearer token comes from the shell's API_TOKEN, or a fresh one per start:
            # never from the repository.
            environment["API_TOKEN"] = environ.get("API_TOKEN") or secrets.token_urlsafe(24)
        apply(environ, environment, saved)
        settings = Settings.from_env(environ)
        transport = moto.in_process()
        clients = Clients(settings, transport.attach_session(boto3.session.Session()))  # provisioning: no socket
        provisioned = provision(clients, settings)
        ensure_export_bucket(clients, settings)
        create_sample_tables(clients, list(SAMPLE_TABLES), SAMPLE_ROWS, provisioned)
        enable_export_pitr(clients, settings)
        clients.ssm.put_parameter(Name=LOCAL_WEBHOOK_SECRET.partition(":")[2], Value=webhook_secret,
                                  Type="SecureString", Overwrite=True)
        targets = provision_sample_targets(clients)
        tables = provision_sources(clients, settings.task_sources)  # the samples' and the user's own
        if tables:
            provisioned.environment["TASK_SOURCE_STREAMS"] = json.dumps(
                {name: table.stream_arn for name, table in tables.items() if table.stream_arn})
        environment.update(provisioned.environment)
        apply(environ, provisioned.environment, saved)
        report = ShellReport.of(shell, environment)
        app_module = load_app(project_dir)
        chalice_config = load_chalice_config(project_dir, stage)
        if local.handler_processes:  # they import the app while this process does
            handlers = HandlerProcesses(local.handler_processes, transport, environ, project_dir, stage,
                                        chalice_config.lambda_memory_size or 128, out).start()
        warm(app_module, transport.attach)
        runtime = Runtime(
            app_module.app, moto.endpoint,
            RuntimeOptions(api_port=local.api_port, stage=stage, region=region,
                           scheduler_jitter_seconds=local.scheduler_jitter_seconds,
                           ttl_lag_seconds=local.ttl_lag_seconds,
                           sqs_max_concurrency=local.sqs_max_concurrency,
                           stream_failure=stream_failure_policy(shell, settings.task_dlq)),
            config=chalice_config, out=out, writes=moto_speed.watch_writes,
            schedule_changes=moto_speed.watch_schedules, attach=transport.attach, handlers=handlers,
            **runtime_kwargs)
        if handlers is not None and not handlers.wait_ready(HANDLERS_READY_SECONDS):
            out(f"handler processes not ready after {HANDLERS_READY_SECONDS:g}s: handlers run in this process "
                "until they are")
        runtime.start()
        if run_file is not None:  # the app's settings as it read them, the shell's taken ones included
            write_run_file(run_file, {**environment, **report.taken}, runtime.api_url)
    except BaseException:
        if handlers is not None:
            handlers.stop()
        receiver.stop()
        moto.stop()
        restore(environ, saved)
        logger.setLevel(log_level)
        raise
    defaults = {v.name: v.default for v in VARIABLES}
    effective = {name: environ.get(name, defaults.get(name, "")) for name in banner_settings()}
    effective = {name: value for name, value in effective.items() if value or name not in SHOWN_WHEN_SET}
    return LocalStage(moto, runtime, app_module, environment, provisioned, environ, saved, shell=report,
                      effective=effective, sources=source_lines(settings.task_sources, tables), log_level=log_level,
                      run_file=run_file, webhook=receiver, targets=targets, handlers=handlers)
