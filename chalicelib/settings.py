"""One typed settings object, read from the stage's environment variables.

Chalice applies a stage's ``environment_variables`` (.chalice/config.json)
before it imports app.py, so ``Settings.from_env()`` at import sees them; the
tests set the same variables in conftest.py.  Every bad value fails fast with a
``SettingsError`` naming the variable and the value.

Each variable is declared once, on the ``Settings`` field it feeds: its name, default, meaning and
parser (``setting(...)``).  ``Settings.from_env`` parses every declared variable into its field;
``VARIABLES`` lists the declarations, which docs/configuration.md's table repeats word for word (a test
checks names, defaults and meanings: tests/unit/test_docs.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from datetime import UTC, tzinfo
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

from chalicelib import schedule_expr
from chalicelib.names import APP_NAME as APP_NAME  # re-exported

if TYPE_CHECKING:  # chalicelib.sources is loaded only by a stage that declares task sources (cold start)
    from chalicelib.sources import SourceError, TaskSource
    from chalicelib.tasks.flow_limits import Limit

T = TypeVar("T")
MIN_API_TOKEN = 32  # characters of API_TOKEN on a stage other than local (`make run` picks its own)


class SettingsError(ValueError):
    """A configuration variable has a value the app cannot use."""

    def __init__(self, name: str, value: str, expected: str) -> None:
        super().__init__(f"{name}={value!r} is invalid: {expected}")
        self.name = name
        self.value = value


class SourceSettingsError(SettingsError):
    """A task source (TASK_SOURCES, TASK_SOURCES_FILE) the app cannot use: ``source`` and ``field`` name the
    culprit, ``name`` the variable and ``value`` the file it is declared in (chalicelib/<path>; "": the variable)."""

    def __init__(self, error: SourceError) -> None:
        in_file = error.origin != "TASK_SOURCES"
        where = f"TASK_SOURCES_FILE ({error.origin})" if in_file else "TASK_SOURCES"
        ValueError.__init__(self, f"{where} is invalid: {error}")
        self.name = "TASK_SOURCES_FILE" if in_file else "TASK_SOURCES"
        self.value = error.origin if in_file else ""
        self.source = error.source
        self.field = error.field


class Parse(Generic[T]):
    """How a variable's text becomes its field's value: ``convert(text, environment)`` raises ValueError (or
    re.error) for a bad value, reported as ``<NAME>='<value>' is invalid: <expected>``."""

    __slots__ = ("convert", "expected")

    def __init__(self, convert: Callable[[str, _Reader], T], expected: str = "") -> None:
        self.convert = convert
        self.expected = expected


class Variable(NamedTuple):  # a NamedTuple: cheaper to define at import than a dataclass, as immutable
    name: str
    default: str
    meaning: str  # as docs/configuration.md shows it (Markdown)
    parse: Parse[Any]


def setting(name: str, default: str, meaning: str, parse: Parse[T], *, shown: bool = True) -> T:
    """A Settings field read from the variable ``name`` (unset: ``default``) by ``parse``."""
    return cast(T, field(repr=shown, metadata={"variable": Variable(name, default, meaning, parse)}))


# Sort key of the due-bucket GSI: the due time as epoch seconds (a number), written
# next to the bucket by the API or the stream step whatever form DUE_ATTRIBUTE has.
DUE_EPOCH_ATTRIBUTE = "due_epoch"

# TTL attribute of the state table: short-lived records (execution claims) expire by it.
STATE_TTL_ATTRIBUTE = "expires_at"

# Every queue and every topic a stage provisions, as the Settings attribute holding its name: the one declaration
# of the app's own targets. No task action may send to one (chalicelib/tasks/actions/targets.py ``own_targets``), the
# executor's IAM policy denies those it does not use itself (deploy/iam.py), and a test checks that
# provisioning and the CloudFormation template make exactly these (tests/deploy/test_own_targets.py).
OWN_QUEUES = ("due_queue", "due_dlq", "task_dlq", "scheduler_dlq", "backup_monitor_queue", "backup_monitor_dlq")
OWN_TOPICS = ("alert_topic",)
# The app's own Lambda functions, refused as ``lambda`` action targets the same way: Chalice names a stage's
# functions <APP_NAME>-<stage> (the API handler) and <APP_NAME>-<stage>-<name> (.chalice/config.json's app_name),
# so two name patterns cover every one, a task source's stream function included (Settings.own_functions).  Every
# stage's queues, topics and functions are named <APP_NAME>-...: another stage's are refused unless
# TASK_ACTION_TARGET_ARNS names them exactly (chalicelib/tasks/actions/targets.py ``app_targets``). APP_NAME: chalicelib/names.py.
# The event buses the stage provisions (as Settings attributes holding their names), refused as ``eventbridge``
# targets: none. backup_trigger's rule is a schedule on the default bus, which no PutEvents entry can fire.
OWN_BUSES: tuple[str, ...] = ()

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_QUEUE_URL = re.compile(r"^(?:https?://[^\s/]+/[0-9]{12}/[A-Za-z0-9_-]{1,80})?$")
_ARN = re.compile(r"^arn:aws[a-zA-Z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{12}:.+$")
# An SQS queue, SNS topic, Lambda function (or alias / version), EventBridge bus or Step Functions state machine
# ARN, IAM wildcards allowed in region, account and name.
ACTION_TARGET_ARN = re.compile(
    r"arn:aws[a-zA-Z-]*:(?:(?:sqs|sns):[a-z0-9*?-]+:[0-9*?]{1,12}:[A-Za-z0-9_.*?-]{1,256}"
    r"|lambda:[a-z0-9*?-]+:[0-9*?]{1,12}:function:[A-Za-z0-9_*?-]{1,140}(?::[A-Za-z0-9_$*?-]{1,128})?"
    r"|events:[a-z0-9*?-]+:[0-9*?]{1,12}:event-bus/[A-Za-z0-9_./*?-]{1,256}"
    r"|states:[a-z0-9*?-]+:[0-9*?]{1,12}:stateMachine:[A-Za-z0-9_*?-]{1,80})")
_BACKUP_PREFIX = re.compile(r"(?:[A-Za-z0-9_.-]{1,100})?")
_BUCKET = re.compile(r"(?:[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])?")


def _in_range(kind: Callable[[str], T], lo: float, hi: float) -> Callable[[str, _Reader], T]:
    def convert(value: str, env: _Reader) -> T:
        number = kind(value)
        if not lo <= number <= hi:  # type: ignore[operator]
            raise ValueError("")
        return number
    return convert


def integer(lo: int, hi: int) -> Parse[int]:
    return Parse(_in_range(int, lo, hi), f"expected a whole number from {lo} to {hi}")


def number(lo: float, hi: float) -> Parse[float]:
    return Parse(_in_range(float, lo, hi), f"expected a number from {lo} to {hi}")


def choice(*options: str) -> Parse[str]:
    def convert(value: str, env: _Reader) -> str:
        if value not in options:
            raise ValueError("")
        return value
    return Parse(convert, "expected one of " + ", ".join(options))


def flag() -> Parse[bool]:
    """``true`` or ``false``."""
    words = choice("true", "false")
    return Parse(lambda value, env: words.convert(value, env) == "true", words.expected)


def matching(pattern: re.Pattern[str], expected: str) -> Parse[str]:
    def convert(value: str, env: _Reader) -> str:
        if not pattern.fullmatch(value):  # "$" alone would also match before a final newline
            raise ValueError("")
        return value
    return Parse(convert, f"expected {expected}")


def _optional_arn(value: str, env: _Reader) -> str:
    if value and not _ARN.match(value):
        raise ValueError("")
    return value


def _schedule(value: str, env: _Reader) -> str:
    schedule_expr.parse(value)
    return value


def _table_list(value: str, env: _Reader) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    for table in names:
        if not _TABLE_NAME.match(table):
            raise ValueError(f"{table!r} is not a table name")
    return tuple(dict.fromkeys(names))


def _region(value: str, env: _Reader) -> str:
    return env.raw("AWS_REGION") or env.environ.get("AWS_DEFAULT_REGION", "") or env.default("AWS_REGION")


def _backup_name_prefix(value: str, env: _Reader) -> str:
    if not _BACKUP_PREFIX.fullmatch(value):
        raise ValueError("")
    return value or default_backup_prefix(env.text("STAGE"))


def _export_prefix(value: str, env: _Reader) -> str:
    if not _BACKUP_PREFIX.fullmatch(value):
        raise ValueError("")
    return value or _backup_name_prefix(env.text("BACKUP_NAME_PREFIX"), env)


def _backup_verify(value: str, env: _Reader) -> BackupVerify:
    if value.lower() in ("", "none"):
        return BackupVerify()
    if value.isdigit():
        if not 1 <= int(value) <= VERIFY_MAX:
            raise ValueError(f"a number of tables must be 1 to {VERIFY_MAX}")
        return BackupVerify(sample=int(value))
    names = _table_list(value, env)
    if len(names) > VERIFY_MAX:
        raise ValueError(f"at most {VERIFY_MAX} tables, got {len(names)}")
    return BackupVerify(tables=names)


def _action_targets(value: str, env: _Reader) -> tuple[str, ...]:
    targets = [t.strip() for t in value.split(",") if t.strip()]
    for target in targets:
        if not ACTION_TARGET_ARN.fullmatch(target):
            raise ValueError(f"{target!r} is not an SQS queue, SNS topic, Lambda function, EventBridge bus or "
                             "Step Functions state machine ARN")
    return tuple(dict.fromkeys(targets))


def _webhook_origins(value: str, env: _Reader) -> tuple[str, ...]:
    if not value.strip():
        return ()
    from chalicelib.tasks.webhook import parse_origins  # loaded only by a stage that calls webhooks
    # What the executor of this stage would refuse on every call is refused here, at start (a deploy fails).
    return parse_origins(value, allow_loopback=env.text("TASK_WEBHOOK_ALLOW_LOOPBACK") == "true")


def _webhook_secrets(value: str, env: _Reader) -> tuple[str, ...]:
    if not value.strip():
        return ()
    from chalicelib.tasks.webhook import parse_secrets
    return parse_secrets(value)


def _task_sources(value: str, env: _Reader) -> tuple[TaskSource, ...]:
    streams = env.text("TASK_SOURCE_STREAMS")
    file_name = env.text("TASK_SOURCES_FILE")
    if not (value.strip() or streams.strip() or file_name):
        return ()  # what parse_sources answers for nothing declared, without loading it (cold start)
    file_text = _sources_file_text(file_name) if file_name else ""
    from chalicelib.sources import SourceError, parse_sources
    try:
        return parse_sources(value, streams, file_text, file_name)
    except SourceError as exc:
        raise SourceSettingsError(exc) from exc


def _max_concurrency(value: str, env: _Reader) -> int:
    number = int(value)
    if number != 0 and not 2 <= number <= 1000:  # Lambda's ScalingConfig takes 2 to 1000
        raise ValueError("")
    return number


WARM_WRITES_DEFAULT = 4_000  # a new on-demand table's warm write throughput (write units a second)
WARM_WRITES_MAX = 40_000  # AWS's default quota of write units a second of one on-demand table


def _warm_write_units(value: str, env: _Reader) -> int:
    number = int(value)
    if number != 0 and not WARM_WRITES_DEFAULT <= number <= WARM_WRITES_MAX:
        raise ValueError("")
    return number


def _target_limits(value: str, env: _Reader) -> tuple[tuple[str, Limit], ...]:
    if not value.strip():
        return ()
    import json

    from chalicelib.tasks.flow_limits import LimitError, parse_target_limits  # only a stage that limits a target
    try:
        return tuple(parse_target_limits(json.loads(value)).items())
    except LimitError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc


# TASK_SOURCES_FILE's directory: chalicelib/, which Chalice packages whole (every file, not only Python's).
SOURCES_FILE_DIR = os.path.dirname(os.path.abspath(__file__))


def _sources_file(value: str, env: _Reader) -> str:
    if value:
        _sources_file_path(value)
    return value


def _sources_file_path(value: str) -> str:
    """The file TASK_SOURCES_FILE names: a .json path relative to chalicelib/, inside it; ValueError otherwise."""
    parts = value.replace("\\", "/").split("/")
    if value.startswith("/") or ".." in parts or not value.endswith(".json"):
        raise ValueError("it must be a .json file's path relative to chalicelib/, inside it")
    path = os.path.join(SOURCES_FILE_DIR, *parts)
    if not os.path.isfile(path):
        raise ValueError(f"there is no file chalicelib/{value}")
    return path


def _sources_file_text(value: str) -> str:
    try:
        with open(_sources_file_path(value), encoding="utf-8") as file:
            return file.read()
    except (ValueError, OSError) as exc:  # a bad path, an unreadable file, or not UTF-8 (UnicodeDecodeError)
        raise SettingsError("TASK_SOURCES_FILE", value, SOURCES_FILE_EXPECTED + f" ({exc})") from exc


SOURCES_FILE_EXPECTED = "expected the path of a JSON file under chalicelib/, relative to it"


RESTORE_TARGET_FIXED = 3  # the fewest characters in a row, besides `<table>` and `*`, a restore target's name must have


def _restore_target_pattern(value: str, env: _Reader) -> str:
    if not re.fullmatch(r"(?:[A-Za-z0-9_.*-]|<table>)+", value) or len(value.replace("<table>", "")) > 200:
        raise ValueError("")
    # `<table>` is any table on a stage that selects tables by pattern or tag: the IAM policies' target names
    # (table/<pattern>) must still leave out every table of the account but the restores'.
    if not any(len(fixed) >= RESTORE_TARGET_FIXED for fixed in re.split(r"<table>|\*", value)):
        raise ValueError(f"it pins no fixed part of the target's name: {RESTORE_TARGET_FIXED} characters in a row "
                         "besides `<table>` and `*` are needed, as in `<table>-restored-*`")
    return value


def _tag(value: str, env: _Reader) -> tuple[str, str] | None:
    if not value:
        return None
    key, sep, tag_value = value.partition("=")
    if not sep or not key.strip():
        raise ValueError("")
    return key.strip(), tag_value.strip()


class Calendar(NamedTuple):
    """BACKUP_RETENTION: keep the newest good backup of each of the last N days / ISO weeks / months / years
    that have one (0: that rule keeps nothing; all 0: no calendar)."""

    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0


CALENDAR_MAX = {"daily": 3660, "weekly": 520, "monthly": 1200, "yearly": 100}


def _calendar(value: str, env: _Reader) -> Calendar:
    counts: dict[str, int] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part and not value.strip():
            continue
        rule, sep, text = part.partition("=")
        rule, text = rule.strip(), text.strip()
        if not sep or rule not in CALENDAR_MAX:
            raise ValueError(f"{part!r} is not one of daily=N, weekly=N, monthly=N, yearly=N")
        if rule in counts:
            raise ValueError(f"{rule} is given twice")
        if not re.fullmatch(r"[0-9]{1,5}", text) or not 1 <= int(text) <= CALENDAR_MAX[rule]:
            raise ValueError(f"{rule}: {text!r} is not a whole number from 1 to {CALENDAR_MAX[rule]}")
        counts[rule] = int(text)
    return Calendar(**counts)


def _timezone(value: str, env: _Reader) -> tzinfo:
    if value == "UTC":
        return UTC  # no time zone database needed for the default
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only a stage that names another zone loads it

    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"no time zone {value!r} in this runtime's time zone database") from exc


TEXT: Parse[str] = Parse(lambda value, env: value)
OPTIONAL_ARN = Parse(_optional_arn, "expected an ARN (arn:aws:...) or nothing")
SCHEDULE = Parse(_schedule, "expected an EventBridge rate() or cron() expression")
TABLE_LIST = Parse(_table_list, "expected comma-separated table names")
TABLE = matching(_TABLE_NAME, "a DynamoDB table name")
QUEUE = matching(_QUEUE_NAME, "an SQS queue name")
ATTRIBUTE = matching(re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$"), "an attribute name")


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
    return cast(str, _Reader(environment).parse(_FIELDS["backup_name_prefix"]))


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
    """The stage's settings: one field per configuration variable, declared with its name, default, meaning
    and parser (``setting``); ``from_env`` reads them all.  (A docstring also spares dataclass rendering the
    signature of every field at import: cold start.)"""

    stage: str = setting("STAGE", "local", "Stage name: local, dev or prod.", TEXT)
    region: str = setting("AWS_REGION", "us-east-1",
        "Region of every AWS client (AWS_DEFAULT_REGION also read).", Parse(_region))
    endpoint_url: str | None = setting("AWS_ENDPOINT_URL", "",
        "Endpoint for every AWS client; the local stage points it at moto's server.",
        Parse(lambda value, env: value or None))
    aws_max_attempts: int = setting("AWS_MAX_ATTEMPTS", "8",
        "Attempts per AWS call in all, first one included (botocore retry mode below).", integer(1, 20))
    aws_retry_mode: str = setting("AWS_RETRY_MODE", "adaptive",
        "botocore retry mode: standard or adaptive.", choice("standard", "adaptive"))
    log_level: str = setting("LOG_LEVEL", "INFO",
        "Log level of the structured JSON logs.", choice("DEBUG", "INFO", "WARNING", "ERROR"))
    state_table: str = setting("STATE_TABLE", "timekeeper-state",
        "The app's state table: backup runs, claims, processor progress.", TABLE)
    state_table_warm_write_units: int = setting("STATE_TABLE_WARM_WRITE_UNITS", "0",
        "Deployed stages: the state table's warm throughput (`WarmThroughput`) in write units a second, which "
        "provisioning raises the table to and never lowers (a new on-demand table takes 4,000 at once; AWS bills the "
        "raise once); 0: none ([Scale](scale.md#a-million-exact-tasks-due-in-the-same-second)).",
        Parse(_warm_write_units, f"expected 0 or a whole number from {WARM_WRITES_DEFAULT} to {WARM_WRITES_MAX}"))
    alert_topic_arn: str = setting("ALERT_TOPIC_ARN", "",
        "SNS topic for alerts and run summaries (empty: alerts are only logged).", OPTIONAL_ARN)
    # backups
    backup_schedule: str = setting("BACKUP_SCHEDULE", "rate(1 day)",
        "When backup runs start: an EventBridge rate() or cron() expression.", SCHEDULE)
    backup_tables: tuple[str, ...] = setting("BACKUP_TABLES", "", "Comma-separated table names to back up.", TABLE_LIST)
    backup_table_pattern: re.Pattern[str] | None = setting("BACKUP_TABLE_PATTERN", "",  # noqa: RUF009 (a Field, not a default)
        "Regular expression; every table whose whole name matches is backed up.",
        Parse(lambda value, env: re.compile(value) if value else None, "expected a regular expression"))
    backup_table_tag: tuple[str, str] | None = setting("BACKUP_TABLE_TAG", "",
        "key=value; every table with that tag is backed up.", Parse(_tag, "expected key=value"))
    backup_name_prefix: str = setting("BACKUP_NAME_PREFIX", "",
        "Prefix of this stage's backup names (empty: timekeeper-<STAGE>); retention only touches names that "
        "are exactly this prefix, a selected table and a time. No two stages may share it, nor may one be "
        "another's followed by '-' (make deploy refuses).",
        Parse(_backup_name_prefix, "expected 1-100 characters of [A-Za-z0-9_.-] or nothing"))
    backup_api_tables: tuple[str, ...] = setting("BACKUP_API_TABLES", "",
        "Comma-separated tables POST /backups may name besides the selection (BACKUP_TABLES, "
        "BACKUP_TABLE_PATTERN, BACKUP_TABLE_TAG); the app's own state and tasks tables only if listed here.",
        TABLE_LIST)
    backup_monitor_queue: str = setting("BACKUP_MONITOR_QUEUE", "timekeeper-backup-monitor",
        "SQS queue (name) of backup-run monitor messages.", QUEUE)
    backup_monitor_dlq: str = setting("BACKUP_MONITOR_DLQ", "timekeeper-backup-monitor-dlq",
        "SQS queue (name) for monitor messages that cannot be processed.", QUEUE)
    backup_monitor_delay_seconds: int = setting("BACKUP_MONITOR_DELAY_SECONDS", "300",
        "Delay before each monitor poll, 0-900 seconds.", integer(0, 900))
    backup_deadline_minutes: int = setting("BACKUP_DEADLINE_MINUTES", "360",
        "A backup still CREATING this long after its run started is stuck.", integer(1, 7 * 24 * 60))
    backup_retention_days: int = setting("BACKUP_RETENTION_DAYS", "3",
        "This app's backups older than this are deleted when a run finishes.", integer(0, 36500))
    backup_min_keep: int = setting("BACKUP_MIN_KEEP", "2",
        "Retention never leaves a table with fewer AVAILABLE backups than this.", integer(1, 1000))
    backup_retention: Calendar = setting("BACKUP_RETENTION", "",  # noqa: RUF009 (a Field, not a default)
        "Calendar retention, kept besides BACKUP_RETENTION_DAYS and BACKUP_MIN_KEEP: comma-separated daily=N, "
        "weekly=N, monthly=N, yearly=N, each keeping the newest good backup of each of the last N days, ISO "
        "weeks, months or years (in BACKUP_TIMEZONE) that have one, and the oldest while fewer have one "
        "([Retention by calendar]"
        "(backups.md#retention-by-calendar)). Empty: none.",
        Parse(_calendar, "expected comma-separated daily=N, weekly=N, monthly=N, yearly=N, or nothing"))
    backup_timezone: tzinfo = setting("BACKUP_TIMEZONE", "UTC",  # noqa: RUF009 (a Field, not a default)
        "IANA time zone (Europe/Paris) whose days, weeks, months and years BACKUP_RETENTION counts.",
        Parse(_timezone, "expected an IANA time zone name such as UTC or Europe/Paris"))
    backup_create_rate: float = setting("BACKUP_CREATE_RATE", "25",
        "CreateBackup calls per second at most (AWS allows 50).", number(0.1, 50))
    backup_delete_rate: float = setting("BACKUP_DELETE_RATE", "8",
        "DeleteBackup calls per second at most (AWS allows 10).", number(0.1, 10))
    backup_run_lease_seconds: int = setting("BACKUP_RUN_LEASE_SECONDS", "900",
        "How long a backup run's worker may be silent before it counts as dead: a STARTING run is then "
        "abandoned (alerted), a FINISHING one taken over, a RUNNING one whose poll stopped re-queued. "
        "360-1200: above the trigger's 300 s timeout, below the monitor's 4 redeliveries x 300 s.",
        integer(360, 1200))
    backup_verify: BackupVerify = setting("BACKUP_VERIFY", "none",  # noqa: RUF009 (a Field, not a default)
        "Restore verification after a run: none, N tables a run (rotating), or a list of tables; at most 50 "
        "([Restore verification](backups-verification.md)).",
        Parse(_backup_verify, f"expected none, a whole number from 1 to {VERIFY_MAX} or comma-separated table names"))
    backup_require_pitr: bool = setting("BACKUP_REQUIRE_PITR", "false",
        "`true`: every run reads every selected table's point-in-time recovery and alerts once for those with "
        "it off; `false`: a run reads one table in 7, each once a week, and never alerts "
        "([PITR report](backups-verification.md#point-in-time-recovery-report)).",
        flag())
    restore_target_pattern: str = setting("RESTORE_TARGET_PATTERN", "<table>-restored-*",
        "Names `POST /backups/restores` may restore into: `<table>` is the source table, `*` any characters "
        "([Restoring](backups.md#restoring)); the IAM policies grant the restore's writes on these names only, "
        "so it needs 3 fixed characters in a row besides `<table>` and `*`.",
        Parse(_restore_target_pattern, "expected table-name characters, `*` and `<table>`"))
    backup_restore_foreign: bool = setting("BACKUP_RESTORE_FOREIGN", "false",
        "`true`: a restore may name by `backup_arn` a backup this stage did not make (another stage's).",
        flag())
    # exports to S3 (docs/backups.md#exports-to-s3)
    export_bucket: str = setting("EXPORT_BUCKET", "",
        "S3 bucket of scheduled exports (ExportTableToPointInTime) of the selected tables; empty: no exports.",
        matching(_BUCKET, "an S3 bucket name or nothing"))
    export_bucket_owner: str = setting("EXPORT_BUCKET_OWNER", "",
        "Account that owns EXPORT_BUCKET when it is another account's (`S3BucketOwner`); empty: this one.",
        matching(re.compile(r"(?:[0-9]{12})?"), "a 12-digit account id or nothing"))
    export_prefix: str = setting("EXPORT_PREFIX", "",
        "Key prefix of this stage's exports in EXPORT_BUCKET (empty: the backup name prefix); the app writes, "
        "locks and deletes under it only.", Parse(_export_prefix, "expected 1-100 characters of [A-Za-z0-9_.-] "
                                                                 "or nothing"))
    export_schedule: str = setting("EXPORT_SCHEDULE", "rate(7 days)",
        "When exports start: an EventBridge rate() or cron() expression.", SCHEDULE)
    export_tables: tuple[str, ...] = setting("EXPORT_TABLES", "",
        "Comma-separated tables to export; empty: the backup selection.", TABLE_LIST)
    export_lock_mode: str = setting("EXPORT_LOCK_MODE", "GOVERNANCE",
        "Object Lock mode of each export's objects, until its planned expiry, where EXPORT_BUCKET has Object Lock "
        "on: GOVERNANCE or COMPLIANCE.", choice("GOVERNANCE", "COMPLIANCE"))
    export_full_hours: int = setting("EXPORT_FULL_HOURS", "0",
        "Hours between a table's full exports; the runs between export incrementally (the changes since the "
        "previous export, 15 minutes to 24 hours before) while that chain is unbroken. 0: every export is full.",
        integer(0, 35 * 24))
    export_deadline_minutes: int = setting("EXPORT_DEADLINE_MINUTES", "720",
        "An export still IN_PROGRESS this long after it started is stuck (alerted once).", integer(30, 7 * 24 * 60))
    # tasks
    tasks_table: str = setting("TASKS_TABLE", "timekeeper-tasks", "Table of task items (string keys PK and SK).", TABLE)
    tasks_stream_arn: str = setting("TASKS_STREAM_ARN", "",
        "Stream ARN of the tasks table (NEW_AND_OLD_IMAGES).", OPTIONAL_ARN)
    ttl_attribute: str = setting("TTL_ATTRIBUTE", "expires_at",
        "The tasks table's TTL attribute (epoch seconds); lazy tasks' due time.", ATTRIBUTE)
    due_attribute: str = setting("DUE_ATTRIBUTE", "run_at",
        "Item attribute holding the due time (ISO-8601 or epoch seconds).", ATTRIBUTE)
    bucket_attribute: str = setting("BUCKET_ATTRIBUTE", "due_bucket",
        "Item attribute holding the sharded due bucket of interval tasks.", ATTRIBUTE)
    bucket_index: str = setting("BUCKET_INDEX", "due-bucket-index",
        "GSI on BUCKET_ATTRIBUTE with the due epoch as sort key.",
        matching(_TABLE_NAME, "a DynamoDB index name"))
    bucket_minutes: int = setting("BUCKET_MINUTES", "1", "Width of one due bucket in minutes.", integer(1, 1440))
    bucket_shards: int = setting("BUCKET_SHARDS", "4",
        "Shards per due bucket, to spread writes over GSI partitions.", integer(1, 100))
    default_strategy: str = setting("DEFAULT_STRATEGY", "exact",
        "Strategy of an item that names none: exact, interval or lazy.", choice("exact", "interval", "lazy"))
    default_email_subject: str = setting("DEFAULT_EMAIL_SUBJECT", "Reminder",
        "Subject of the default action's email.", TEXT)
    default_email_body: str = setting("DEFAULT_EMAIL_BODY", "This is your reminder.",
        "Body of the default action's email.", TEXT)
    sender_email: str = setting("SENDER_EMAIL", "noreply@example.com",
        "Verified SES sender of every email.",
        matching(re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$"), "an email address"))
    schedule_group: str = setting("SCHEDULE_GROUP", "timekeeper",
        "EventBridge Scheduler group of the exact strategy's schedules.",
        matching(re.compile(r"^[0-9a-zA-Z_.-]{1,64}$"), "a Scheduler group name"))
    scheduler_role_arn: str = setting("SCHEDULER_ROLE_ARN", "",
        "Role EventBridge Scheduler assumes to send to the due queue.", OPTIONAL_ARN)
    scheduler_dlq_arn: str = setting("SCHEDULER_DLQ_ARN", "",
        "Dead-letter queue (ARN) of EventBridge Scheduler deliveries.", OPTIONAL_ARN)
    due_queue_url: str = setting("DUE_QUEUE_URL", "",
        "URL of DUE_QUEUE, set by provisioning (empty: looked up once per container).",
        matching(_QUEUE_URL, "an SQS queue URL (http[s]://host/account/name)"))
    due_queue_arn: str = setting("DUE_QUEUE_ARN", "",
        "ARN of DUE_QUEUE, set by provisioning (empty: looked up once per container).", OPTIONAL_ARN)
    due_queue: str = setting("DUE_QUEUE", "timekeeper-due",
        "SQS queue (name) of due tasks, consumed by the executor.", QUEUE)
    task_dlq: str = setting("TASK_DLQ", "timekeeper-task-dlq",
        "SQS queue (name) for task records and messages that cannot be processed.", QUEUE)
    due_dlq: str = setting("DUE_DLQ", "timekeeper-due-dlq",
        "SQS queue (name) where SQS moves a due message after its last failed delivery; `due_dead_letter` "
        "consumes it (see [Dead-lettered due messages](executor.md#dead-lettered-due-messages)).", QUEUE)
    processor_schedule: str = setting("PROCESSOR_SCHEDULE", "rate(1 minute)",
        "When the interval processor runs: rate() or cron().", SCHEDULE)
    task_max_attempts: int = setting("TASK_MAX_ATTEMPTS", "3",
        "Attempts of a failing action before the task is FAILED.", integer(1, 100))
    task_retry_max_age_seconds: int = setting("TASK_RETRY_MAX_AGE_SECONDS", "86400",
        "A failing action is not retried later than this after its due time (a task's `retry` may say less).",
        integer(60, 86400))
    task_claim_lease_seconds: int = setting("TASK_CLAIM_LEASE_SECONDS", "300",
        "A claimed execution whose worker died is taken over after this.", integer(5, 86400))
    task_max_takeovers: int = setting("TASK_MAX_TAKEOVERS", "3",
        "Takeovers of an execution whose worker died before it is FAILED, unrun.", integer(0, 100))
    direct_queue_horizon_seconds: int = setting("DIRECT_QUEUE_HORIZON_SECONDS", "1800",
        "Exact tasks due at most `DIRECT_QUEUE_HORIZON_SECONDS` ahead (the horizon included) skip Scheduler: due "
        "queue with a delay (at most 900 s a message; past 900 the executor sends it back once, cheaper than a "
        "schedule: [Benchmarks](benchmarks.md#the-due-queues-horizon)). "
        "At most 1800: one re-queue hop.", integer(0, 1800))
    past_horizon: str = setting("PAST_HORIZON", "sweeper",
        "Exact tasks due past the horizon: `sweeper` (an entry in STATE_TABLE each, which the interval processor's "
        "minute sends to the due queue with its delay once due within 10 minutes; due within 12 minutes: sent "
        "directly) or `scheduler` (an EventBridge Scheduler schedule each): "
        "[Strategies](strategies.md#the-sweeper).", choice("scheduler", "sweeper"))
    sweep_shards: int = setting("SWEEP_SHARDS", "16",
        "Partitions of each minute of the sweeper's entries (at most 1,000 writes a second each).", integer(1, 100))
    schedule_lead_seconds: int = setting("SCHEDULE_LEAD_SECONDS", "60",
        "Exact tasks' schedules fire this early; the executor waits out the rest.", integer(0, 900))
    task_precision: str = setting("TASK_PRECISION", "second",
        "`second`: a due message's SQS delay is rounded up, so an action runs up to a second late beyond its "
        "delivery (p99 within 2 s) and no Lambda is billed to wait; `subsecond`: rounded down, the executor "
        "sleeps out the last fraction (p99 within 1 s) ([Executor](executor.md#precision-second-or-subsecond)).",
        choice("second", "subsecond"))
    past_due_grace_seconds: int = setting("PAST_DUE_GRACE_SECONDS", "60",
        "The API accepts a due time this far in the past.", integer(0, 86400))
    task_record_retention_days: int = setting("TASK_RECORD_RETENTION_DAYS", "30",
        "A finished task's record (DONE, FAILED, CANCELLED) expires this long after it finished "
        "([Tasks](tasks.md#what-the-api-keeps-in-the-state-table-and-what-listing-costs)).",
        integer(1, 36500))
    stream_concurrency: int = setting("STREAM_CONCURRENCY", "20",
        "Records of one stream batch processed at once (different keys).", integer(1, 64))
    executor_concurrency: int = setting("EXECUTOR_CONCURRENCY", "10",
        "Due messages of one executor batch handled at once.", integer(1, 64))
    executor_max_concurrency: int = setting("EXECUTOR_MAX_CONCURRENCY", "0",
        "Deployed stages: the executor's SQS event source mapping's `MaximumConcurrency`, invocations at once "
        "(2-1000; 0: none, up to the account's concurrency) ([Scale](scale.md)).",
        Parse(_max_concurrency, "expected 0 or a whole number from 2 to 1000"))
    task_target_limits: tuple[tuple[str, Limit], ...] = setting("TASK_TARGET_LIMITS", "",
        "A rate and a concurrency per action target: a JSON object of target (`email` for SES, a webhook's "
        "origin, a queue's, topic's, function's, bus's or state machine's ARN) -> `{\"rate\": starts a second, "
        "\"concurrency\": actions at once}`; a task over either waits in the due queue and runs late, spending no "
        "attempt ([Scale](scale.md#flow-control)). Empty: none.",
        Parse(_target_limits, 'expected a JSON object of target -> {"rate": n, "concurrency": n}'))
    # API
    api_auth: str = setting("API_AUTH", "none",
        "API authorization: none, token, iam, api_key or cognito.",
        choice("none", "token", "iam", "api_key", "cognito"))
    api_token: str = setting("API_TOKEN", "",
        f"Bearer token the API requires when API_AUTH=token; at least {MIN_API_TOKEN} characters on a stage "
        "other than local.", TEXT, shown=False)
    cognito_user_pool_arn: str = setting("COGNITO_USER_POOL_ARN", "",
        "User pool whose JWTs the API accepts when API_AUTH=cognito.", OPTIONAL_ARN)
    api_throttle_rate: float = setting("API_THROTTLE_RATE", "50",
        "Deployed stages: requests per second API Gateway lets through to the API (steady state).",
        number(1, 10000))
    api_throttle_burst: int = setting("API_THROTTLE_BURST", "100",
        "Deployed stages: requests API Gateway lets through at once (bucket size).", integer(1, 5000))
    task_action_target_arns: tuple[str, ...] = setting("TASK_ACTION_TARGET_ARNS", "",
        "Comma-separated SQS queue, SNS topic, Lambda function, EventBridge bus and Step Functions state "
        "machine ARNs (IAM wildcards `*` and `?` allowed) that tasks' sqs, sns, lambda, eventbridge and "
        "stepfunctions actions may call: the API refuses others (400), the stream dead-letters items naming "
        "others, the executor refuses them, and task_executor's IAM policy grants exactly these. The app's own "
        "queues, topics and functions are refused even when listed; another stage's (named `timekeeper-*`) unless "
        "listed exactly, without a wildcard. Empty: none.",
        Parse(_action_targets, "expected comma-separated SQS queue / SNS topic / Lambda function / EventBridge "
                               "bus / Step Functions state machine ARNs"))
    task_webhook_origins: tuple[str, ...] = setting("TASK_WEBHOOK_ORIGINS", "",
        "Comma-separated origins (`https://host[:port]`) tasks' webhook actions may POST to: the API refuses "
        "others (400), the stream dead-letters items naming others, the executor refuses them. The stage refuses "
        "to start with one the executor always refuses (plain http, a private or loopback address, a `*`). "
        "Empty: none.",
        Parse(_webhook_origins, "expected comma-separated origins like https://hooks.example.com"))
    task_webhook_secrets: tuple[str, ...] = setting("TASK_WEBHOOK_SECRETS", "",
        "Comma-separated signing secrets webhook actions may name, as `ssm:<parameter name>` (a SecureString) "
        "or `secretsmanager:<secret name>`: the API refuses others, and task_executor's IAM policy may read "
        "exactly these. Empty: none.",
        Parse(_webhook_secrets, "expected comma-separated ssm:<name> or secretsmanager:<name>"))
    task_webhook_timeout_seconds: float = setting("TASK_WEBHOOK_TIMEOUT_SECONDS", "10",
        "Seconds a webhook's whole call (connection, request, answer) may take before the attempt fails (and is "
        "retried); less when the executor's invocation has less time left ([Webhooks](tasks.md#webhooks)).",
        number(0.05, 30))
    task_webhook_allow_loopback: bool = setting("TASK_WEBHOOK_ALLOW_LOOPBACK", "false",
        "`true`: webhooks may call loopback addresses (and plain http there): the local stage only, for its "
        "receiver; any other stage refuses to start with it.",
        flag())
    # operations (docs/operations.md)
    lateness_alarm_ms: int = setting("LATENESS_ALARM_MS", "5000",
        "Deployed stages: the exact strategy's p99 lateness (ms, per 5 minutes, twice in a row) above which "
        "the lateness alarm tells the alert topic ([Operations: metrics, alarms, dashboard](operations.md)).",
        integer(100, 3_600_000))
    # task sources (docs/task-sources.md)
    task_sources: tuple[TaskSource, ...] = setting("TASK_SOURCES", "",
        "The user's own tables whose items are tasks: a JSON object of source name -> source (table, "
        "strategy, due or TTL attribute, action templates, ...; [Task sources](task-sources.md)). Empty: "
        "none.", Parse(_task_sources))
    task_sources_file: str = setting("TASK_SOURCES_FILE", "",
        "A JSON file of task sources, as TASK_SOURCES (the same parser; a source in both is refused): its path "
        "relative to chalicelib/, which is packaged with the app (`task_sources/prod.json`). Empty: none.",
        Parse(_sources_file, SOURCES_FILE_EXPECTED))
    task_source_streams: str = setting("TASK_SOURCE_STREAMS", "",
        "Stream ARNs of the task sources' tables, set by provisioning: a JSON object of source name -> ARN.",
        TEXT)

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

    def own_functions(self) -> tuple[str, ...]:
        """The names of the stage's Lambda functions as IAM name patterns (APP_NAME): the API handler's, with
        any qualifier, and every other one's (``<app>-<stage>-*``, which covers their qualifiers too)."""
        prefix = f"{APP_NAME}-{self.stage}"
        return (prefix, f"{prefix}:*", f"{prefix}-*")

    def own_tables(self) -> tuple[str, ...]:
        """The names of the app's own tables: the state and tasks tables and the task sources' tables (a restore
        never writes them: chalicelib/backups/restore.py, deploy/iam.py)."""
        return tuple(dict.fromkeys([self.state_table, self.tasks_table, *(s.table for s in self.task_sources)]))

    def own_buses(self) -> tuple[str, ...]:
        """The names of the event buses the stage provisions (OWN_BUSES)."""
        return tuple(dict.fromkeys(str(getattr(self, name)) for name in OWN_BUSES))

    def source(self, name: str) -> TaskSource | None:
        """The declared task source ``name`` (None: no such source)."""
        for source in self.task_sources:
            if source.name == name:
                return source
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = _Reader(os.environ if environ is None else environ)
        values = {spec.name: env.parse(spec) for spec in _FIELDS.values()}
        if values["api_auth"] == "token" and not values["api_token"]:
            raise SettingsError("API_TOKEN", "", "required when API_AUTH=token")
        if values["api_auth"] == "token" and values["stage"] != "local" and len(values["api_token"]) < MIN_API_TOKEN:
            raise SettingsError("API_TOKEN", "(hidden)", f"at least {MIN_API_TOKEN} characters on stage "
                                f"{values['stage']!r}, got {len(values['api_token'])}")
        if values["api_auth"] == "cognito" and not values["cognito_user_pool_arn"]:
            raise SettingsError("COGNITO_USER_POOL_ARN", "", "required when API_AUTH=cognito")
        if values["task_webhook_allow_loopback"] and values["stage"] != "local":
            raise SettingsError("TASK_WEBHOOK_ALLOW_LOOPBACK", "true", "allowed on the local stage only")
        return cls(**values)


_FIELDS: dict[str, Field[Any]] = {spec.name: spec for spec in fields(Settings)}
# Every configuration variable the app reads, in the order docs/configuration.md's table lists them.
VARIABLES: tuple[Variable, ...] = tuple(spec.metadata["variable"] for spec in _FIELDS.values())
_DEFAULTS = {v.name: v.default for v in VARIABLES}


class _Reader:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def raw(self, name: str) -> str:
        return self.environ.get(name, "").strip()

    def default(self, name: str) -> str:
        return _DEFAULTS[name]

    def text(self, name: str) -> str:
        value = self.environ.get(name)
        return _DEFAULTS[name] if value is None else value.strip()

    def parse(self, spec: Field[Any]) -> Any:
        """The value of the field ``spec`` from its variable; a bad one raises SettingsError naming both."""
        variable: Variable = spec.metadata["variable"]
        value = self.text(variable.name)
        try:
            return variable.parse.convert(value, self)
        except SettingsError:
            raise
        except (ValueError, re.error) as exc:
            expected = variable.parse.expected
            detail = f" ({exc})" if str(exc) and expected not in str(exc) else ""
            raise SettingsError(variable.name, value, expected + detail) from exc
