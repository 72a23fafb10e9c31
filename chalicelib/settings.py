"""One typed settings object, read from the stage's environment variables.

Chalice applies a stage's ``environment_variables`` (.chalice/config.json)
before it imports app.py, so ``Settings.from_env()`` at import sees them; the
tests set the same variables in conftest.py.  Every bad value fails fast with a
``SettingsError`` naming the variable and the value.

The table below is the single source of the names, defaults and meanings; the
docs/configuration.md's table is checked against it by a test (tests/unit/test_docs.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from chalicelib import schedule_expr

if TYPE_CHECKING:  # chalicelib.sources is loaded only by a stage that declares task sources (cold start)
    from chalicelib.sources import SourceError, TaskSource

T = TypeVar("T")


class SettingsError(ValueError):
    """A configuration variable has a value the app cannot use."""

    def __init__(self, name: str, value: str, expected: str) -> None:
        super().__init__(f"{name}={value!r} is invalid: {expected}")
        self.name = name
        self.value = value


class SourceSettingsError(SettingsError):
    """A task source (TASK_SOURCES) the app cannot use: ``source`` and ``field`` name the culprit."""

    def __init__(self, error: SourceError) -> None:
        ValueError.__init__(self, f"TASK_SOURCES is invalid: {error}")
        self.name = "TASK_SOURCES"
        self.value = ""
        self.source = error.source
        self.field = error.field


class Variable(NamedTuple):  # a NamedTuple: cheaper to define at import than a dataclass, as immutable
    name: str
    default: str
    meaning: str


# name, default, meaning: every configuration variable the app reads.
VARIABLES: tuple[Variable, ...] = (
    Variable("STAGE", "local", "Stage name: local, dev or prod."),
    Variable("AWS_REGION", "us-east-1", "Region of every AWS client (AWS_DEFAULT_REGION also read)."),
    Variable("AWS_ENDPOINT_URL", "", "Endpoint for every AWS client; the local stage points it at moto's server."),
    Variable("AWS_MAX_ATTEMPTS", "8", "Attempts per AWS call in all, first one included (botocore retry mode below)."),
    Variable("AWS_RETRY_MODE", "adaptive", "botocore retry mode: standard or adaptive."),
    Variable("LOG_LEVEL", "INFO", "Log level of the structured JSON logs."),
    Variable("STATE_TABLE", "timekeeper-state", "The app's state table: backup runs, claims, processor progress."),
    Variable("ALERT_TOPIC_ARN", "", "SNS topic for alerts and run summaries (empty: alerts are only logged)."),
    # backups
    Variable("BACKUP_SCHEDULE", "rate(1 day)", "When backup runs start: an EventBridge rate() or cron() expression."),
    Variable("BACKUP_TABLES", "", "Comma-separated table names to back up."),
    Variable("BACKUP_TABLE_PATTERN", "", "Regular expression; every table whose whole name matches is backed up."),
    Variable("BACKUP_TABLE_TAG", "", "key=value; every table with that tag is backed up."),
    Variable("BACKUP_NAME_PREFIX", "",
             "Prefix of this stage's backup names (empty: timekeeper-<STAGE>); retention only touches names "
             "that are exactly this prefix, a selected table and a time. No two stages may share it, nor "
             "may one be another's followed by '-' (make deploy refuses)."),
    Variable("BACKUP_API_TABLES", "",
             "Comma-separated tables POST /backups may name besides the selection (BACKUP_TABLES, "
             "BACKUP_TABLE_PATTERN, BACKUP_TABLE_TAG); the app's own state and tasks tables only if listed here."),
    Variable("BACKUP_MONITOR_QUEUE", "timekeeper-backup-monitor", "SQS queue (name) of backup-run monitor messages."),
    Variable("BACKUP_MONITOR_DLQ", "timekeeper-backup-monitor-dlq", "SQS queue (name) for monitor messages that cannot be processed."),
    Variable("BACKUP_MONITOR_DELAY_SECONDS", "300", "Delay before each monitor poll, 0-900 seconds."),
    Variable("BACKUP_DEADLINE_MINUTES", "360", "A backup still CREATING this long after its run started is stuck."),
    Variable("BACKUP_RETENTION_DAYS", "3", "This app's backups older than this are deleted when a run finishes."),
    Variable("BACKUP_MIN_KEEP", "2", "Retention never leaves a table with fewer AVAILABLE backups than this."),
    Variable("BACKUP_CREATE_RATE", "25", "CreateBackup calls per second at most (AWS allows 50)."),
    Variable("BACKUP_DELETE_RATE", "8", "DeleteBackup calls per second at most (AWS allows 10)."),
    Variable("BACKUP_RUN_LEASE_SECONDS", "900",
             "How long a backup run's worker may be silent before it counts as dead: a STARTING run is then "
             "abandoned (alerted), a FINISHING one taken over, a RUNNING one whose poll stopped re-queued. "
             "360-1200: above the trigger's 300 s timeout, below the monitor's 4 redeliveries x 300 s."),
    Variable("BACKUP_VERIFY", "none",
             "Restore verification after a run: none, a whole number N (N of the run's tables, rotating so every "
             "table is verified over time) or comma-separated table names; at most 50 (AWS's concurrent restores). "
             "See docs/backups-verification.md."),
    Variable("BACKUP_REQUIRE_PITR", "false",
             "true: a run alerts (once) when a selected table has point-in-time recovery off."),
    # tasks
    Variable("TASKS_TABLE", "timekeeper-tasks", "Table of task items (string keys PK and SK)."),
    Variable("TASKS_STREAM_ARN", "", "Stream ARN of the tasks table (NEW_AND_OLD_IMAGES)."),
    Variable("TTL_ATTRIBUTE", "expires_at", "The tasks table's TTL attribute (epoch seconds); lazy tasks' due time."),
    Variable("DUE_ATTRIBUTE", "run_at", "Item attribute holding the due time (ISO-8601 or epoch seconds)."),
    Variable("BUCKET_ATTRIBUTE", "due_bucket", "Item attribute holding the sharded due bucket of interval tasks."),
    Variable("BUCKET_INDEX", "due-bucket-index", "GSI on BUCKET_ATTRIBUTE with the due epoch as sort key."),
    Variable("BUCKET_MINUTES", "1", "Width of one due bucket in minutes."),
    Variable("BUCKET_SHARDS", "4", "Shards per due bucket, to spread writes over GSI partitions."),
    Variable("DEFAULT_STRATEGY", "exact", "Strategy of an item that names none: exact, interval or lazy."),
    Variable("DEFAULT_EMAIL_SUBJECT", "Reminder", "Subject of the default action's email."),
    Variable("DEFAULT_EMAIL_BODY", "This is your reminder.", "Body of the default action's email."),
    Variable("SENDER_EMAIL", "noreply@example.com", "Verified SES sender of every email."),
    Variable("SCHEDULE_GROUP", "timekeeper", "EventBridge Scheduler group of the exact strategy's schedules."),
    Variable("SCHEDULER_ROLE_ARN", "", "Role EventBridge Scheduler assumes to send to the due queue."),
    Variable("SCHEDULER_DLQ_ARN", "", "Dead-letter queue (ARN) of EventBridge Scheduler deliveries."),
    Variable("DUE_QUEUE_URL", "", "URL of DUE_QUEUE, set by provisioning (empty: looked up once per container)."),
    Variable("DUE_QUEUE_ARN", "", "ARN of DUE_QUEUE, set by provisioning (empty: looked up once per container)."),
    Variable("DUE_QUEUE", "timekeeper-due", "SQS queue (name) of due tasks, consumed by the executor."),
    Variable("TASK_DLQ", "timekeeper-task-dlq", "SQS queue (name) for task records and messages that cannot be processed."),
    Variable("DUE_DLQ", "timekeeper-due-dlq", "SQS queue (name) where SQS moves due messages after their last failed delivery."),
    Variable("PROCESSOR_SCHEDULE", "rate(1 minute)", "When the interval processor runs: rate() or cron()."),
    Variable("TASK_MAX_ATTEMPTS", "3", "Attempts of a failing action before the task is FAILED."),
    Variable("TASK_CLAIM_LEASE_SECONDS", "300", "A claimed execution whose worker died is taken over after this."),
    Variable("TASK_MAX_TAKEOVERS", "3", "Takeovers of an execution whose worker died before it is FAILED, unrun."),
    Variable("DIRECT_QUEUE_HORIZON_SECONDS", "900", "Exact tasks due sooner skip Scheduler: due queue with a delay."),
    Variable("SCHEDULE_LEAD_SECONDS", "60", "Exact tasks' schedules fire this early; the executor waits out the rest."),
    Variable("PAST_DUE_GRACE_SECONDS", "60", "The API accepts a due time this far in the past."),
    Variable("TASK_RECORD_RETENTION_DAYS", "30", "A finished task's record (DONE, FAILED, CANCELLED) expires this long after it finished."),
    Variable("STREAM_CONCURRENCY", "20", "Records of one stream batch processed at once (different keys)."),
    Variable("EXECUTOR_CONCURRENCY", "10", "Due messages of one executor batch handled at once."),
    # API
    Variable("API_AUTH", "none", "API authorization: none, token, iam, api_key or cognito."),
    Variable("API_TOKEN", "", "Bearer token the API requires when API_AUTH=token (local stage)."),
    Variable("COGNITO_USER_POOL_ARN", "", "User pool whose JWTs the API accepts when API_AUTH=cognito."),
    Variable("API_THROTTLE_RATE", "50",
             "Deployed stages: requests per second API Gateway lets through to the API (steady state)."),
    Variable("API_THROTTLE_BURST", "100", "Deployed stages: requests API Gateway lets through at once (bucket size)."),
    Variable("TASK_ACTION_TARGET_ARNS", "",
             "Comma-separated SQS queue / SNS topic ARNs (IAM wildcards * and ? allowed) that tasks' sqs and sns "
             "actions may send to: the API refuses others (400), the stream dead-letters items naming others, the "
             "executor refuses them, and task_executor's IAM policy grants exactly these. Empty: none."),
    # operations (docs/operations.md)
    Variable("LATENESS_ALARM_MS", "5000",
             "Deployed stages: the exact strategy's p99 lateness (ms, per 5 minutes, twice in a row) above which "
             "the lateness alarm tells the alert topic."),
    Variable("TASK_SOURCES", "",
             "The user's own tables whose items are tasks: a JSON object of source name -> source (table, "
             "strategy, due or TTL attribute, action templates, ...; docs/task-sources.md). Empty: none."),
    Variable("TASK_SOURCE_STREAMS", "",
             "Stream ARNs of the task sources' tables, set by provisioning: a JSON object of source name -> ARN."),
)

# Sort key of the due-bucket GSI: the due time as epoch seconds (a number), written
# next to the bucket by the API or the stream step whatever form DUE_ATTRIBUTE has.
DUE_EPOCH_ATTRIBUTE = "due_epoch"

# TTL attribute of the state table: short-lived records (execution claims) expire by it.
STATE_TTL_ATTRIBUTE = "expires_at"

# Every queue and every topic a stage provisions, as the Settings attribute holding its name: the one declaration
# of the app's own targets. No task action may send to one (chalicelib/tasks/actions.py ``own_targets``), the
# executor's IAM policy denies those it does not use itself (deploy/iam.py), and a test checks that
# provisioning and the CloudFormation template make exactly these (tests/deploy/test_own_targets.py).
OWN_QUEUES = ("due_queue", "due_dlq", "task_dlq", "scheduler_dlq", "backup_monitor_queue", "backup_monitor_dlq")
OWN_TOPICS = ("alert_topic",)

_DEFAULTS = {v.name: v.default for v in VARIABLES}
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_QUEUE_URL = re.compile(r"^(?:https?://[^\s/]+/[0-9]{12}/[A-Za-z0-9_-]{1,80})?$")
_ARN = re.compile(r"^arn:aws[a-zA-Z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{12}:.+$")
# An SQS queue or SNS topic ARN, IAM wildcards allowed in region, account and name.
ACTION_TARGET_ARN = re.compile(r"arn:aws[a-zA-Z-]*:(?:sqs|sns):[a-z0-9*?-]+:[0-9*?]{1,12}:[A-Za-z0-9_.*?-]{1,256}")
_BACKUP_PREFIX = re.compile(r"(?:[A-Za-z0-9_.-]{1,100})?")


VERIFY_MAX = 50  # AWS runs at most 50 restores of an account at once


class BackupVerify(NamedTuple):
    """BACKUP_VERIFY: ``sample`` tables of each run (rotating), or the ``tables`` listed; neither: none."""

    sample: int = 0
    tables: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.sample or self.tables)


def default_backup_prefix(stage: str) -> str:
    """``timekeeper-<stage>`` (characters a backup name cannot hold become ``_``; at most 100)."""
    return ("timekeeper-" + re.sub(r"[^A-Za-z0-9_.-]", "_", stage or "local"))[:100]


def backup_name_prefix_of(environment: Mapping[str, str]) -> str:
    """The backup name prefix a stage with these environment variables uses (for deploy's checks)."""
    return _Reader(environment).backup_name_prefix()


# Set by deploy/bytecode.py, through which ``make deploy`` and ``python -m deploy.cli package`` run chalice:
# those provision the stage first or merge the stream in from their template.
DEPLOY_TOOL_VARIABLE = "TIMEKEEPER_DEPLOY_TOOL"
# What ``make deploy`` provisions and records in the stage before Chalice may build its functions from it.
PROVISIONED_VARIABLES = ("TASKS_STREAM_ARN", "SCHEDULER_ROLE_ARN")
_CHALICE_BUILDS = ("deploy", "package")


def chalice_command(argv: Sequence[str]) -> str | None:
    """The command of a ``chalice`` command line (``deploy`` of ``chalice --debug deploy --stage prod``);
    None when the process is not chalice's CLI."""
    if not argv or os.path.basename(argv[0]) != "chalice":
        return None
    args = list(argv[1:])
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option == "--project-dir" and args:
            args.pop(0)
    return args[0] if args else None


def unprovisioned_refusal(environ: Mapping[str, str], argv: Sequence[str]) -> str | None:
    """Why plain ``chalice deploy`` / ``chalice package`` must not build this stage yet, or None.

    On a fresh clone the stage has no TASKS_STREAM_ARN: ``chalice package`` would write the
    stream mapping with ``"Stream": ""`` and ``chalice deploy`` would fail half-way, after
    creating roles and functions.  ``make deploy`` (deploy/cli.py) provisions the stage and
    records the ARNs first; ``chalice local``, the tests and the Lambda runtime are never refused.
    """
    command = chalice_command(argv)
    if command not in _CHALICE_BUILDS or environ.get(DEPLOY_TOOL_VARIABLE) == "1":
        return None
    missing = [name for name in PROVISIONED_VARIABLES if not environ.get(name, "").strip()]
    if not missing:
        return None
    stage = environ.get("STAGE", "") or "<stage>"
    return (f"error: chalice {command}: stage {stage} has no {' or '.join(missing)} in .chalice/config.json, "
            f"which only exist once the stage is provisioned. Run `make deploy STAGE={stage}` first (it "
            f"provisions the tables and queues, records their ARNs, then runs chalice deploy); for a "
            f"CloudFormation template run `python -m deploy.cli package --stage {stage} OUT_DIR`.")


@dataclass(frozen=True)
class Settings:
    stage: str
    region: str
    endpoint_url: str | None
    aws_max_attempts: int
    aws_retry_mode: str
    log_level: str
    state_table: str
    alert_topic_arn: str
    backup_schedule: str
    backup_tables: tuple[str, ...]
    backup_table_pattern: re.Pattern[str] | None
    backup_table_tag: tuple[str, str] | None
    backup_name_prefix: str
    backup_api_tables: tuple[str, ...]
    backup_monitor_queue: str
    backup_monitor_dlq: str
    backup_monitor_delay_seconds: int
    backup_deadline_minutes: int
    backup_retention_days: int
    backup_min_keep: int
    backup_create_rate: float
    backup_delete_rate: float
    backup_run_lease_seconds: int
    tasks_table: str
    tasks_stream_arn: str
    ttl_attribute: str
    due_attribute: str
    bucket_attribute: str
    bucket_index: str
    bucket_minutes: int
    bucket_shards: int
    default_strategy: str
    default_email_subject: str
    default_email_body: str
    sender_email: str
    schedule_group: str
    scheduler_role_arn: str
    scheduler_dlq_arn: str
    due_queue_url: str
    due_queue_arn: str
    due_queue: str
    task_dlq: str
    due_dlq: str
    processor_schedule: str
    task_max_attempts: int
    task_claim_lease_seconds: int
    task_max_takeovers: int
    direct_queue_horizon_seconds: int
    schedule_lead_seconds: int
    past_due_grace_seconds: int
    stream_concurrency: int
    executor_concurrency: int
    api_auth: str
    api_token: str = field(repr=False)
    cognito_user_pool_arn: str = ""
    api_throttle_rate: float = 50.0
    api_throttle_burst: int = 100
    task_action_target_arns: tuple[str, ...] = ()
    lateness_alarm_ms: int = 5000
    task_record_retention_days: int = 30
    backup_verify: BackupVerify = field(default_factory=BackupVerify)
    backup_require_pitr: bool = False
    task_sources: tuple[TaskSource, ...] = ()

    @property
    def scheduler_dlq(self) -> str:
        """The Scheduler's dead-letter queue (name): SCHEDULER_DLQ_ARN's, named after the due queue until provisioned."""
        return self.scheduler_dlq_arn.rsplit(":", 1)[-1] if self.scheduler_dlq_arn else f"{self.due_queue}-scheduler-dlq"

    @property
    def alert_topic(self) -> str:
        """The alert topic (name): ALERT_TOPIC_ARN's, ``timekeeper-<stage>-alerts`` until provisioned."""
        return self.alert_topic_arn.rsplit(":", 1)[-1] if self.alert_topic_arn else f"timekeeper-{self.stage}-alerts"

    def own_queues(self) -> tuple[str, ...]:
        """The names of the queues the stage provisions (OWN_QUEUES)."""
        return tuple(dict.fromkeys(str(getattr(self, name)) for name in OWN_QUEUES))

    def own_topics(self) -> tuple[str, ...]:
        """The names of the topics the stage provisions (OWN_TOPICS)."""
        return tuple(dict.fromkeys(str(getattr(self, name)) for name in OWN_TOPICS))

    def source(self, name: str) -> TaskSource | None:
        """The declared task source ``name`` (None: no such source)."""
        for source in self.task_sources:
            if source.name == name:
                return source
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = _Reader(os.environ if environ is None else environ)
        region = env.raw("AWS_REGION") or env.environ.get("AWS_DEFAULT_REGION", "") or _DEFAULTS["AWS_REGION"]
        api_auth = env.choice("API_AUTH", ("none", "token", "iam", "api_key", "cognito"))
        api_token = env.text("API_TOKEN")
        if api_auth == "token" and not api_token:
            raise SettingsError("API_TOKEN", "", "required when API_AUTH=token")
        cognito_user_pool_arn = env.optional_arn("COGNITO_USER_POOL_ARN")
        if api_auth == "cognito" and not cognito_user_pool_arn:
            raise SettingsError("COGNITO_USER_POOL_ARN", "", "required when API_AUTH=cognito")
        return cls(
            stage=env.text("STAGE"),
            region=region,
            endpoint_url=env.text("AWS_ENDPOINT_URL") or None,
            aws_max_attempts=env.integer("AWS_MAX_ATTEMPTS", 1, 20),
            aws_retry_mode=env.choice("AWS_RETRY_MODE", ("standard", "adaptive")),
            log_level=env.choice("LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR")),
            state_table=env.matching("STATE_TABLE", _TABLE_NAME, "a DynamoDB table name"),
            alert_topic_arn=env.optional_arn("ALERT_TOPIC_ARN"),
            backup_schedule=env.schedule("BACKUP_SCHEDULE"),
            backup_tables=env.table_list("BACKUP_TABLES"),
            backup_table_pattern=env.regex("BACKUP_TABLE_PATTERN"),
            backup_table_tag=env.tag("BACKUP_TABLE_TAG"),
            backup_name_prefix=env.backup_name_prefix(),
            backup_api_tables=env.table_list("BACKUP_API_TABLES"),
            backup_monitor_queue=env.matching("BACKUP_MONITOR_QUEUE", _QUEUE_NAME, "an SQS queue name"),
            backup_monitor_dlq=env.matching("BACKUP_MONITOR_DLQ", _QUEUE_NAME, "an SQS queue name"),
            backup_monitor_delay_seconds=env.integer("BACKUP_MONITOR_DELAY_SECONDS", 0, 900),
            backup_deadline_minutes=env.integer("BACKUP_DEADLINE_MINUTES", 1, 7 * 24 * 60),
            backup_retention_days=env.integer("BACKUP_RETENTION_DAYS", 0, 36500),
            backup_min_keep=env.integer("BACKUP_MIN_KEEP", 1, 1000),
            backup_create_rate=env.number("BACKUP_CREATE_RATE", 0.1, 50),
            backup_delete_rate=env.number("BACKUP_DELETE_RATE", 0.1, 10),
            backup_run_lease_seconds=env.integer("BACKUP_RUN_LEASE_SECONDS", 360, 1200),
            tasks_table=env.matching("TASKS_TABLE", _TABLE_NAME, "a DynamoDB table name"),
            tasks_stream_arn=env.optional_arn("TASKS_STREAM_ARN"),
            ttl_attribute=env.attribute("TTL_ATTRIBUTE"),
            due_attribute=env.attribute("DUE_ATTRIBUTE"),
            bucket_attribute=env.attribute("BUCKET_ATTRIBUTE"),
            bucket_index=env.matching("BUCKET_INDEX", _TABLE_NAME, "a DynamoDB index name"),
            bucket_minutes=env.integer("BUCKET_MINUTES", 1, 1440),
            bucket_shards=env.integer("BUCKET_SHARDS", 1, 100),
            default_strategy=env.choice("DEFAULT_STRATEGY", ("exact", "interval", "lazy")),
            default_email_subject=env.text("DEFAULT_EMAIL_SUBJECT"),
            default_email_body=env.text("DEFAULT_EMAIL_BODY"),
            sender_email=env.matching(
                "SENDER_EMAIL", re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$"), "an email address"),
            schedule_group=env.matching(
                "SCHEDULE_GROUP", re.compile(r"^[0-9a-zA-Z_.-]{1,64}$"), "a Scheduler group name"),
            scheduler_role_arn=env.optional_arn("SCHEDULER_ROLE_ARN"),
            scheduler_dlq_arn=env.optional_arn("SCHEDULER_DLQ_ARN"),
            due_queue_url=env.matching("DUE_QUEUE_URL", _QUEUE_URL, "an SQS queue URL (http[s]://host/account/name)"),
            due_queue_arn=env.optional_arn("DUE_QUEUE_ARN"),
            due_queue=env.matching("DUE_QUEUE", _QUEUE_NAME, "an SQS queue name"),
            task_dlq=env.matching("TASK_DLQ", _QUEUE_NAME, "an SQS queue name"),
            due_dlq=env.matching("DUE_DLQ", _QUEUE_NAME, "an SQS queue name"),
            processor_schedule=env.schedule("PROCESSOR_SCHEDULE"),
            task_max_attempts=env.integer("TASK_MAX_ATTEMPTS", 1, 100),
            task_claim_lease_seconds=env.integer("TASK_CLAIM_LEASE_SECONDS", 5, 86400),
            task_max_takeovers=env.integer("TASK_MAX_TAKEOVERS", 0, 100),
            direct_queue_horizon_seconds=env.integer("DIRECT_QUEUE_HORIZON_SECONDS", 0, 900),
            schedule_lead_seconds=env.integer("SCHEDULE_LEAD_SECONDS", 0, 900),
            past_due_grace_seconds=env.integer("PAST_DUE_GRACE_SECONDS", 0, 86400),
            stream_concurrency=env.integer("STREAM_CONCURRENCY", 1, 64),
            executor_concurrency=env.integer("EXECUTOR_CONCURRENCY", 1, 64),
            api_auth=api_auth,
            api_token=api_token,
            cognito_user_pool_arn=cognito_user_pool_arn,
            api_throttle_rate=env.number("API_THROTTLE_RATE", 1, 10000),
            api_throttle_burst=env.integer("API_THROTTLE_BURST", 1, 5000),
            task_action_target_arns=env.action_targets("TASK_ACTION_TARGET_ARNS"),
            lateness_alarm_ms=env.integer("LATENESS_ALARM_MS", 100, 3_600_000),
            task_record_retention_days=env.integer("TASK_RECORD_RETENTION_DAYS", 1, 36500),
            backup_verify=env.backup_verify("BACKUP_VERIFY"),
            backup_require_pitr=env.choice("BACKUP_REQUIRE_PITR", ("true", "false")) == "true",
            task_sources=env.task_sources(),
        )


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def raw(self, name: str) -> str:
        return self.environ.get(name, "").strip()

    def text(self, name: str) -> str:
        value = self.environ.get(name)
        return _DEFAULTS[name] if value is None else value.strip()

    def _convert(self, name: str, convert: Callable[[str], T], expected: str) -> T:
        value = self.text(name)
        try:
            return convert(value)
        except (ValueError, re.error) as exc:
            detail = f" ({exc})" if str(exc) and expected not in str(exc) else ""
            raise SettingsError(name, value, expected + detail) from exc

    def integer(self, name: str, lo: int, hi: int) -> int:
        def convert(value: str) -> int:
            number = int(value)
            if not lo <= number <= hi:
                raise ValueError("")
            return number
        return self._convert(name, convert, f"expected a whole number from {lo} to {hi}")

    def number(self, name: str, lo: float, hi: float) -> float:
        def convert(value: str) -> float:
            number = float(value)
            if not lo <= number <= hi:
                raise ValueError("")
            return number
        return self._convert(name, convert, f"expected a number from {lo} to {hi}")

    def choice(self, name: str, options: tuple[str, ...]) -> str:
        def convert(value: str) -> str:
            if value not in options:
                raise ValueError("")
            return value
        return self._convert(name, convert, "expected one of " + ", ".join(options))

    def matching(self, name: str, pattern: re.Pattern[str], expected: str) -> str:
        def convert(value: str) -> str:
            if not pattern.fullmatch(value):  # "$" alone would also match before a final newline
                raise ValueError("")
            return value
        return self._convert(name, convert, f"expected {expected}")

    def backup_name_prefix(self) -> str:
        def convert(value: str) -> str:
            if not _BACKUP_PREFIX.fullmatch(value):
                raise ValueError("")
            return value or default_backup_prefix(self.text("STAGE"))
        return self._convert("BACKUP_NAME_PREFIX", convert, "expected 1-100 characters of [A-Za-z0-9_.-] or nothing")

    def attribute(self, name: str) -> str:
        return self.matching(name, re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$"), "an attribute name")

    def optional_arn(self, name: str) -> str:
        def convert(value: str) -> str:
            if value and not _ARN.match(value):
                raise ValueError("")
            return value
        return self._convert(name, convert, "expected an ARN (arn:aws:...) or nothing")

    def schedule(self, name: str) -> str:
        def convert(value: str) -> str:
            schedule_expr.parse(value)
            return value
        return self._convert(name, convert, "expected an EventBridge rate() or cron() expression")

    def table_list(self, name: str) -> tuple[str, ...]:
        def convert(value: str) -> tuple[str, ...]:
            names = [n.strip() for n in value.split(",") if n.strip()]
            for table in names:
                if not _TABLE_NAME.match(table):
                    raise ValueError(f"{table!r} is not a table name")
            return tuple(dict.fromkeys(names))
        return self._convert(name, convert, "expected comma-separated table names")

    def backup_verify(self, name: str) -> BackupVerify:
        def convert(value: str) -> BackupVerify:
            if value.lower() in ("", "none"):
                return BackupVerify()
            if value.isdigit():
                if not 1 <= int(value) <= VERIFY_MAX:
                    raise ValueError(f"a number of tables must be 1 to {VERIFY_MAX}")
                return BackupVerify(sample=int(value))
            names = [n.strip() for n in value.split(",") if n.strip()]
            for table in names:
                if not _TABLE_NAME.match(table):
                    raise ValueError(f"{table!r} is not a table name")
            if len(set(names)) > VERIFY_MAX:
                raise ValueError(f"at most {VERIFY_MAX} tables, got {len(set(names))}")
            return BackupVerify(tables=tuple(dict.fromkeys(names)))
        return self._convert(name, convert, f"expected none, a whole number from 1 to {VERIFY_MAX} "
                             "or comma-separated table names")

    def action_targets(self, name: str) -> tuple[str, ...]:
        def convert(value: str) -> tuple[str, ...]:
            targets = [t.strip() for t in value.split(",") if t.strip()]
            for target in targets:
                if not ACTION_TARGET_ARN.fullmatch(target):
                    raise ValueError(f"{target!r} is not an SQS queue or SNS topic ARN")
            return tuple(dict.fromkeys(targets))
        return self._convert(name, convert, "expected comma-separated SQS queue / SNS topic ARNs")

    def task_sources(self) -> tuple[TaskSource, ...]:
        if not (self.text("TASK_SOURCES").strip() or self.text("TASK_SOURCE_STREAMS").strip()):
            return ()  # what parse_sources answers for nothing declared, without loading it
        from chalicelib.sources import SourceError, parse_sources
        try:
            return parse_sources(self.text("TASK_SOURCES"), self.text("TASK_SOURCE_STREAMS"))
        except SourceError as exc:
            raise SourceSettingsError(exc) from exc

    def regex(self, name: str) -> re.Pattern[str] | None:
        return self._convert(name, lambda v: re.compile(v) if v else None,
                             "expected a regular expression")

    def tag(self, name: str) -> tuple[str, str] | None:
        def convert(value: str) -> tuple[str, str] | None:
            if not value:
                return None
            key, sep, tag_value = value.partition("=")
            if not sep or not key.strip():
                raise ValueError("")
            return key.strip(), tag_value.strip()
        return self._convert(name, convert, "expected key=value")
