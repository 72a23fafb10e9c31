"""The executor's SQS event source mapping takes EXECUTOR_MAX_CONCURRENCY as its ``MaximumConcurrency`` after a
deploy (deploy/event_sources.py), and no other mapping does; a second run changes nothing; 0 removes it."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import boto3
from moto import mock_aws

from deploy import event_sources
from deploy.event_sources import DeployedMapping, EventSourceOptions

REGION = "us-east-1"


def mappings(lam: Any) -> list[DeployedMapping]:
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="fn-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    sqs = boto3.client("sqs", region_name=REGION)
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("app.py", "def h(e, c): pass\n")
    found = []
    for name in ("task_executor", "backup_monitor"):
        url = sqs.create_queue(QueueName=f"q-{name}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        function = lam.create_function(FunctionName=f"timekeeper-prod-{name}", Runtime="python3.11", Role=role,
                                       Handler=f"app.{name}", Code={"ZipFile": code.getvalue()})["FunctionArn"]
        uuid = lam.create_event_source_mapping(EventSourceArn=arn, FunctionName=function)["UUID"]
        found.append(DeployedMapping("sqs", uuid, arn, f"{name}-sqs-event-source"))
    return found


def test_the_executors_mapping_takes_its_maximum_concurrency_and_no_other_does() -> None:
    with mock_aws():
        lam = boto3.client("lambda", region_name=REGION)
        executor, monitor = mappings(lam)
        options = EventSourceOptions.from_env({})
        changes = event_sources.apply(lam, [executor, monitor], options, "", executor_max_concurrency=250)
        assert lam.get_event_source_mapping(UUID=executor.uuid)["ScalingConfig"] == {"MaximumConcurrency": 250}
        assert not lam.get_event_source_mapping(UUID=monitor.uuid).get("ScalingConfig")
        assert any("task_executor" in c and "ScalingConfig" in c for c in changes)
        again = event_sources.apply(lam, [executor, monitor], options, "", executor_max_concurrency=250)
        assert again == []
        event_sources.apply(lam, [executor], options, "", executor_max_concurrency=0)
        assert not lam.get_event_source_mapping(UUID=executor.uuid).get("ScalingConfig", {}).get(
            "MaximumConcurrency")
