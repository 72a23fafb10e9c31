"""``chalice package --stage prod`` with deploy/resources.json merged in validates with cfn-lint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy import cli, stage

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prod stage packaged from a copy of the project (the deployment zip cache is reused)."""
    project = tmp_path_factory.mktemp("project")
    for name in ("app.py", "requirements.txt"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "chalicelib", project / "chalicelib", ignore=shutil.ignore_patterns("__pycache__"))
    (project / ".chalice").mkdir()
    for path in (ROOT / ".chalice").glob("*.json"):
        shutil.copy(path, project / ".chalice" / path.name)
    if (ROOT / ".chalice" / "deployments").is_dir():
        shutil.copytree(ROOT / ".chalice" / "deployments", project / ".chalice" / "deployments")
    out = project / "out"
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
    subprocess.run([str(BIN / "chalice"), "package", "--stage", "prod", "--merge-template",
                    str(ROOT / "deploy" / "resources.json"), str(out)],
                   cwd=project, env=env, check=True, capture_output=True)
    return out / "sam.json"


def template(packaged: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(packaged.read_text())
    return loaded


def test_the_packaged_prod_template_has_no_cfn_lint_errors(packaged: Path) -> None:
    result = subprocess.run([str(BIN / "cfn-lint"), str(packaged)], capture_output=True, text=True)
    # cfn-lint's exit code is a bit mask: 2 errors, 4 warnings, 8 informational (1: it could not run).
    assert result.returncode & ~(4 | 8) == 0, result.stdout + result.stderr


def test_cfn_lint_does_report_errors(tmp_path: Path) -> None:
    broken = {"Resources": {"DueQueue": {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": "two"}}}}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    result = subprocess.run([str(BIN / "cfn-lint"), str(tmp_path / "broken.json")], capture_output=True, text=True)
    assert result.returncode & 2, result.stdout


def test_the_committed_merge_template_is_rendered_from_the_prod_stage_and_app() -> None:
    committed = json.loads((ROOT / "deploy" / "resources.json").read_text())
    assert committed == cli.render_template({}), "run: python -m deploy.cli template"


def test_every_route_but_health_requires_sigv4_on_the_deployed_prod_api(packaged: Path) -> None:
    paths = template(packaged)["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]["paths"]
    for path, methods in paths.items():
        for method, spec in methods.items():
            if method == "options":
                continue
            security = spec.get("security", [])
            if (path, method) in {("/health", "get"), ("/openapi.json", "get")}:
                assert security == [], path
            else:
                assert security == [{"sigv4": []}], f"{method.upper()} {path} is not IAM-authorized"


def test_the_stream_event_reads_the_tasks_table_stream_with_the_failure_settings(packaged: Path) -> None:
    resources = template(packaged)["Resources"]
    stream_events = [e["Properties"] for r in resources.values() if r.get("Type") == "AWS::Serverless::Function"
                     for e in r["Properties"].get("Events", {}).values() if e["Type"] == "DynamoDB"]
    assert len(stream_events) == 1, stream_events  # task_stream's
    for props in stream_events:
        assert props["Stream"] == {"Fn::GetAtt": ["TasksTable", "StreamArn"]}
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["TaskDlq", "Arn"]}
    sqs_events = [e["Properties"] for r in resources.values() if r.get("Type") == "AWS::Serverless::Function"
                  for e in r["Properties"].get("Events", {}).values() if e["Type"] == "SQS"]
    assert sqs_events and all(p["FunctionResponseTypes"] == ["ReportBatchItemFailures"] for p in sqs_events)


def test_data_tables_outlive_the_stack(packaged: Path) -> None:
    resources = template(packaged)["Resources"]
    for name in ("StateTable", "TasksTable"):
        assert resources[name]["DeletionPolicy"] == "Retain"


def test_the_deployed_api_answers_its_own_errors_in_the_apps_error_shape(packaged: Path) -> None:
    api = template(packaged)["Resources"]["RestAPI"]["Properties"]
    responses = api["DefinitionBody"]["x-amazon-apigateway-gateway-responses"]
    for kind in ("UNAUTHORIZED", "ACCESS_DENIED", "MISSING_AUTHENTICATION_TOKEN", "THROTTLED", "REQUEST_TOO_LARGE",
                 "DEFAULT_4XX", "DEFAULT_5XX"):
        mapping = responses[kind]["responseTemplates"]["application/json"]
        # API Gateway substitutes $context.error.messageString with the message as a quoted JSON string.
        body = json.loads(mapping.replace("$context.error.messageString", json.dumps('Say "no"')))
        assert set(body) == {"error", "field"} and body["error"] == 'Say "no"', kind
        assert isinstance(body["field"], str) and body["field"], kind


def test_the_deployed_api_is_throttled_as_the_stage_settings_say(packaged: Path) -> None:
    api = template(packaged)["Resources"]["RestAPI"]["Properties"]
    settings = stage.settings(stage.load_config(ROOT), "prod", "us-east-1")
    assert api["MethodSettings"] == [{"ResourcePath": "/*", "HttpMethod": "*",
                                      "ThrottlingRateLimit": settings.api_throttle_rate,
                                      "ThrottlingBurstLimit": settings.api_throttle_burst}]
    assert (settings.api_throttle_rate, settings.api_throttle_burst) == (50.0, 100)  # README's defaults
