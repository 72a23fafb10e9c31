"""The provisioned resources as a CloudFormation merge template for ``chalice package``.

``provision()`` creates these resources with boto3 for ``make deploy``; this
module says the same in CloudFormation, for a stack built from ``chalice
package --merge-template``: tables (stream, TTL, GSI; kept on stack deletion),
queues (delays, redrive), the alert topic, the schedule group, the Scheduler
role, the executor's log group and its metric filters; the API's gateway responses and throttling (deploy/api_gateway.py,
merged into Chalice's ``RestAPI``); and the event-source settings of deploy/event_sources.py on the SAM
events of app.py's handlers (the stream handler reading the TasksTable's
stream). deploy/resources.json is the prod rendering with the settings'
defaults (``python -m deploy.cli template``); each function's policy comes
from its .chalice/policy-prod-<function>.json, as with ``chalice deploy``.
"""

from __future__ import annotations

from typing import Any

from chalice.app import Chalice
from chalice.utils import to_cfn_resource_name

from chalicelib import metrics
from chalicelib.settings import STATE_TTL_ATTRIBUTE, Settings
from deploy import api_gateway, event_sources, iam, observability
from deploy.provision import MAX_RECEIVE_COUNT, Index, dead_letter_queues, dlq_alarm, state_indexes, tasks_indexes

RETENTION_SECONDS = 1209600
MONITOR_VISIBILITY_SECONDS = 300
DUE_VISIBILITY_SECONDS = 120
DEFAULT_VISIBILITY_SECONDS = 60


def _table(name: str, indexes: list[Index], **extra: Any) -> dict[str, Any]:
    attributes = [{"AttributeName": "PK", "AttributeType": "S"}, {"AttributeName": "SK", "AttributeType": "S"}]
    props: dict[str, Any] = {
        "TableName": name, "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
    }
    if indexes:
        for index in indexes:
            attributes += [a for a in index.attributes() if a not in attributes]
        props["GlobalSecondaryIndexes"] = [index.definition() for index in indexes]
    props["AttributeDefinitions"] = attributes
    props.update(extra)
    # Data outlives the stack, as `make destroy` keeps it unless DELETE_DATA=1.
    return {"Type": "AWS::DynamoDB::Table", "DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain",
            "Properties": props}


def _warm(write_units: int) -> dict[str, Any]:
    """The table's ``WarmThroughput``, as provision() sets it (nothing for 0)."""
    return {"WarmThroughput": {"WriteUnitsPerSecond": write_units}} if write_units else {}


def _queue(name: str, visibility: int = DEFAULT_VISIBILITY_SECONDS, delay: int = 0,
           dlq: str | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {"QueueName": name, "VisibilityTimeout": visibility,
                             "MessageRetentionPeriod": RETENTION_SECONDS, "DelaySeconds": delay}
    if dlq:
        props["RedrivePolicy"] = {"deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
                                  "maxReceiveCount": MAX_RECEIVE_COUNT}
    return {"Type": "AWS::SQS::Queue", "Properties": props}


def dead_letter_alarms(queues: dict[str, Any], settings: Settings, topic: str = "AlertTopic") -> dict[str, Any]:
    """A CloudWatch alarm per dead-letter queue among ``queues`` (logical id -> resource), to ``topic``:
    the same alarms and the same choice of queues as provision() (every redrive target, and every
    queue the settings name as a DLQ)."""
    by_name = _queues_by_name(queues)
    alarms: dict[str, Any] = {}
    for name in _dead_letter_queues(queues, settings):
        props = dlq_alarm(name, {"Ref": topic})
        props["Dimensions"] = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [by_name[name], "QueueName"]}}]
        alarms[f"{by_name[name]}Alarm"] = {"Type": "AWS::CloudWatch::Alarm", "Properties": props}
    return alarms


def _queues_by_name(queues: dict[str, Any]) -> dict[str, str]:
    return {r["Properties"]["QueueName"]: logical for logical, r in queues.items() if r.get("Type") == "AWS::SQS::Queue"}


