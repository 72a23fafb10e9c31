"""``chalice package --stage prod`` with deploy/resources.json merged in validates with cfn-lint, and its
zip ships the bytecode a cold start loads instead of compiling the sources."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from chalice.config import Config

from deploy import bytecode, cli, stage
from tests.deploy.chalice_cache import NO_BYTECODE_WRITES, shared_deployments

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prod stage packaged from a copy of the project as ``make deploy`` runs chalice (the deployment zip
    cache is reused: the project's, and the one built earlier in this run)."""
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
    # As `python -m deploy.cli package --stage prod OUT` runs in a shell with no region (the prod stage names
    # none): chalice's session must still get one.
    with pytest.MonkeyPatch.context() as shell:
        for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
            shell.delenv(name, raising=False)
        shell.setenv("AWS_CONFIG_FILE", str(project / "no-aws-config"))
        shell.setenv("AWS_EC2_METADATA_DISABLED", "true")
        for name, value in NO_BYTECODE_WRITES.items():
            shell.setenv(name, value)
        with shared_deployments(project, tmp_path_factory):
            cli.package("prod", out, dict(os.environ), project)
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
            if (path, method) in {("/health", "get"), ("/openapi.json", "get"), ("/console", "get"), ("/console/{asset}", "get")}:
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


def test_every_function_is_packaged_for_arm64_at_the_memory_the_benchmarks_chose(packaged: Path) -> None:
    """docs/benchmarks.md, "Lambda memory and architecture": 128 MB (Chalice's default) and arm64."""
    functions = {name: r["Properties"] for name, r in template(packaged)["Resources"].items()
                 if r.get("Type") == "AWS::Serverless::Function"}
    assert len(functions) >= 7, sorted(functions)
    assert {name: (f["Architectures"], f["MemorySize"]) for name, f in functions.items()} == {
        name: (["arm64"], 128) for name in functions}


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
    assert (settings.api_throttle_rate, settings.api_throttle_burst) == (50.0, 100)  # docs/configuration.md's defaults


def test_the_package_ships_valid_bytecode_for_app_py_and_every_chalicelib_module(packaged: Path) -> None:
    with zipfile.ZipFile(packaged.with_name("deployment.zip")) as zipped:
        names = set(zipped.namelist())
        app_sources = sorted(n for n in names if n == "app.py" or (n.startswith("chalicelib/") and n.endswith(".py")))
        assert "chalicelib/settings.py" in app_sources
        for source in app_sources:
            pyc = bytecode.cached_name(source)
            assert pyc in names, f"{source} ships without {pyc}"
            data = zipped.read(pyc)
            # PEP 552: magic, flags (0b01: hash-based, not checked against the source), source hash, code.
            assert data[:4] == importlib.util.MAGIC_NUMBER, source
            assert int.from_bytes(data[4:8], "little") == 0b01, source
            assert data[8:16] == importlib.util.source_hash(zipped.read(source)), source
            assert isinstance(marshal.loads(data[16:]), types.CodeType), source
        # The requirements' wheels (boto3, botocore, powertools) are compiled as well.
        assert [n for n in names if n.endswith(".py") and bytecode.cached_name(n) not in names] == []


def test_the_package_ships_every_file_of_chalicelib_so_a_task_sources_file_too(packaged: Path) -> None:
    """TASK_SOURCES_FILE names a file relative to chalicelib/: the Lambda reads it from the package."""
    files = {path.relative_to(ROOT).as_posix() for path in (ROOT / "chalicelib").rglob("*")
             if path.is_file() and "__pycache__" not in path.parts}
    assert "chalicelib/task_sources/seeds.json" in files
    with zipfile.ZipFile(packaged.with_name("deployment.zip")) as zipped:
        assert files - set(zipped.namelist()) == set()
        assert zipped.read("chalicelib/task_sources/seeds.json") == (ROOT / "chalicelib/task_sources/seeds.json").read_bytes()


