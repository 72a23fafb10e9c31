"""Least-privilege IAM documents of a stage, built from its settings: one template, no wildcard actions.

``function_policies`` gives each Lambda function of the app its own policy:
only what its code calls and what Lambda's poller of its event source needs
(.chalice/policy-<stage>-<function>.json, wired in .chalice/config.json as
``stages.<stage>.lambda_functions.<function>.iam_policy_file`` with
``autogen_policy`` false; Chalice names the REST API's function ``api_handler``).
``app_policy`` is their union. ``scheduler_*`` describe the role EventBridge
Scheduler assumes to deliver due tasks.

Resources are the app's own ARNs, built from the stage's names. Account and
region come from the provisioned ARNs in the stage's environment; before a
first deploy they are ``*`` placeholders, which ``make deploy`` replaces with
the real ones when it renders the policy files. The exceptions, each justified in
docs/security.md: ``ListTables``, ``ListBackups`` and ``ListStreams`` (AWS has no
narrower resource), and the backup actions on ``table/*`` and
``table/*/backup/*`` (tables chosen by pattern or tag cannot be listed ahead).
RestoreTableFromBackup (restore verification) is granted only to a stage whose
BACKUP_VERIFY is not none, on the backups of the tables it may verify when they
are named (``verified_backups``).
Restore on demand (``restores``) is granted to the API function (it starts a
restore) and ``backup_monitor`` (it finishes one) when the stage selects tables:
on the selection's tables and backups, and on the target names RESTORE_TARGET_PATTERN
allows for them (``restore_selection``).

The queues, topics, functions, buses and state machines tasks' ``sqs``, ``sns``,
``lambda``, ``eventbridge`` and ``stepfunctions`` actions may call are the
stage setting TASK_ACTION_TARGET_ARNS (chalicelib/settings.py): ``task_executor``
is granted exactly those (sqs:SendMessage, sns:Publish, lambda:InvokeFunction,
events:PutEvents, states:StartExecution), and the API, the stream scheduler and the executor
refuse any other (chalicelib/tasks/actions/targets.py ``target_refusal``), so what the
API accepts is what IAM allows. The app's own queues and topics (settings.OWN_QUEUES,
OWN_TOPICS), which the app refuses as targets, are also denied to ``task_executor``
by an explicit Deny, except those its own code sends to (the due queue, TASK_DLQ,
the alert topic): a wildcard among the targets cannot reach the others. So are the
app's own functions (settings.APP_NAME's <app>-<stage> names) and buses (OWN_BUSES). The
webhook signing secrets it may read are TASK_WEBHOOK_SECRETS, by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from chalicelib.backups.verify_rules import restore_prefix
from chalicelib.settings import APP_NAME, Settings
from chalicelib.sources import TaskSource, written_attributes
from chalicelib.tasks.items import STATUS_INDEX
from deploy.event_sources import Option

ACTION_TARGETS_VARIABLE = "TASK_ACTION_TARGET_ARNS"  # a stage setting (it was read from make deploy's environment)
# The deploy-time settings of this module (docs/configuration.md documents each with its default).
OPTIONS: tuple[Option, ...] = ()
ANY = "*"  # region or account before the first deploy provisions the stage
SCHEDULER_SERVICE = "scheduler.amazonaws.com"
_ARN = re.compile(r"^arn:(?P<partition>[^:]+):[^:]+:(?P<region>[^:]*):(?P<account>\d{12}):")

Policy = dict[str, Any]


@dataclass(frozen=True)
class Account:
    """Where the stage lives: partition, region and account id (``*`` until provisioned)."""

    partition: str = "aws"
    region: str = ANY
    account: str = ANY

    def arn(self, service: str, resource: str, regional: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{self.region if regional else ''}:{self.account}:{resource}"

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> Account:
        """Partition, region and account of the provisioned ARNs in a stage's environment."""
        for name in ("ALERT_TOPIC_ARN", "TASKS_STREAM_ARN", "SCHEDULER_DLQ_ARN"):
            match = _ARN.match(environment.get(name, ""))
            if match:
                return cls(match["partition"], match["region"], match["account"])
        return cls(region=environment.get("AWS_REGION") or ANY)


def scheduler_role_name(settings: Settings) -> str:
    if settings.scheduler_role_arn:
        return settings.scheduler_role_arn.rsplit("/", 1)[-1]
    return f"timekeeper-{settings.stage}-scheduler"


def scheduler_dlq_name(settings: Settings) -> str:
    return settings.scheduler_dlq


def alert_topic_name(settings: Settings) -> str:
    return settings.alert_topic


def function_name_prefix(settings: Settings, app_name: str = APP_NAME) -> str:
    """Chalice names a stage's functions <app>-<stage> (the API handler) and <app>-<stage>-<name>."""
    return f"{app_name}-{settings.stage}"