def _dead_letter_queues(queues: dict[str, Any], settings: Settings) -> list[str]:
    """The names of the dead-letter queues among ``queues`` (a DLQ the stage does not provision here, e.g.
    an ARN of another stack, is left out)."""
    by_name = _queues_by_name(queues)
    redrive = {r["Properties"]["QueueName"]: queues[r["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]]
               ["Properties"]["QueueName"]
               for r in queues.values() if r.get("Type") == "AWS::SQS::Queue" and "RedrivePolicy" in r["Properties"]}
    return [name for name in dead_letter_queues(settings, redrive) if name in by_name]


def metric_alarms_and_dashboard(resources: dict[str, Any], settings: Settings, topic: str = "AlertTopic") -> dict[str, Any]:
    """The alarms on the app's metrics and the stage's dashboard (deploy/observability.py), as provision() puts
    them; the dashboard's region is the stack's."""
    out: dict[str, Any] = {}
    for alarm in observability.metric_alarms(settings, {"Ref": topic}):
        logical = "".join(part.title() for part in alarm["AlarmName"].removeprefix(
            observability.alarm_prefix(settings) + "-").split("-")) + "Alarm"
        out[logical] = {"Type": "AWS::CloudWatch::Alarm", "Properties": alarm}
    body = observability.dashboard_json(settings, _dead_letter_queues(resources, settings), "${AWS::Region}")
    out["Dashboard"] = {"Type": "AWS::CloudWatch::Dashboard", "Properties": {
        "DashboardName": observability.dashboard_name(settings), "DashboardBody": {"Fn::Sub": body}}}
    return out


def line_metric_filters() -> dict[str, Any]:
    """The metric filters of the metrics read from log lines (chalicelib/metrics.py ``LINE_METRICS``) as provision()
    puts them, on the writing function's log group, declared here so the filter can name it: the stack names
    the function (Chalice's logical id, ``TaskExecutor``), its group is ``/aws/lambda/<that name>``."""
    out: dict[str, Any] = {}
    for metric in metrics.LINE_METRICS:
        function = to_cfn_resource_name(metric.function)
        group = f"{function}LogGroup"
        out[group] = {"Type": "AWS::Logs::LogGroup",
                      "Properties": {"LogGroupName": {"Fn::Sub": f"/aws/lambda/${{{function}}}"}}}
        transformation = metric.transformation()
        out[f"{to_cfn_resource_name(metric.name)}MetricFilter"] = {"Type": "AWS::Logs::MetricFilter", "Properties": {
            "FilterName": metric.filter_name, "FilterPattern": metric.filter_pattern, "LogGroupName": {"Ref": group},
            "MetricTransformations": [{
                "MetricName": transformation["metricName"], "MetricNamespace": transformation["metricNamespace"],
                "MetricValue": transformation["metricValue"], "Unit": transformation["unit"],
                "Dimensions": [{"Key": k, "Value": v} for k, v in transformation["dimensions"].items()]}]}}
    return out


def resources(settings: Settings) -> dict[str, Any]:
    """The merge template of the resources of the stage ``settings`` describes."""
    template = _resources(settings)
    template["Resources"].update(dead_letter_alarms(template["Resources"], settings))
    template["Resources"].update(metric_alarms_and_dashboard(template["Resources"], settings))
    template["Resources"].update(line_metric_filters())
    return template


def _resources(settings: Settings) -> dict[str, Any]:
    trust = iam.scheduler_trust_policy(iam.Account(account="${AWS::AccountId}"))
    send = iam.scheduler_role_policy("DUE", "DLQ")
    send["Statement"][0]["Resource"] = [{"Fn::GetAtt": ["DueQueue", "Arn"]}, {"Fn::GetAtt": ["SchedulerDlq", "Arn"]}]
    return {
        "Resources": {
            # Execution claims expire by STATE_TTL_ATTRIBUTE, as provision() enables it.
            "StateTable": _table(settings.state_table, state_indexes(),
                                 TimeToLiveSpecification={"AttributeName": STATE_TTL_ATTRIBUTE, "Enabled": True},
                                 **_warm(settings.state_table_warm_write_units)),
            "TasksTable": _table(
                settings.tasks_table, tasks_indexes(settings),
                StreamSpecification={"StreamViewType": "NEW_AND_OLD_IMAGES"},
                TimeToLiveSpecification={"AttributeName": settings.ttl_attribute, "Enabled": True}),
            "BackupMonitorDlq": _queue(settings.backup_monitor_dlq),
            "BackupMonitorQueue": _queue(settings.backup_monitor_queue, MONITOR_VISIBILITY_SECONDS,
                                         settings.backup_monitor_delay_seconds, "BackupMonitorDlq"),
            "TaskDlq": _queue(settings.task_dlq),
            "DueDlq": _queue(settings.due_dlq),
            "DueQueue": _queue(settings.due_queue, DUE_VISIBILITY_SECONDS, dlq="DueDlq"),
            "SchedulerDlq": _queue(iam.scheduler_dlq_name(settings)),
            "AlertTopic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": iam.alert_topic_name(settings)}},
            "ScheduleGroup": {"Type": "AWS::Scheduler::ScheduleGroup",
                              "Properties": {"Name": settings.schedule_group}},
            "SchedulerRole": {"Type": "AWS::IAM::Role", "Properties": {
                "RoleName": iam.scheduler_role_name(settings),
                "AssumeRolePolicyDocument": iam.cloudformation(trust),
                "Policies": [{"PolicyName": "send-due-tasks", "PolicyDocument": send}]}},
            # Merged into Chalice's RestAPI: errors in the app's shape, and the stage's throttling.
            **api_gateway.overlay(settings),
        },
    }


def with_event_settings(template: dict[str, Any], app: Chalice, settings: Settings,
                        options: event_sources.EventSourceOptions) -> dict[str, Any]:
    """``template`` plus the event-source settings on the SAM events of ``app``'s handlers."""
    merged = {**template, "Resources": dict(template["Resources"])}
    failure_queue = options.stream_on_failure_queue or settings.task_dlq
    destination: Any = {"Fn::GetAtt": ["TaskDlq", "Arn"]} if failure_queue == settings.task_dlq else \
        {"Fn::Sub": f"arn:${{AWS::Partition}}:sqs:${{AWS::Region}}:${{AWS::AccountId}}:{failure_queue}"}
    merged["Resources"].update(event_sources.sam_event_overrides(app, options, destination, "TasksTable",
                                                                 settings.executor_max_concurrency))
    return merged