def test_the_package_ships_the_consoles_files_and_api_gateway_passes_them_through_as_text(packaged: Path) -> None:
    from chalicelib import console
    with zipfile.ZipFile(packaged.with_name("deployment.zip")) as zipped:
        for name, text in console.FILES.items():
            assert console.rendered(name, zipped.read(f"chalicelib/console/{name}").decode()) == text, name
    api = template(packaged)["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    binary = set(api.get("x-amazon-apigateway-binary-media-types", []))
    assert binary and not {kind.split(";")[0] for kind in console.ASSETS.values()} & binary, binary


# In a fresh interpreter from the extracted package, as Lambda's /var/task: import app and every chalicelib
# module, and print the source files compiled meanwhile (the "compile" audit event) and where each module came from.
IMPORT_ALL = """
import importlib, json, os, sys
compiled = []
sys.addaudithook(lambda event, args: compiled.append(str(args[1]))
                 if event == "compile" and str(args[1]).endswith(".py") else None)
import app
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
loaded = {n: [m.__file__, m.__cached__] for n, m in sys.modules.items()
          if (n == "app" or n.split(".")[0] in ("chalicelib", "boto3", "botocore")) and getattr(m, "__file__", None)}
print(json.dumps({"compiled": compiled, "loaded": loaded}))
"""


def test_lambda_imports_the_app_from_the_shipped_bytecode_without_compiling(packaged: Path, tmp_path: Path) -> None:
    task = tmp_path / "task"
    with zipfile.ZipFile(packaged.with_name("deployment.zip")) as zipped:
        zipped.extractall(task)
        modules = sorted(n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in zipped.namelist()
                         if n.startswith("chalicelib/") and n.endswith(".py"))
    variables = dict(Config(chalice_stage="prod", config_from_disk=json.loads(
        (ROOT / ".chalice" / "config.json").read_text())).environment_variables)
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    env = {**basics, "AWS_DEFAULT_REGION": "us-east-1", **variables, "PYTHONDONTWRITEBYTECODE": "1"}
    paths = [task, *task.rglob("*")]
    for path in paths:  # read-only, as /var/task is
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        result = subprocess.run([sys.executable, "-c", IMPORT_ALL, json.dumps(modules)], cwd=task, env=env,
                                capture_output=True, text=True, timeout=120)
    finally:
        for path in paths:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["compiled"] == []
    loaded = report["loaded"]
    assert {"app", "chalicelib.settings", "boto3", "botocore.session"} <= set(loaded)
    assert set(modules) <= set(loaded)
    for name, (file, cached) in loaded.items():
        assert Path(file).is_relative_to(task), f"{name} was imported from {file}, not from the package"
        assert Path(cached).is_file(), f"{name} has no bytecode at {cached}"
    assert not list(task.rglob(f"*.{sys.implementation.cache_tag}.pyc.*")), "the import wrote bytecode"


def test_the_packaged_template_has_the_alarms_on_the_apps_metrics_and_the_stage_dashboard(packaged: Path) -> None:
    resources = template(packaged)["Resources"]
    alarms = {r["Properties"]["AlarmName"]: r["Properties"] for r in resources.values()
              if r.get("Type") == "AWS::CloudWatch::Alarm"}
    for name in ("task-failures", "exact-lateness-p99", "backup-run-overdue", "backup-schedule-missed"):
        assert alarms[f"timekeeper-prod-{name}"]["AlarmActions"] == [{"Ref": "AlertTopic"}], name
    assert {n for n in alarms if n.endswith("-dlq-not-empty")} == {
        f"timekeeper-prod-{q}-not-empty" for q in ("backup-monitor-dlq", "due-dlq", "due-scheduler-dlq", "task-dlq")}
    [dashboard] = [r["Properties"] for r in resources.values() if r.get("Type") == "AWS::CloudWatch::Dashboard"]
    assert dashboard["DashboardName"] == "timekeeper-prod"
    body = json.loads(dashboard["DashboardBody"]["Fn::Sub"])  # the stack's region substituted
    assert {w["properties"]["region"] for w in body["widgets"]} == {"${AWS::Region}"}
    assert len(body["widgets"]) == 6