def _statement(sid: str, actions: Sequence[str], resources: Sequence[str],
               condition: dict[str, Any] | None = None, effect: str = "Allow") -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": effect, "Action": sorted(actions),
                                 "Resource": list(dict.fromkeys(resources))}
    if condition:
        statement["Condition"] = condition
    return statement


API_HANDLER = "api_handler"          # Chalice's name for the REST API's function (<app>-<stage>)
# app.py's Lambda functions (API_AUTH=token, offline only, checks the token in the API handler itself).
FUNCTIONS = (API_HANDLER, "backup_trigger", "backup_monitor", "task_stream", "interval_processor", "task_executor",
             "due_dead_letter")

# Item actions each function performs, per table (DynamoDB authorizes a transaction's items one by one).
_READ = ("dynamodb:GetItem",)
_WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# Lambda's pollers need these on a function's own event source (AWSLambdaSQSQueueExecutionRole, ...).
_CONSUME_QUEUE = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
_READ_STREAM = ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator")
_SEND = ("sqs:SendMessage", "sqs:GetQueueUrl")


def function_names(settings: Settings) -> tuple[str, ...]:
    """The Lambda functions Chalice deploys for a stage with ``settings``: app.py's, the export trigger where
    EXPORT_BUCKET names a bucket, and one stream function per task source."""
    exports = ("export_trigger",) if settings.export_bucket else ()
    return FUNCTIONS + exports + tuple(source.function_name for source in settings.task_sources)


def _only_attributes(source: TaskSource) -> dict[str, Any]:
    """The IAM condition that a write to a user's table touches only the attributes the app needs."""
    return {"ForAllValues:StringEquals": {"dynamodb:Attributes": list(written_attributes(source))}}


