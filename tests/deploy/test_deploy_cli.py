"""make deploy / make destroy against moto: provisioning, config, policy, event-source settings, idempotence.

``chalice deploy`` itself is replaced by a stand-in that does what it does to
the account: one function per handler and the event-source mappings, recorded
in .chalice/deployed/<stage>.json.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from deploy import cli, event_sources, stage

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".chalice").mkdir()
    shutil.copy(ROOT / ".chalice" / "config.json", tmp_path / ".chalice" / "config.json")
    return tmp_path


@pytest.fixture
def session() -> Iterator[boto3.session.Session]:
    with mock_aws():
        yield boto3.session.Session(region_name=REGION)


class FakeChalice:
    """Creates a function and the SQS + stream mappings the way ``chalice deploy`` does, once."""

    def __init__(self, session: boto3.session.Session) -> None:
        self.session = session
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str], project: Path) -> None:
        self.calls.append(list(args))
        if args[0] != "deploy":
            return
        deployed = project / ".chalice" / "deployed" / f"{args[2]}.json"
        if deployed.exists():
            return
        env = stage.environment(stage.load_config(project), args[2])
        lam, iam = self.session.client("lambda"), self.session.client("iam")
        role = iam.create_role(RoleName="fn-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("app.py", "def h(e, c): pass\n")
        resources: list[dict[str, Any]] = []
        for name, source in (("backup_monitor", f"arn:aws:sqs:{REGION}:123456789012:{env['BACKUP_MONITOR_QUEUE']}"),
                             ("task_executor", f"arn:aws:sqs:{REGION}:123456789012:{env['DUE_QUEUE']}"),
                             ("task_stream", env["TASKS_STREAM_ARN"])):
            fn = lam.create_function(FunctionName=f"timekeeper-{args[2]}-{name}", Runtime="python3.11", Role=role,
                                     Handler=f"app.{name}", Code={"ZipFile": buf.getvalue()})["FunctionArn"]
            kwargs: dict[str, Any] = {"StartingPosition": "TRIM_HORIZON"} if ":dynamodb:" in source else {}
            uuid = lam.create_event_source_mapping(EventSourceArn=source, FunctionName=fn, **kwargs)["UUID"]
            kind = "dynamodb_event" if ":dynamodb:" in source else "sqs_event"
            key = "stream_arn" if kind == "dynamodb_event" else "queue_arn"
            suffix = "dynamodb" if kind == "dynamodb_event" else "sqs"
            resources.append({"name": f"{name}-{suffix}-event-source", "resource_type": kind,
                              "event_uuid": uuid, key: source, "lambda_arn": fn})
        deployed.parent.mkdir(parents=True, exist_ok=True)
        deployed.write_text(json.dumps({"resources": resources, "schema_version": "2.0", "backend": "api"}))


def mapping(session: boto3.session.Session, project: Path, name: str) -> dict[str, Any]:
    for m in event_sources.deployed_mappings(project / ".chalice" / "deployed" / "prod.json"):
        if m.name.startswith(name):
            return dict(session.client("lambda").get_event_source_mapping(UUID=m.uuid))
    raise AssertionError(name)


def test_deploy_provisions_records_the_arns_renders_the_policy_and_runs_chalice(
        project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    report = cli.deploy("prod", session, {}, project, fake)
    env = stage.environment(stage.load_config(project), "prod")
    assert env["TASKS_STREAM_ARN"].startswith("arn:aws:dynamodb:us-east-1:123456789012:table/timekeeper-prod-tasks/stream/")
    assert env["SCHEDULER_ROLE_ARN"] == "arn:aws:iam::123456789012:role/timekeeper-prod-scheduler"
    assert env["ALERT_TOPIC_ARN"] == "arn:aws:sns:us-east-1:123456789012:timekeeper-prod-alerts"
    policy = json.loads((project / ".chalice" / "policy-prod.json").read_text())
    resources = [r for s in policy["Statement"] for r in s["Resource"]]
    assert "arn:aws:sqs:us-east-1:123456789012:timekeeper-prod-due" in resources
    assert not [r for r in resources if ":*:" in r], "placeholders left after a deploy"
    assert fake.calls == [["deploy", "--stage", "prod"]]
    assert any(c.startswith("event source task_stream") for c in report.changes)


def test_event_source_settings_are_applied_and_read_back(project: Path, session: boto3.session.Session) -> None:
    cli.deploy("prod", session, {}, project, FakeChalice(session))
    dlq = "arn:aws:sqs:us-east-1:123456789012:timekeeper-prod-task-dlq"
    stream = mapping(session, project, "task_stream")
    assert stream["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert stream["BisectBatchOnFunctionError"] is True
    # Retried through an outage of hours (bounded by age, not count), set aside while still replayable.
    assert stream["MaximumRetryAttempts"] == -1
    assert stream["MaximumRecordAgeInSeconds"] == 12 * 3600
    assert stream["DestinationConfig"] == {"OnFailure": {"Destination": dlq}}
    for name in ("backup_monitor", "task_executor"):
        assert mapping(session, project, name)["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_event_source_settings_come_from_the_environment(project: Path, session: boto3.session.Session) -> None:
    pattern = {"eventName": ["INSERT", "MODIFY"]}
    cli.deploy("prod", session, {"STREAM_MAX_RETRY_ATTEMPTS": "2", "STREAM_BISECT_ON_ERROR": "false",
                                 "STREAM_FILTER_PATTERNS": json.dumps([pattern])}, project, FakeChalice(session))
    stream = mapping(session, project, "task_stream")
    assert (stream["MaximumRetryAttempts"], stream["BisectBatchOnFunctionError"]) == (2, False)
    assert [json.loads(f["Pattern"]) for f in stream["FilterCriteria"]["Filters"]] == [pattern]


def test_a_second_deploy_changes_nothing(project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    first = cli.deploy("prod", session, {}, project, fake)
    config = (project / ".chalice" / "config.json").read_text()
    second = cli.deploy("prod", session, {}, project, fake)
    assert first.changes
    assert second.changes == []
    assert (project / ".chalice" / "config.json").read_text() == config


def test_a_stage_without_deployable_api_auth_is_refused(project: Path, session: boto3.session.Session) -> None:
    stage.record_environment("prod", {"API_AUTH": "none"}, project)
    with pytest.raises(cli.DeployError, match="API_AUTH"):
        cli.deploy("prod", session, {}, project, FakeChalice(session))


def test_destroy_needs_the_stage_name_typed(project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    cli.deploy("prod", session, {}, project, fake)
    with pytest.raises(cli.DeployError, match="not confirmed"):
        cli.destroy("prod", session, None, False, project, fake, ask=lambda _: "dev")
    assert session.client("sqs").get_queue_url(QueueName="timekeeper-prod-due")


def test_destroy_deletes_the_app_and_its_resources_but_keeps_the_data_tables(
        project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    cli.deploy("prod", session, {}, project, fake)
    report = cli.destroy("prod", session, None, False, project, fake, ask=lambda _: "prod")
    assert ["delete", "--stage", "prod"] in fake.calls
    assert "deleted queue timekeeper-prod-due" in report.changes
    assert "deleted role timekeeper-prod-scheduler" in report.changes
    assert session.client("sqs").list_queues().get("QueueUrls", []) == []
    assert sorted(session.client("dynamodb").list_tables()["TableNames"]) == [
        "timekeeper-prod-state", "timekeeper-prod-tasks"]


def test_destroy_with_delete_data_deletes_the_tables_too(project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    cli.deploy("prod", session, {}, project, fake)
    cli.destroy("prod", session, "prod", True, project, fake)
    assert session.client("dynamodb").list_tables()["TableNames"] == []


@pytest.mark.parametrize("environ, message", [
    ({"STREAM_MAX_RETRY_ATTEMPTS": "-2"}, "STREAM_MAX_RETRY_ATTEMPTS"),
    ({"STREAM_MAX_RECORD_AGE_SECONDS": "10"}, "STREAM_MAX_RECORD_AGE_SECONDS"),
    # Never set aside before the stream trims them (24 h): they could not be replayed.
    ({"STREAM_MAX_RECORD_AGE_SECONDS": "-1"}, "STREAM_MAX_RECORD_AGE_SECONDS"),
    ({"STREAM_MAX_RECORD_AGE_SECONDS": "86400"}, "STREAM_MAX_RECORD_AGE_SECONDS"),
    ({"STREAM_BISECT_ON_ERROR": "yes"}, "STREAM_BISECT_ON_ERROR"),
    ({"STREAM_FILTER_PATTERNS": "{"}, "STREAM_FILTER_PATTERNS"),
])
def test_bad_event_source_settings_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(event_sources.OptionError, match=message):
        event_sources.EventSourceOptions.from_env(environ)
