"""The committed policies: rendered from the template, no wildcard actions, scoped resources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chalicelib.settings import Settings
from deploy import iam, stage
from tests.policy_recorder import Call, Request, allowed, denied

ROOT = Path(__file__).resolve().parents[2]
WHERE = iam.Account("aws", "us-east-1", "123456789012")
# AWS has no narrower resource for these; the backup actions act on tables chosen at run time.
UNSCOPED = {"dynamodb:ListTables", "dynamodb:ListBackups", "dynamodb:ListStreams"}
ANY_TABLE = {"dynamodb:CreateBackup", "dynamodb:DescribeTable", "dynamodb:ListTagsOfResource",
             "dynamodb:DescribeBackup", "dynamodb:DeleteBackup"}


def committed_policies() -> dict[str, dict[str, object]]:
    return {s: json.loads(stage.policy_path(s).read_text()) for s in stage.DEPLOYED_STAGES}


def every_policy() -> list[tuple[str, iam.Policy]]:
    settings = Settings.from_env()
    policies: list[tuple[str, iam.Policy]] = [(f"policy-{s}.json", p) for s, p in committed_policies().items()]
    policies.append(("app (test stage)", iam.app_policy(settings, WHERE, ["arn:aws:sqs:us-east-1:123456789012:x"])))
    policies.append(("scheduler role", iam.scheduler_role_policy("arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:d")))
    return policies


def test_dev_and_prod_use_their_committed_policy_files_not_autogen() -> None:
    config = stage.load_config()
    for name in stage.DEPLOYED_STAGES:
        assert config["stages"][name]["autogen_policy"] is False
        assert stage.policy_path(name).exists()


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_committed_policy_files_are_the_template_rendered_for_their_stage(name: str) -> None:
    config = stage.load_config()
    expected = stage.stage_policy(config, name)
    assert committed_policies()[name] == expected, f"run: python -m deploy.cli policy --stage {name}"


def test_no_policy_has_a_wildcard_action() -> None:
    for label, policy in every_policy():
        for action in iam.actions_of(policy):
            assert "*" not in action and "?" not in action, f"{label}: {action}"
            assert ":" in action, f"{label}: {action}"


def test_every_resource_is_the_apps_own_except_where_aws_allows_nothing_narrower() -> None:
    for label, policy in every_policy():
        for statement in policy["Statement"]:
            actions = set(statement["Action"])
            for resource in statement["Resource"]:
                if resource == "*":
                    assert actions <= UNSCOPED, f"{label}: {sorted(actions)} on *"
                elif resource.endswith(":table/*") or resource.endswith(":table/*/backup/*"):
                    assert actions <= ANY_TABLE, f"{label}: {sorted(actions)} on {resource}"
                else:
                    assert "timekeeper" in resource or resource.endswith(("identity/example.com", ":x", ":due", ":d")) \
                        or "@" in resource, f"{label}: {resource}"


def test_pass_role_is_only_the_scheduler_role_and_only_to_scheduler() -> None:
    for label, policy in every_policy():
        for statement in policy["Statement"]:
            if "iam:PassRole" in statement["Action"]:
                assert statement["Action"] == ["iam:PassRole"], label
                assert [r.rsplit("/", 1)[-1] for r in statement["Resource"]] in (
                    ["timekeeper-dev-scheduler"], ["timekeeper-prod-scheduler"], ["timekeeper-scheduler"]), label
                assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}


def test_the_scheduler_role_may_only_send_to_the_due_queue_and_its_dead_letter_queue() -> None:
    policy = iam.scheduler_role_policy("arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:due-scheduler-dlq")
    [statement] = policy["Statement"]
    assert statement["Action"] == ["sqs:SendMessage"]
    assert statement["Resource"] == ["arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:due-scheduler-dlq"]


def test_the_scheduler_role_trusts_only_scheduler_of_its_own_account() -> None:
    [statement] = iam.scheduler_trust_policy(WHERE)["Statement"]
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}


def test_the_policy_consumes_every_queue_and_stream_the_app_subscribes_to() -> None:
    from chalice.app import DynamoDBEventConfig, SQSEventConfig

    import app as app_module

    settings = Settings.from_env()
    policy = iam.app_policy(settings, WHERE)
    for source in app_module.app.event_sources:
        if isinstance(source, SQSEventConfig):
            arn = f"arn:aws:sqs:us-east-1:123456789012:{source.queue}"
            for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"):
                assert allowed(policy, Request(action, arn)), (source.name, action)
        if isinstance(source, DynamoDBEventConfig):
            for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"):
                assert allowed(policy, Request(action, settings.tasks_stream_arn)), (source.name, action)


def test_the_coverage_check_catches_a_missing_permission_and_a_foreign_resource() -> None:
    policy = iam.app_policy(Settings.from_env(), WHERE)
    calls = [
        Call("dynamodb", "Scan", (("TableName", "timekeeper-state"),), "chalicelib/x.py", "t"),
        Call("dynamodb", "PutItem", (("TableName", "someone-elses"),), "chalicelib/x.py", "t"),
        Call("sqs", "SendMessageBatch", (("QueueUrl", "http://q/123456789012/timekeeper-due"),), "x", "t"),
        Call("ses", "SendEmail", (("FromEmailAddress", "reminders@example.com"),), "x", "t"),
        Call("scheduler", "CreateSchedule", (("GroupName", "timekeeper"), ("Name", "t1"),
                                             ("RoleArn", "arn:aws:iam::123456789012:role/timekeeper-scheduler")), "x", "t"),
    ]
    problems = denied(policy, calls, "aws", "us-east-1", "123456789012")
    assert [(c.operation, r.resource.rsplit(":", 1)[-1]) for c, r in problems] == [
        ("PutItem", "table/someone-elses"), ("Scan", "table/timekeeper-state")]
