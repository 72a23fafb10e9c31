"""Least-privilege IAM documents of a stage, built from its settings: one template, no wildcard actions.

``app_policy`` is the policy every Lambda function of the app runs under
(.chalice/policy-<stage>.json, with ``autogen_policy`` false); ``scheduler_*``
describe the role EventBridge Scheduler assumes to deliver due tasks.

Resources are the app's own ARNs, built from the stage's names. Account and
region come from the provisioned ARNs in the stage's environment; before a
first deploy they are ``*`` placeholders, which ``make deploy`` replaces with
the real ones when it renders the policy file. The exceptions, each justified in
README.md (Deploying to AWS): ``ListTables``, ``ListBackups`` and ``ListStreams`` (AWS has no
narrower resource), and the backup actions on ``table/*`` and
``table/*/backup/*`` (tables chosen by pattern or tag cannot be listed ahead).

Deploy-time setting (read from the environment of ``make deploy``):

=======================  =======  ====================================================
variable                 default  meaning
=======================  =======  ====================================================
TASK_ACTION_TARGET_ARNS  (none)   Comma-separated SQS queue / SNS topic ARNs (IAM
                                  wildcards allowed) that tasks' ``sqs`` and ``sns``
                                  actions may send to, besides nothing else.
=======================  =======  ====================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.settings import Settings

ACTION_TARGETS_VARIABLE = "TASK_ACTION_TARGET_ARNS"
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
    if settings.scheduler_dlq_arn:
        return settings.scheduler_dlq_arn.rsplit(":", 1)[-1]
    return f"{settings.due_queue}-scheduler-dlq"


def alert_topic_name(settings: Settings) -> str:
    if settings.alert_topic_arn:
        return settings.alert_topic_arn.rsplit(":", 1)[-1]
    return f"timekeeper-{settings.stage}-alerts"


def function_name_prefix(settings: Settings, app_name: str = "timekeeper") -> str:
    """Chalice names a stage's functions <app>-<stage> (the API handler) and <app>-<stage>-<name>."""
    return f"{app_name}-{settings.stage}"


def _statement(sid: str, actions: Sequence[str], resources: Sequence[str],
               condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": sorted(actions),
                                 "Resource": list(dict.fromkeys(resources))}
    if condition:
        statement["Condition"] = condition
    return statement


def app_policy(settings: Settings, where: Account, action_targets: Sequence[str] = ()) -> Policy:
    """The policy of the app's Lambda functions on the stage ``settings`` describes."""
    def table(name: str) -> str:
        return where.arn("dynamodb", f"table/{name}")

    def queue(name: str) -> str:
        return where.arn("sqs", name)

    logs = f"log-group:/aws/lambda/{function_name_prefix(settings)}"
    sender_domain = settings.sender_email.rsplit("@", 1)[-1]
    statements = [
        _statement("WriteLogs", ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"], [
            where.arn("logs", logs), where.arn("logs", f"{logs}:log-stream:*"),
            where.arn("logs", f"{logs}-*"), where.arn("logs", f"{logs}-*:log-stream:*")]),
        _statement("AppTables", [
            "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
            "dynamodb:Query", "dynamodb:ConditionCheckItem", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem",
        ], [table(settings.state_table), table(settings.tasks_table),
            table(f"{settings.tasks_table}/index/{settings.bucket_index}")]),
        _statement("ReadTasksStream", [
            "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator",
        ], [table(f"{settings.tasks_table}/stream/*")]),
        # AWS offers no resource narrower than "*" for these three.
        _statement("ListTablesBackupsStreams", [
            "dynamodb:ListTables", "dynamodb:ListBackups", "dynamodb:ListStreams"], ["*"]),
        # Tables chosen by BACKUP_TABLE_PATTERN/TAG or the API cannot be listed ahead.
        _statement("BackUpAnyTable", [
            "dynamodb:CreateBackup", "dynamodb:DescribeTable", "dynamodb:ListTagsOfResource",
        ], [where.arn("dynamodb", "table/*")]),
        _statement("ManageBackups", ["dynamodb:DescribeBackup", "dynamodb:DeleteBackup"],
                   [where.arn("dynamodb", "table/*/backup/*")]),
        _statement("SendToAppQueues", ["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"], [
            queue(settings.backup_monitor_queue), queue(settings.backup_monitor_dlq),
            queue(settings.due_queue), queue(settings.task_dlq)]),
        _statement("ConsumeAppQueues", [
            "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
        ], [queue(settings.backup_monitor_queue), queue(settings.due_queue)]),
        _statement("PublishAlerts", ["sns:Publish"], [where.arn("sns", alert_topic_name(settings))]),
        _statement("SendEmail", ["ses:SendEmail"], [
            where.arn("ses", f"identity/{settings.sender_email}"), where.arn("ses", f"identity/{sender_domain}")]),
        _statement("ManageTaskSchedules", [
            "scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule",
            "scheduler:GetSchedule",
        ], [where.arn("scheduler", f"schedule/{settings.schedule_group}/*")]),
        _statement("PassSchedulerRole", ["iam:PassRole"],
                   [where.arn("iam", f"role/{scheduler_role_name(settings)}", regional=False)],
                   {"StringEquals": {"iam:PassedToService": SCHEDULER_SERVICE}}),
    ]
    queues = [arn for arn in action_targets if ":sqs:" in arn]
    topics = [arn for arn in action_targets if ":sns:" in arn]
    if queues:
        statements.append(_statement("TaskActionQueues", ["sqs:SendMessage"], queues))
    if topics:
        statements.append(_statement("TaskActionTopics", ["sns:Publish"], topics))
    return {"Version": "2012-10-17", "Statement": statements}


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
    raw = environ.get(ACTION_TARGETS_VARIABLE, "")
    targets = [t.strip() for t in raw.split(",") if t.strip()]
    for target in targets:
        if not _ARN.match(target) or (":sqs:" not in target and ":sns:" not in target):
            raise ValueError(f"{ACTION_TARGETS_VARIABLE}: {target!r} is not an SQS queue or SNS topic ARN")
    return targets


def actions_of(policy: Policy) -> list[str]:
    """Every action named by the policy's statements."""
    out: list[str] = []
    for statement in policy["Statement"]:
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
