"""The app's own queues and topics are declared once (settings.OWN_QUEUES, OWN_TOPICS), and that declaration is
complete: every queue and topic provisioning creates, and every one the CloudFormation template declares, is
refused as a task action's target, even when TASK_ACTION_TARGET_ARNS allows everything. A queue added to
provisioning without being declared fails here."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from chalicelib.aws import Clients
from chalicelib.settings import APP_NAME, Settings
from chalicelib.tasks.actions import TARGET_FIELDS, action_refusal, own_targets, queue_arn_of, target_refusal
from deploy import stage, template
from deploy.provision import provision

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ("arn:aws:sqs:*:*:*", "arn:aws:sns:*:*:*")


def refused_queue(settings: Settings, url: str) -> bool:
    refusal = target_refusal({"type": "sqs", "queue_url": url, "message": "m"}, EVERYTHING, settings.region,
                             own_targets(settings))
    return refusal is not None and refusal[0] == "queue_url" and "own" in refusal[1]


def refused_topic(settings: Settings, arn: str) -> bool:
    refusal = target_refusal({"type": "sns", "topic_arn": arn, "message": "m"}, EVERYTHING, settings.region,
                             own_targets(settings))
    return refusal is not None and refusal[0] == "topic_arn" and "own" in refusal[1]


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_every_queue_and_topic_provisioning_creates_is_declared_and_refused_as_a_target(name: str) -> None:
    settings = stage.settings(stage.load_config(ROOT), name, "us-east-1")
    with mock_aws():
        clients = Clients(settings)
        provision(clients, settings)
        urls = clients.sqs.list_queues()["QueueUrls"]
        topics = [t["TopicArn"] for t in clients.sns.list_topics()["Topics"]]
    assert sorted(u.rsplit("/", 1)[-1] for u in urls) == sorted(settings.own_queues())
    assert sorted(t.rsplit(":", 1)[-1] for t in topics) == sorted(settings.own_topics())
    assert [u for u in urls if not refused_queue(settings, u)] == []
    assert [t for t in topics if not refused_topic(settings, t)] == []


def test_every_queue_and_topic_the_template_declares_is_declared_and_refused_as_a_target() -> None:
    settings = stage.settings(stage.load_config(ROOT), "prod", "us-east-1")
    for resources in (template.resources(settings)["Resources"],
                      json.loads((ROOT / "deploy" / "resources.json").read_text())["Resources"]):
        of_type: dict[str, list[Any]] = {}
        for resource in resources.values():  # (Chalice's RestAPI overlay has no Type of its own)
            of_type.setdefault(resource.get("Type", ""), []).append(resource.get("Properties", {}))
        queues = [p["QueueName"] for p in of_type.get("AWS::SQS::Queue", [])]
        topics = [p["TopicName"] for p in of_type.get("AWS::SNS::Topic", [])]
        assert sorted(queues) == sorted(settings.own_queues())
        assert sorted(topics) == sorted(settings.own_topics())
        for queue in queues:
            assert refused_queue(settings, f"https://sqs.eu-west-1.amazonaws.com/123456789012/{queue}"), queue
        for topic in topics:
            assert refused_topic(settings, f"arn:aws:sns:eu-west-1:123456789012:{topic}"), topic


def test_a_queue_or_topic_that_is_not_the_apps_own_passes_the_own_check() -> None:
    settings = stage.settings(stage.load_config(ROOT), "prod", "us-east-1")
    assert not refused_queue(settings, "https://sqs.us-east-1.amazonaws.com/123456789012/timekeeper-prod-due-x")
    assert not refused_topic(settings, "arn:aws:sns:us-east-1:123456789012:orders")


STAGES = tuple(stage.load_config(ROOT)["stages"])  # every stage .chalice/config.json declares


def settings_of(config: dict[str, Any], name: str) -> Settings:
    """The stage's settings (the local stage's API token is set where it runs: local/stage.py)."""
    return Settings.from_env({**stage.environment(config, name), "API_TOKEN": "t", "AWS_REGION": "us-east-1"})
ANYWHERE = ("arn:aws:sqs:*:*:*", "arn:aws:sns:*:*:*", "arn:aws:lambda:*:*:function:*")


def another_stages_targets(other: Settings) -> list[dict[str, Any]]:
    """Specs of actions at every queue, topic and function of the stage ``other`` (its executor, its API)."""
    account = "123456789012"
    return [*({"type": "sqs", "queue_url": f"https://sqs.us-east-1.amazonaws.com/{account}/{q}", "message": "m"}
              for q in other.own_queues()),
            *({"type": "sns", "topic_arn": f"arn:aws:sns:us-east-1:{account}:{t}", "message": "m"}
              for t in other.own_topics()),
            *({"type": "lambda", "function_arn": f"arn:aws:lambda:us-east-1:{account}:function:{f}", "payload": {}}
              for f in (f"{APP_NAME}-{other.stage}", f"{APP_NAME}-{other.stage}-task_executor"))]


@pytest.mark.parametrize(("name", "other"), [(a, b) for a in STAGES for b in STAGES if a != b])
def test_another_stages_queues_topics_and_functions_are_refused_under_a_wildcard_and_allowed_named_exactly(
        name: str, other: str) -> None:
    config = stage.load_config(ROOT)
    settings = replace(settings_of(config, name), task_action_target_arns=ANYWHERE)
    for spec in another_stages_targets(settings_of(config, other)):
        refusal = action_refusal(spec, settings)
        assert refusal is not None and "another stage's" in refusal[1], spec
        field = TARGET_FIELDS[spec["type"]]
        arn = queue_arn_of(spec[field], settings.region) if field == "queue_url" else spec[field]
        assert action_refusal(spec, replace(settings, task_action_target_arns=(*ANYWHERE, arn))) is None, spec
    assert action_refusal({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
                           "message": "m"}, settings) is None
