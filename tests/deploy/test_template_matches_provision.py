"""The CloudFormation path builds what ``make deploy`` builds: deploy/resources.json vs provision().

A template-based deploy (``chalice package --merge-template``) must leave the
same tables and queues as provision(): same keys, stream, TTLs, index, queue
timings and redrive, so neither path can drift (e.g. a state table whose
execution claims never expire).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from chalicelib.aws import Clients
from chalicelib.settings import STATE_TTL_ATTRIBUTE, WARM_WRITES_DEFAULT, Settings
from deploy import stage
from deploy.provision import cloudwatch_client, logs_client, provision, warm_writes

ROOT = Path(__file__).resolve().parents[2]


def committed_resources() -> dict[str, Any]:
    resources: dict[str, Any] = json.loads((ROOT / "deploy" / "resources.json").read_text())["Resources"]
    return resources


def of_type(resources: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in resources.items() if r.get("Type") == kind}


@pytest.fixture
def prod() -> Iterator[tuple[Clients, Settings]]:
    """The prod stage (the one deploy/resources.json renders), provisioned in moto."""
    settings = stage.settings(stage.load_config(ROOT), "prod", "us-east-1")
    with mock_aws():
        clients = Clients(settings)
        provision(clients, settings)
        yield clients, settings


def _by_name(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda e: str(e.get("AttributeName") or e.get("IndexName")))


def template_table(props: dict[str, Any]) -> dict[str, Any]:
    ttl = props.get("TimeToLiveSpecification") or {}
    return {
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": _by_name(props["AttributeDefinitions"]),
        "BillingMode": props["BillingMode"],
        "StreamViewType": (props.get("StreamSpecification") or {}).get("StreamViewType"),
        "TimeToLive": ttl.get("AttributeName") if ttl.get("Enabled") else None,
        "GlobalSecondaryIndexes": _by_name([
            {k: g[k] for k in ("IndexName", "KeySchema", "Projection")}
            for g in props.get("GlobalSecondaryIndexes", [])]),
        "WarmWriteUnits": (props.get("WarmThroughput") or {}).get("WriteUnitsPerSecond"),
    }


def provisioned_table(clients: Clients, name: str) -> dict[str, Any]:
    table = clients.dynamodb.describe_table(TableName=name)["Table"]
    stream: dict[str, Any] = dict(table.get("StreamSpecification") or {})
    ttl = clients.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    return {
        "KeySchema": table["KeySchema"],
        "AttributeDefinitions": _by_name([dict(a) for a in table["AttributeDefinitions"]]),
        "BillingMode": table.get("BillingModeSummary", {}).get("BillingMode", "PAY_PER_REQUEST"),
        "StreamViewType": stream.get("StreamViewType") if stream.get("StreamEnabled") else None,
        "TimeToLive": ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") else None,
        "GlobalSecondaryIndexes": _by_name([
            {"IndexName": g["IndexName"], "KeySchema": g["KeySchema"], "Projection": g["Projection"]}
            for g in table.get("GlobalSecondaryIndexes", [])]),
        # a table provision() did not pre-warm shows a new on-demand table's 4,000: the template sets none
        "WarmWriteUnits": warm if (warm := warm_writes(table)) > WARM_WRITES_DEFAULT else None,
    }


def test_the_template_has_the_tables_provision_creates_with_the_same_keys_stream_ttls_and_index(
        prod: tuple[Clients, Settings]) -> None:
    clients, _ = prod
    tables = of_type(committed_resources(), "AWS::DynamoDB::Table")
    assert sorted(p["TableName"] for p in tables.values()) == sorted(clients.dynamodb.list_tables()["TableNames"])
    for props in tables.values():
        assert template_table(props) == provisioned_table(clients, props["TableName"]), props["TableName"]


def test_the_templates_state_table_expires_claims_by_the_state_ttl_attribute() -> None:
    [state] = [p for p in of_type(committed_resources(), "AWS::DynamoDB::Table").values()
               if p["TableName"] == "timekeeper-prod-state"]
    assert state["TimeToLiveSpecification"] == {"AttributeName": STATE_TTL_ATTRIBUTE, "Enabled": True}


def test_the_template_has_the_queues_provision_creates_with_the_same_timings_and_redrive(
        prod: tuple[Clients, Settings]) -> None:
    clients, _ = prod
    resources = committed_resources()
    queues = of_type(resources, "AWS::SQS::Queue")
    urls = clients.sqs.list_queues().get("QueueUrls", [])
    assert sorted(p["QueueName"] for p in queues.values()) == sorted(u.rsplit("/", 1)[-1] for u in urls)
    for props in queues.values():
        url = clients.sqs.get_queue_url(QueueName=props["QueueName"])["QueueUrl"]
        have = clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for attribute in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds"):
            assert have[attribute] == str(props[attribute]), (props["QueueName"], attribute)
        want_redrive = props.get("RedrivePolicy")
        have_redrive = json.loads(have["RedrivePolicy"]) if "RedrivePolicy" in have else None
        if want_redrive is None:
            assert have_redrive is None, props["QueueName"]
            continue
        assert have_redrive is not None, props["QueueName"]
        target = resources[want_redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]]["Properties"]["QueueName"]
        assert have_redrive["deadLetterTargetArn"].rsplit(":", 1)[-1] == target
        assert have_redrive["maxReceiveCount"] == want_redrive["maxReceiveCount"]


def test_the_template_has_the_dead_letter_alarms_provision_creates_with_the_same_settings(
        prod: tuple[Clients, Settings]) -> None:
    clients, _ = prod
    resources = committed_resources()
    topic = resources["AlertTopic"]["Properties"]["TopicName"]
    in_template = {}
    for props in of_type(resources, "AWS::CloudWatch::Alarm").values():
        assert props["AlarmActions"] == [{"Ref": "AlertTopic"}]
        in_template[props["AlarmName"]] = {**props, "AlarmActions": [topic]}
        if props.get("Namespace") == "AWS/SQS":  # a dead-letter queue's, named by its resource
            [dimension] = props["Dimensions"]
            queue = resources[dimension["Value"]["Fn::GetAtt"][0]]["Properties"]["QueueName"]
            in_template[props["AlarmName"]]["Dimensions"] = [{"Name": "QueueName", "Value": queue}]
    provisioned = {}
    for alarm in cloudwatch_client(clients).describe_alarms()["MetricAlarms"]:
        provisioned[alarm["AlarmName"]] = {k: alarm[k] for k in in_template.get(alarm["AlarmName"], alarm)
                                           if k in alarm}
        provisioned[alarm["AlarmName"]]["AlarmActions"] = [a.rsplit(":", 1)[-1] for a in alarm["AlarmActions"]]
    assert sorted(in_template) == sorted(provisioned)
    assert in_template == provisioned
    # every queue another queue redrives to has one
    redrive_targets = {q["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
                       for q in of_type(resources, "AWS::SQS::Queue").values() if "RedrivePolicy" in q}
    alarmed = {p["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for p in of_type(resources, "AWS::CloudWatch::Alarm").values()
               if p.get("Namespace") == "AWS/SQS"}
    assert redrive_targets and redrive_targets <= alarmed


def test_the_template_has_the_alarms_on_the_apps_metrics_provision_creates(prod: tuple[Clients, Settings]) -> None:
    clients, _ = prod
    names = {p["AlarmName"] for p in of_type(committed_resources(), "AWS::CloudWatch::Alarm").values()}
    assert names == {a["AlarmName"] for a in cloudwatch_client(clients).describe_alarms()["MetricAlarms"]}
    assert {f"timekeeper-prod-{n}" for n in ("task-failures", "exact-lateness-p99", "backup-run-overdue",
                                             "backup-schedule-missed")} <= names


def test_the_template_has_the_dashboard_provision_puts_in_the_stacks_region(prod: tuple[Clients, Settings]) -> None:
    clients, settings = prod
    [props] = of_type(committed_resources(), "AWS::CloudWatch::Dashboard").values()
    assert props["DashboardName"] == "timekeeper-prod"
    body = props["DashboardBody"]["Fn::Sub"].replace("${AWS::Region}", settings.region)
    provisioned = cloudwatch_client(clients).get_dashboard(DashboardName="timekeeper-prod")["DashboardBody"]
    assert json.loads(body) == json.loads(provisioned)


def test_the_template_has_the_metric_filters_provision_puts_on_the_executors_log_group(
        prod: tuple[Clients, Settings]) -> None:
    clients, _ = prod
    resources = committed_resources()
    [group] = of_type(resources, "AWS::Logs::LogGroup").values()
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${TaskExecutor}"}  # the stack names the function
    provisioned = logs_client(clients).describe_metric_filters(
        logGroupName="/aws/lambda/timekeeper-prod-task_executor")["metricFilters"]
    assert {p["FilterName"]: (p["FilterPattern"], [{
        "metricName": t["MetricName"], "metricNamespace": t["MetricNamespace"], "metricValue": t["MetricValue"],
        "unit": t["Unit"], "dimensions": {d["Key"]: d["Value"] for d in t["Dimensions"]}}
        for t in p["MetricTransformations"]]) for p in of_type(resources, "AWS::Logs::MetricFilter").values()} == {
        f["filterName"]: (f["filterPattern"], f["metricTransformations"]) for f in provisioned}
    assert all(p["LogGroupName"] == {"Ref": "TaskExecutorLogGroup"}
               for p in of_type(resources, "AWS::Logs::MetricFilter").values())
