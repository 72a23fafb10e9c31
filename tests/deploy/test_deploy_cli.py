"""make deploy / make destroy against moto: provisioning, config, policy, event-source settings, idempotence.

``chalice deploy`` itself is replaced by a stand-in that does what it does to
the account: one function per handler and the event-source mappings, recorded
in .chalice/deployed/<stage>.json.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from deploy import cli, event_sources, iam, stage

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
    files = stage.policy_wiring(stage.load_config(project), "prod")
    policies = {f: json.loads((project / ".chalice" / file).read_text()) for f, file in files.items()}
    assert sorted(policies) == sorted(iam.FUNCTIONS)
    for function in ("task_stream", "interval_processor", "task_executor"):
        resources = [r for s in policies[function]["Statement"] for r in s["Resource"]]
        assert "arn:aws:sqs:us-east-1:123456789012:timekeeper-prod-due" in resources, function
    for function, policy in policies.items():
        resources = [r for s in policy["Statement"] for r in s["Resource"]]
        assert not [r for r in resources if ":*:" in r], f"placeholders left after a deploy in {function}"
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


def test_the_stream_functions_policy_names_a_custom_on_failure_queue(
        project: Path, session: boto3.session.Session) -> None:
    session.client("sqs").create_queue(QueueName="stream-failures")
    cli.deploy("prod", session, {"STREAM_ON_FAILURE_QUEUE": "stream-failures"}, project, FakeChalice(session))
    policy = json.loads((project / ".chalice" / "policy-prod-task_stream.json").read_text())
    sends = [r for s in policy["Statement"] if "sqs:SendMessage" in s["Action"] for r in s["Resource"]]
    assert "arn:aws:sqs:us-east-1:123456789012:stream-failures" in sends
    assert mapping(session, project, "task_stream")["DestinationConfig"]["OnFailure"]["Destination"].endswith(
        ":stream-failures")


def test_a_function_without_its_own_policy_file_is_refused_before_anything_is_deployed(
        project: Path, session: boto3.session.Session) -> None:
    config = stage.load_config(project)
    del config["stages"]["prod"]["lambda_functions"]["task_executor"]["iam_policy_file"]
    stage.write_json(stage.config_path(project), config)
    fake = FakeChalice(session)
    with pytest.raises(cli.DeployError, match="iam_policy_file"):
        cli.deploy("prod", session, {}, project, fake)
    assert fake.calls == []
    assert session.client("sqs").list_queues().get("QueueUrls", []) == []


# What a leaked credential or secret looks like in a committed file.
ACCESS_KEY_ID = re.compile(r"(?<![A-Z0-9])(AKIA|ASIA|AROA|AIDA|AGPA|ANPA)[A-Z0-9]{16}(?![A-Z0-9])")
SECRET_LIKE = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")  # an AWS secret key's shape
SECRET_KEY_NAME = re.compile(r"secret|password|passwd|token|api_?key|private|credential", re.IGNORECASE)


def names_secrets(value: Any) -> bool:
    """True when a value only names where secrets are kept (TASK_WEBHOOK_SECRETS: ``ssm:<name>``,
    ``secretsmanager:<name>``), holding none itself."""
    parts = [part.strip() for part in value.split(",")] if isinstance(value, str) else []
    return bool(parts) and all(part.startswith(("ssm:", "secretsmanager:")) and " " not in part for part in parts)


def secrets_in(document: Any, path: str = "") -> list[str]:
    """Keys that name a secret and hold a non-empty value, anywhere in a JSON document."""
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if SECRET_KEY_NAME.search(key) and value not in ("", None, [], {}) and not names_secrets(value):
                found.append(f"{path}/{key}")
            found += secrets_in(value, f"{path}/{key}")
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += secrets_in(value, f"{path}/{index}")
    return found


def test_a_deploy_writes_no_secret_to_config_or_policy_files(project: Path) -> None:
    key_id, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    environ = {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLE",
               "API_TOKEN": "s3cret-api-token", "TASK_ACTION_TARGET_ARNS": ""}
    with mock_aws():
        session = boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret,
                                        aws_session_token=environ["AWS_SESSION_TOKEN"], region_name=REGION)
        cli.deploy("prod", session, environ, project, FakeChalice(session))
    files = [project / ".chalice" / "config.json", *sorted((project / ".chalice").glob("policy-*.json"))]
    assert len(files) == 1 + len(iam.FUNCTIONS)
    for path in files:
        text = path.read_text()
        for value in (key_id, secret, environ["AWS_SESSION_TOKEN"], environ["API_TOKEN"]):
            assert value not in text, f"{path.name} holds a credential"
        assert not ACCESS_KEY_ID.search(text), f"{path.name}: an access key id"
        assert not SECRET_LIKE.search(text), f"{path.name}: a secret-looking value {SECRET_LIKE.search(text)}"
        assert secrets_in(json.loads(text)) == [], f"{path.name}: {secrets_in(json.loads(text))}"


def test_the_secret_check_sees_a_leaked_key_a_secret_and_a_token() -> None:
    leaked = {"stages": {"prod": {"environment_variables": {"API_TOKEN": "abc", "DB_PASSWORD": "x", "API_AUTH": "iam"}}}}
    assert secrets_in(leaked) == ["/stages/prod/environment_variables/API_TOKEN",
                                  "/stages/prod/environment_variables/DB_PASSWORD"]
    assert secrets_in({"environment_variables": {"API_TOKEN": ""}}) == []
    assert secrets_in({"TASK_WEBHOOK_SECRETS": "ssm:/tk/hook,secretsmanager:tk/hook"}) == []  # names, not values
    assert secrets_in({"TASK_WEBHOOK_SECRETS": "ssm:/tk/hook,hunter2"}) == ["/TASK_WEBHOOK_SECRETS"]
    assert ACCESS_KEY_ID.search('"AWS_ACCESS_KEY_ID": "ASIAY34FZKBOKMUTVV7A"')
    assert SECRET_LIKE.search('"key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"')


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
    assert session.client("cloudwatch").describe_alarms()["MetricAlarms"] == []
    assert sorted(session.client("dynamodb").list_tables()["TableNames"]) == [
        "timekeeper-prod-state", "timekeeper-prod-tasks"]


def test_destroy_with_delete_data_deletes_the_tables_too(project: Path, session: boto3.session.Session) -> None:
    fake = FakeChalice(session)
    cli.deploy("prod", session, {}, project, fake)
    cli.destroy("prod", session, "prod", True, project, fake)
    assert session.client("dynamodb").list_tables()["TableNames"] == []


@pytest.mark.parametrize("environ, message", [
    ({"STREAM_MAX_RETRY_ATTEMPTS": "-2"}, "STREAM_MAX_RETRY_ATTEMPTS"),
    ({"STREAM_MAX_RETRY_ATTEMPTS": "many"}, "STREAM_MAX_RETRY_ATTEMPTS"),
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