def _source_statements(b: _Builder, settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Each task source's stream function: its own stream; a conditional write of only the attributes its
    strategy needs (the TTL of a lazy item, the bucket of an interval one), never a read of the table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for source in settings.task_sources:
        statements = [
            _statement("ReadSourceStream", _READ_STREAM, [b.table(f"{source.table}/stream/*")]),
            _statement("ListStreams", ["dynamodb:ListStreams"], ["*"]),  # AWS has no narrower resource
            _statement("ManageTaskSchedules", [
                "scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule",
                "scheduler:GetSchedule",
            ], [b.where.arn("scheduler", f"schedule/{settings.schedule_group}/*")]),
            _statement("PassSchedulerRole", ["iam:PassRole"],
                       [b.where.arn("iam", f"role/{scheduler_role_name(settings)}", regional=False)],
                       {"StringEquals": {"iam:PassedToService": SCHEDULER_SERVICE}}),
            b.state_table("DueImages", ["dynamodb:PutItem"]),
            # The note of what it dead-lettered (read, then noted); a task cancelled when its item is deleted or no longer due.
            b.state_table("StreamRecordWrites", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
            b.send("SendDueTasks", settings.due_queue, extra=["sqs:GetQueueAttributes"]),
            b.send("DeadLetter", settings.task_dlq),
        ]
        if source.strategy in ("lazy", "interval"):
            statements.append(_statement("WriteSourceDueAttributes", ["dynamodb:UpdateItem"],
                                         [b.table(source.table)], _only_attributes(source)))
        out[source.function_name] = statements
    return out


def _source_tables(b: _Builder, settings: Settings, function: str) -> list[dict[str, Any]]:
    """What the executor, the interval processor and the API may do to the task sources' tables."""
    sources = settings.task_sources
    if not sources:
        return []
    tables = [b.table(s.table) for s in sources]
    if function == "interval_processor":
        indexes = [b.table(f"{s.table}/index/{s.bucket_index}") for s in sources if s.bucket_index]
        return [_statement("QuerySourceBuckets", ["dynamodb:Query"], indexes)] if indexes else []
    statements = [_statement("ReadSourceItems", _READ, tables)]
    if function == "task_executor":
        recurring = [s for s in sources if s.recurrence]
        for s in recurring:  # the next due time, in the attributes it is read from
            statements.append(_statement(f"WriteNextDue{_camel(s.name)}", ["dynamodb:UpdateItem"],
                                         [b.table(s.table)], _only_attributes(s)))
        lazy = [b.table(s.table) for s in recurring if s.strategy == "lazy"]
        if lazy:  # a recurring lazy item the TTL deleted is put back as it was, with its next TTL
            statements.append(_statement("PutBackRecurringLazyItems", ["dynamodb:PutItem"], lazy))
    return statements


def function_log_group(settings: Settings, function: str) -> str:
    """Chalice names the API handler <app>-<stage>, every other function <app>-<stage>-<name>."""
    prefix = function_name_prefix(settings)
    return f"/aws/lambda/{prefix}" if function == API_HANDLER else f"/aws/lambda/{prefix}-{function}"


class _Builder:
    """The stage's resource ARNs and the statements the functions are made of."""

    def __init__(self, settings: Settings, where: Account) -> None:
        self.settings, self.where = settings, where

    def table(self, name: str) -> str:
        return self.where.arn("dynamodb", f"table/{name}")

    def queue(self, name: str) -> str:
        return self.where.arn("sqs", name)

    def logs(self, function: str) -> dict[str, Any]:
        group = f"log-group:{function_log_group(self.settings, function)}"
        return _statement("WriteLogs", ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                          [self.where.arn("logs", group), self.where.arn("logs", f"{group}:log-stream:*")])

    def state_table(self, sid: str, actions: Sequence[str]) -> dict[str, Any]:
        return _statement(sid, actions, [self.table(self.settings.state_table)])

    def tasks_table(self, sid: str, actions: Sequence[str]) -> dict[str, Any]:
        return _statement(sid, actions, [self.table(self.settings.tasks_table)])

    def backups(self) -> list[dict[str, Any]]:
        """Start backups of tables chosen at run time (pattern, tag, list, or the API's body), and find
        a run's backups by name when a start is resumed or CreateBackup's answer was lost."""
        return [
            # AWS has no narrower resource for these two
            _statement("ListTablesAndBackups", ["dynamodb:ListTables", "dynamodb:ListBackups"], ["*"]),
            _statement("BackUpAnyTable", [
                "dynamodb:CreateBackup", "dynamodb:DescribeTable", "dynamodb:ListTagsOfResource",
                "dynamodb:DescribeContinuousBackups",  # the run's point-in-time recovery report
            ], [self.where.arn("dynamodb", "table/*")]),
        ]

    def exported_tables(self) -> list[str]:
        """The tables exports may export (EXPORT_TABLES, else the backup selection: ``table/*`` when a pattern or
        a tag chooses it, as their names are not known when the policy is written)."""
        s = self.settings
        if s.export_tables:
            return [self.table(n) for n in s.export_tables]
        if s.backup_table_pattern is not None or s.backup_table_tag is not None:
            return [self.where.arn("dynamodb", "table/*")]
        return [self.table(n) for n in s.backup_tables]

    def export_selection(self) -> list[dict[str, Any]]:
        """Choose the exported tables as a backup run does: by pattern (ListTables) or tag (ListTagsOfResource)."""
        s = self.settings
        if s.backup_table_pattern is None and s.backup_table_tag is None:
            return []
        return [_statement("ListTables", ["dynamodb:ListTables"], ["*"]),  # AWS has no narrower resource
                _statement("ReadTableTags", ["dynamodb:DescribeTable", "dynamodb:ListTagsOfResource"],
                           [self.where.arn("dynamodb", "table/*")])]

    def export_objects(self) -> str:
        """The stage's objects in EXPORT_BUCKET: its prefix only."""
        return f"arn:{self.where.partition}:s3:::{self.settings.export_bucket}/{self.settings.export_prefix}/*"

    def exports(self, start: bool) -> list[dict[str, Any]]:
        """Exports to S3 (none when EXPORT_BUCKET is empty): ``start``, the export trigger's (read the selected
        tables' PITR, export them, write their objects under the stage's prefix, find an export whose answer
        was lost); else the monitor's (follow them). No statement grants s3:BypassGovernanceRetention or
        s3:PutBucketObjectLockConfiguration (tests/deploy/test_iam_policy.py)."""
        s = self.settings
        tables = self.exported_tables()
        if not s.export_bucket or not tables:
            return []
        bucket = f"arn:{self.where.partition}:s3:::{s.export_bucket}"
        starting = [
            _statement("ListExports", ["dynamodb:ListExports"], ["*"]),  # AWS has no narrower resource
            _statement("ExportSelectedTables", ["dynamodb:DescribeTable", "dynamodb:DescribeContinuousBackups",
                                                "dynamodb:ExportTableToPointInTime"], tables),
            _statement("DescribeExports", ["dynamodb:DescribeExport"], [f"{t}/export/*" for t in tables]),
            # ExportTableToPointInTime writes with the caller's permissions.
            _statement("WriteExportObjects", ["s3:PutObject", "s3:AbortMultipartUpload", "s3:PutObjectAcl"],
                       [self.export_objects()]),
        ]
        if start:
            return starting
        # The monitor: starts the exports the account's quota deferred, follows, locks and prunes (never
        # s3:BypassGovernanceRetention: a locked object stays).
        return [*starting,
                _statement("ListExportObjects", ["s3:ListBucket", "s3:ListBucketVersions"], [bucket],
                           {"StringLike": {"s3:prefix": [f"{s.export_prefix}/*"]}}),
                _statement("ReadBucketLock", ["s3:GetBucketObjectLockConfiguration"], [bucket]),
                _statement("LockAndDeleteExportObjects", ["s3:GetObject", "s3:PutObjectRetention", "s3:DeleteObject",
                                                          "s3:DeleteObjectVersion"], [self.export_objects()])]

    def restore_tables(self) -> str:
        """The stage's temporary restore tables (chalicelib/backups/verify_rules.restore_table_name)."""
        return self.where.arn("dynamodb", f"table/{restore_prefix(self.settings.backup_name_prefix)}*")

    def verified_backups(self) -> list[str]:
        """The backups restore verification may restore: none when BACKUP_VERIFY is none; those of the tables
        it lists; else those of every table a run may back up when they are named (BACKUP_TABLES,
        BACKUP_API_TABLES), and ``table/*/backup/*`` when a pattern or a tag selects them (their names are not
        known when the policy is written)."""
        s = self.settings
        if not s.backup_verify.enabled:
            return []
        names = s.backup_verify.tables
        if not names:
            if s.backup_table_pattern is not None or s.backup_table_tag is not None:
                return [self.where.arn("dynamodb", "table/*/backup/*")]
            names = tuple(dict.fromkeys([*s.backup_tables, *s.backup_api_tables]))
        return [self.table(f"{name}/backup/*") for name in names]

    def verify_restores(self) -> list[dict[str, Any]]:
        """Restore verification, on a stage that uses it (BACKUP_VERIFY): restore a selected table's backup
        (RestoreTableFromBackup on the backup, and the item actions restore needs on the target table, AWS's
        backuprestore_IAM), describe, count and delete the temporary table: on the temporary tables' names
        only. Nothing when the stage does not verify."""
        backups = self.verified_backups()
        if not backups:
            return []
        return [
            _statement("RestoreBackups", ["dynamodb:RestoreTableFromBackup"], [*backups, self.restore_tables()]),
            _statement("VerifyRestoreTables", [
                "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:Query",
                "dynamodb:Scan", "dynamodb:BatchWriteItem", "dynamodb:DescribeTable", "dynamodb:DeleteTable",
            ], [self.restore_tables()]),
        ]

    def restore_selection(self) -> tuple[list[str], list[str], list[str]]:
        """What restore on demand may touch (chalicelib/backups/restore.py): the tables it may restore (the
        selection's: BACKUP_TABLES and BACKUP_API_TABLES by name, every table when a pattern or a tag selects
        them), their backups, and the target names RESTORE_TARGET_PATTERN allows for them. Nothing when the
        stage selects no table."""
        s = self.settings
        names: Sequence[str] = tuple(dict.fromkeys([*s.backup_tables, *s.backup_api_tables]))
        if s.backup_table_pattern is not None or s.backup_table_tag is not None:
            names = ("*",)
        targets = [self.table(s.restore_target_pattern.replace("<table>", name)) for name in names]
        return ([self.table(n) for n in names], [self.table(f"{n}/backup/*") for n in names],
                list(dict.fromkeys(targets)))

    def restores(self, finish: bool) -> list[dict[str, Any]]:
        """Restore on demand: start a restore (the API; the monitor starts one again whose start was lost) of
        a selected table's backup or point in time into a target RESTORE_TARGET_PATTERN allows, with the item
        actions restore needs on the target (AWS's backuprestore_IAM); ``finish`` (the monitor): count the
        restored items, read the source's settings and re-apply them on the target."""
        sources, backups, targets = self.restore_selection()
        if not sources:
            return []
        statements = [
            _statement("RestoreSelectedBackups", ["dynamodb:RestoreTableFromBackup"], [*backups, *targets]),
            _statement("RestoreSelectedTablesToPointInTime", ["dynamodb:RestoreTableToPointInTime"],
                       [*sources, *targets]),
            _statement("WriteRestoreTargets", [
                "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:Query",
                "dynamodb:Scan", "dynamodb:BatchWriteItem", "dynamodb:DescribeTable"], targets),
        ]
        if self.settings.export_bucket:  # restore from an export: ImportTable into a target, reading the export
            bucket = f"arn:{self.where.partition}:s3:::{self.settings.export_bucket}"
            statements += [
                _statement("ImportExportsIntoRestoreTargets", ["dynamodb:ImportTable", "dynamodb:DescribeImport"],
                           targets),
                _statement("ReadExportObjects", ["s3:GetObject"], [self.export_objects()]),
                _statement("ListExportObjectsToImport", ["s3:ListBucket"], [bucket],
                           {"StringLike": {"s3:prefix": [f"{self.settings.export_prefix}/*"]}})]
        if not finish:
            return [*statements, _statement("DescribeSelectedBackups", ["dynamodb:DescribeBackup"], backups)]
        return [
            *statements,
            _statement("ReadRestoreSettings", ["dynamodb:DescribeTimeToLive"], [*sources, *targets]),
            _statement("ApplyRestoreSettings", [
                "dynamodb:UpdateTimeToLive", "dynamodb:UpdateTable", "dynamodb:UpdateContinuousBackups",
                "dynamodb:DescribeContinuousBackups", "dynamodb:TagResource", "dynamodb:ListTagsOfResource"], targets),
        ]

    def deny_restores_on_own_tables(self, statements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Deny the actions of a function's restore statements (``restores``, among ``statements``) on the app's own
        tables (Settings.own_tables), whatever RESTORE_TARGET_PATTERN's names reach, except those its other Allow
        statements grant on that table (a resource pattern that covers it included) and, on a table the selection
        names (BACKUP_TABLES, BACKUP_API_TABLES), what restoring from it takes. Nothing for a function that does
        not restore."""
        sids = {st["Sid"] for st in self.restores(finish=True)}
        restoring = [st for st in statements if st["Effect"] == "Allow" and st["Sid"] in sids]
        others = [st for st in statements if st["Effect"] == "Allow" and st["Sid"] not in sids]
        actions = list(dict.fromkeys(a for st in restoring for a in st["Action"] if a != "dynamodb:DescribeBackup"
                                     and a.startswith("dynamodb:")))
        named = {self.table(n) for n in (*self.settings.backup_tables, *self.settings.backup_api_tables)}
        denied: dict[tuple[str, ...], list[str]] = {}
        for arn in map(self.table, self.settings.own_tables()):
            used = {a for st in others for a in st["Action"] if any(fnmatchcase(arn, r) for r in st["Resource"])}
            if arn in named:  # a source: RestoreTableToPointInTime and the TTL to copy are read on it
                used |= {"dynamodb:RestoreTableToPointInTime", "dynamodb:DescribeTimeToLive"}
            left = tuple(a for a in actions if a not in used)
            if left:
                denied.setdefault(left, []).append(arn)
        return [_statement(f"DenyRestoresOnOwnTables{n + 1 if n else ''}", left, arns, effect="Deny")
                for n, (left, arns) in enumerate(denied.items())]

    def send(self, sid: str, *queues: str, extra: Sequence[str] = ()) -> dict[str, Any]:
        return _statement(sid, [*_SEND, *extra], [self.queue(q) for q in queues])

    def consume(self, sid: str, queue: str) -> dict[str, Any]:
        return _statement(sid, _CONSUME_QUEUE, [self.queue(queue)])

    def topic(self, name: str) -> str:
        return self.where.arn("sns", name)

    def alerts(self) -> dict[str, Any]:
        return _statement("PublishAlerts", ["sns:Publish"], [self.topic(alert_topic_name(self.settings))])

    def webhook_secrets(self) -> list[dict[str, Any]]:
        """Read the webhook signing secrets TASK_WEBHOOK_SECRETS lists, and no other: an SSM parameter by its
        name, a Secrets Manager secret by its name and the six characters AWS appends to its ARN."""
        refs = [ref.partition(":")[::2] for ref in self.settings.task_webhook_secrets]
        parameters = [self.where.arn("ssm", "parameter/" + name.lstrip("/")) for kind, name in refs if kind == "ssm"]
        secrets = [self.where.arn("secretsmanager", f"secret:{name}-??????")
                   for kind, name in refs if kind == "secretsmanager"]
        return [*([_statement("ReadWebhookParameters", ["ssm:GetParameter"], parameters)] if parameters else []),
                *([_statement("ReadWebhookSecrets", ["secretsmanager:GetSecretValue"], secrets)] if secrets else [])]

    def deny_other_own_targets(self, statements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Deny sqs:SendMessage / sns:Publish on every queue and topic the stage provisions (settings.OWN_QUEUES,
        OWN_TOPICS) that ``statements`` (a function's own, before its action targets) do not send to: an
        action target's wildcard then cannot reach them. A Deny never covers what the function itself uses."""
        def used(action: str) -> set[str]:
            return {r for st in statements if st["Effect"] == "Allow" and action in st["Action"] for r in st["Resource"]}
        queues = [q for q in map(self.queue, self.settings.own_queues()) if q not in used("sqs:SendMessage")]
        topics = [t for t in map(self.topic, self.settings.own_topics()) if t not in used("sns:Publish")]
        functions = [self.where.arn("lambda", f"function:{name}") for name in self.settings.own_functions()]
        buses = [self.where.arn("events", f"event-bus/{name}") for name in self.settings.own_buses()]
        return [*([_statement("DenyOwnQueues", ["sqs:SendMessage"], queues, effect="Deny")] if queues else []),
                *([_statement("DenyOwnTopics", ["sns:Publish"], topics, effect="Deny")] if topics else []),
                _statement("DenyOwnFunctions", ["lambda:InvokeFunction"], functions, effect="Deny"),
                *([_statement("DenyOwnBuses", ["events:PutEvents"], buses, effect="Deny")] if buses else [])]


def function_policies(settings: Settings, where: Account, action_targets: Sequence[str] = (),
                      stream_on_failure_queue: str = "") -> dict[str, Policy]:
    """The policy of each Lambda function of the stage ``settings`` describes, by function name (``action_targets``:
    queues and topics granted to task_executor besides the stage's TASK_ACTION_TARGET_ARNS).

    Each gets only what its own code (and Lambda's poller of its event source) calls.
    ``stream_on_failure_queue`` is where Lambda, as the stream function, sends the position
    of a batch it gave up on (deploy/event_sources.py; empty: TASK_DLQ).
    """
    s, b = settings, _Builder(settings, where)
    on_failure = stream_on_failure_queue or s.task_dlq
    targets = list(dict.fromkeys([*s.task_action_target_arns, *action_targets]))
    queues = [arn for arn in targets if ":sqs:" in arn]
    topics = [arn for arn in targets if ":sns:" in arn]
    functions = [arn for arn in targets if ":lambda:" in arn]
    buses = [arn for arn in targets if ":events:" in arn]
    machines = [arn for arn in targets if ":states:" in arn]
    start_backups = [
        *b.backups(),
        b.send("SendToMonitorQueue", s.backup_monitor_queue),
        b.alerts(),
    ]
    executor = [  # what the executor itself uses: re-queue hops, dead letters, alerts
        b.tasks_table("TaskItems", [*_READ, "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]),
        b.state_table("TaskRecords", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
        b.send("SendDueTasks", s.due_queue),
        b.consume("ConsumeDueQueue", s.due_queue),
        b.send("DeadLetter", s.task_dlq),
        b.alerts(),
        _statement("SendEmail", ["ses:SendEmail"], [
            where.arn("ses", f"identity/{s.sender_email}"),
            where.arn("ses", f"identity/{s.sender_email.rsplit('@', 1)[-1]}")]),
    ]
    statements: dict[str, list[dict[str, Any]]] = {
        # Both APIs: tasks (items, records, status index) and backups (runs; POST /backups starts one).
        API_HANDLER: [
            b.tasks_table("TaskItems", [*_READ, *_WRITE, "dynamodb:BatchGetItem"]),
            b.state_table("TaskRecordsAndRuns", [*_READ, *_WRITE, "dynamodb:Query", "dynamodb:BatchGetItem",
                                                 "dynamodb:BatchWriteItem",  # a run's table pages
                                                 "dynamodb:Scan"]),  # GET /tasks?status=PENDING, DONE
            _statement("QueryTaskStatusIndex", ["dynamodb:Query"],
                       [b.table(f"{s.state_table}/index/{STATUS_INDEX}")]),
            b.send("SendRetries", s.due_queue),  # POST /tasks/{id}/retry sends the retry's due message
            _statement("CountDeadLetters", ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"],  # GET /dead-letters
                       [b.queue(s.task_dlq)]),
            *start_backups,
            *b.restores(finish=False),  # POST /backups/restores
        ],
        "backup_trigger": [
            b.state_table("BackupRuns", [*_READ, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query",
                                         "dynamodb:BatchWriteItem"]),
            *start_backups,
            # restore tables a dead verification left behind (by name: chalicelib/backups/verify.py)
            _statement("DeleteLeftoverRestoreTables", ["dynamodb:DescribeTable", "dynamodb:DeleteTable"],
                       [b.restore_tables()]),
        ],
        "export_trigger": [
            b.state_table("ExportRuns", [*_READ, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"]),
            *(b.export_selection() if not s.export_tables else []),
            *b.exports(start=True),
            b.send("SendToMonitorQueue", s.backup_monitor_queue),
            b.alerts(),
        ],
        "backup_monitor": [
            # PutItem: an export its run's trigger died before recording (chalicelib/backups/exports.py poll)
            b.state_table("BackupRuns", [*_READ, "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:BatchWriteItem",
                                         *(["dynamodb:PutItem"] if s.export_bucket else [])]),
            *b.backups(),  # it takes over the start of a run whose trigger died (the start watch)
            _statement("ManageBackups", ["dynamodb:DescribeBackup", "dynamodb:DeleteBackup"],
                       [where.arn("dynamodb", "table/*/backup/*")]),
            *b.verify_restores(),
            *b.restores(finish=True),  # a restore's polls
            *b.exports(start=False),  # an export run's polls (which start the exports the account's quota deferred)
            b.send("SendToMonitorQueues", s.backup_monitor_queue, s.backup_monitor_dlq),
            b.consume("ConsumeMonitorQueue", s.backup_monitor_queue),
            b.alerts(),
        ],
        "task_stream": [
            b.tasks_table("UpdateTasks", ["dynamodb:UpdateItem"]),  # conditional updates only, no reads
            # a due task's image too large for its message; an exact task's entry for the sweeper
            b.state_table("DueImages", ["dynamodb:PutItem"]),
            # The note of what it dead-lettered (chalicelib/tasks/stream_dead_letters.py): read, then noted; a task
            # cancelled when its item is deleted or no longer due (TaskStore.cancel_by_item, from stream.cancel_record).
            b.state_table("StreamRecordWrites", ["dynamodb:GetItem", "dynamodb:UpdateItem"]),
            _statement("ReadTasksStream", _READ_STREAM, [b.table(f"{s.tasks_table}/stream/*")]),
            _statement("ListStreams", ["dynamodb:ListStreams"], ["*"]),  # AWS has no narrower resource
            _statement("ManageTaskSchedules", [
                "scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule",
                "scheduler:GetSchedule",
            ], [where.arn("scheduler", f"schedule/{s.schedule_group}/*")]),
            _statement("PassSchedulerRole", ["iam:PassRole"],
                       [where.arn("iam", f"role/{scheduler_role_name(s)}", regional=False)],
                       {"StringEquals": {"iam:PassedToService": SCHEDULER_SERVICE}}),
            b.send("SendDueTasks", s.due_queue, extra=["sqs:GetQueueAttributes"]),
            b.send("DeadLetter", *dict.fromkeys([s.task_dlq, on_failure])),
        ],
        "interval_processor": [
            _statement("QueryDueBuckets", ["dynamodb:Query"], [b.table(f"{s.tasks_table}/index/{s.bucket_index}")]),
            # its progress and the sweeper's (a large slice's place: UpdateItem), the sweeper's entries (Query)
            b.state_table("ProcessorState", [*_READ, "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"]),
            b.send("SendDueTasks", s.due_queue),
        ],
        "task_executor": [
            *executor,
            *([_statement("TaskActionQueues", ["sqs:SendMessage"], queues)] if queues else []),
            *([_statement("TaskActionTopics", ["sns:Publish"], topics)] if topics else []),
            *b.webhook_secrets(),
            *([_statement("TaskActionFunctions", ["lambda:InvokeFunction"], functions)] if functions else []),
            *([_statement("TaskActionBuses", ["events:PutEvents"], buses)] if buses else []),
            *([_statement("TaskActionStateMachines", ["states:StartExecution"], machines)] if machines else []),
            *b.deny_other_own_targets(executor),
        ],
        "due_dead_letter": [
            b.tasks_table("ReadTasks", _READ),
            b.state_table("TaskRecords", [*_READ, "dynamodb:UpdateItem"]),
            b.consume("ConsumeDueDlq", s.due_dlq),
            b.send("ForwardToTaskDlq", s.task_dlq),
            b.alerts(),
        ],
    }
    statements.update(_source_statements(b, s))
    for function in (API_HANDLER, "interval_processor", "task_executor", "due_dead_letter"):
        statements[function] += _source_tables(b, s, function)
    for function in (API_HANDLER, "backup_monitor"):  # a restore target's name never reaches the app's own tables
        statements[function] += b.deny_restores_on_own_tables(statements[function])
    return {name: {"Version": "2012-10-17", "Statement": [b.logs(name), *statements[name]]}
            for name in function_names(settings)}


def app_policy(settings: Settings, where: Account, action_targets: Sequence[str] = ()) -> Policy:
    """Every Allow statement of every function's policy: what some function of the app may do (a function's
    Deny binds that function only)."""
    policies = function_policies(settings, where, action_targets)
    return {"Version": "2012-10-17", "Statement": [
        {**statement, "Sid": f"{_camel(name)}{statement['Sid']}"}
        for name, policy in policies.items() for statement in policy["Statement"] if statement["Effect"] == "Allow"]}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def scheduler_trust_policy(where: Account) -> Policy:
    """Only EventBridge Scheduler of this account may assume the role."""
    condition: dict[str, Any] = {"StringEquals": {"aws:SourceAccount": where.account}}
    return {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": SCHEDULER_SERVICE}, "Action": "sts:AssumeRole",
        "Condition": condition}]}


def scheduler_role_policy(due_queue_arn: str, scheduler_dlq_arn: str) -> Policy:
    """The Scheduler role may only send to the due queue and its own dead-letter queue."""
    return {"Version": "2012-10-17", "Statement": [
        _statement("SendDueTasks", ["sqs:SendMessage"], [due_queue_arn, scheduler_dlq_arn])]}


def action_targets_from(environ: Mapping[str, str]) -> list[str]:
    """Nothing: the action targets are the stage setting TASK_ACTION_TARGET_ARNS. One set in the deploy's
    environment is refused rather than ignored, since the API would refuse what the policy allowed."""
    if environ.get(ACTION_TARGETS_VARIABLE, "").strip():
        raise ValueError(f"{ACTION_TARGETS_VARIABLE} is a stage setting: set it in .chalice/config.json "
                         "(stages.<stage>.environment_variables), where the API and the executor read it too")
    return []


def actions_of(policy: Policy, effect: str | None = None) -> list[str]:
    """Every action named by the policy's statements (of ``effect`` only: Allow or Deny, when given)."""
    out: list[str] = []
    for statement in policy["Statement"]:
        if effect is not None and statement.get("Effect") != effect:
            continue
        actions = statement.get("Action", [])
        out.extend([actions] if isinstance(actions, str) else actions)
    return out


def cloudformation(value: Any) -> Any:
    """The document with every string holding a ``${AWS::...}`` placeholder wrapped in Fn::Sub."""
    if isinstance(value, dict):
        return {k: cloudformation(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cloudformation(v) for v in value]
    if isinstance(value, str) and "${AWS::" in value:
        return {"Fn::Sub": value}
    return value


# What a bucket in another account must allow the stage's roles, and what no bucket policy of ours may hold.
EXPORT_OBJECT_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:PutObjectAcl", "s3:GetObject",
                         "s3:PutObjectRetention", "s3:DeleteObject", "s3:DeleteObjectVersion")
EXPORT_BUCKET_ACTIONS = ("s3:ListBucket", "s3:ListBucketVersions")
NEVER_GRANTED = ("s3:*", "s3:BypassGovernanceRetention", "s3:PutBucketObjectLockConfiguration", "s3:PutBucketPolicy",
                 "s3:DeleteBucket", "s3:DeleteBucketPolicy")
EXPORT_FUNCTIONS = ("export_trigger", "backup_monitor", API_HANDLER)  # who writes, follows and prunes, imports


def export_bucket_policy(settings: Settings, where: Account) -> Policy:
    """The bucket policy EXPORT_BUCKET needs when it belongs to another account (EXPORT_BUCKET_OWNER): the
    stage's export, monitor and API roles (Chalice names them <app>-<stage>-<function>) may write, read, lock and
    delete objects under EXPORT_PREFIX only, list under it, and read the bucket's Object Lock configuration."""
    roles = [where.arn("iam", f"role/{APP_NAME}-{settings.stage}-{f}", regional=False) for f in EXPORT_FUNCTIONS]
    bucket = f"arn:{where.partition}:s3:::{settings.export_bucket}"
    principal = {"AWS": roles}
    return {"Version": "2012-10-17", "Statement": [
        {**_statement("TimekeeperExportObjects", EXPORT_OBJECT_ACTIONS, [f"{bucket}/{settings.export_prefix}/*"]),
         "Principal": principal},
        {**_statement("TimekeeperListExports", EXPORT_BUCKET_ACTIONS, [bucket],
                      {"StringLike": {"s3:prefix": [f"{settings.export_prefix}/*"]}}), "Principal": principal},
        {**_statement("TimekeeperReadObjectLock", ["s3:GetBucketObjectLockConfiguration"], [bucket]),
         "Principal": principal},
    ]}


def export_bucket_policy_problems(policy: Policy, settings: Settings) -> list[str]:
    """What is wrong with a bucket policy for the stage's exports (empty: nothing): a statement that grants
    what unlocks or reconfigures a bucket, an object action beyond EXPORT_PREFIX, a principal not this stage's."""
    problems: list[str] = []
    prefix = f":::{settings.export_bucket}/{settings.export_prefix}/"
    for statement in policy.get("Statement", []):
        sid, actions = statement.get("Sid", "?"), _listify(statement.get("Action", []))
        resources = _listify(statement.get("Resource", []))
        problems += [f"{sid}: grants {a}" for a in actions if a in NEVER_GRANTED]
        if any(a in EXPORT_OBJECT_ACTIONS for a in actions):
            problems += [f"{sid}: object actions on {r}, outside {settings.export_prefix}/"
                         for r in resources if prefix not in r]
        if any(a in EXPORT_BUCKET_ACTIONS for a in actions) and "s3:prefix" not in json.dumps(statement.get("Condition")):
            problems.append(f"{sid}: lists the whole bucket (no s3:prefix condition)")
        principals = _listify(statement.get("Principal", {}).get("AWS", []))
        problems += [f"{sid}: principal {p} is not one of the stage's roles" for p in principals
                     if f":role/{APP_NAME}-{settings.stage}-" not in p]
    return problems


def _listify(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
