"""The real ``make deploy STAGE=prod`` and ``make destroy CONFIRM=prod`` against moto's server (docs/deploy-check.md).

No stand-in: ``make`` runs ``python -m deploy.cli deploy --stage prod``, which provisions, renders
the policy files, runs the real ``chalice deploy`` (package built, roles, functions, event sources,
rules, REST API) and applies what Chalice cannot set.  The account is moto's server in a child
process (tests/deploy/moto_shims.py: it takes Chalice's Swagger 2.0 and keeps a stage across
deployments, as AWS does); the project is a copy, so .chalice/deployed and the recorded ARNs stay
out of the repository.  The prod stage is the committed one, with only its two schedules set to
values no default has, so the rules show they came from the stage, and two task sources on tables
the user had before the deploy: one without a stream (the stage opts in to enabling it), one with
its stream and TTL already set.

What is checked is what a user checks in the console, read once after each step (``console``):
after the first deploy, again after a second deploy (nothing may change), and after destroy.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from chalicelib.auth import PUBLIC_ROUTES
from deploy import event_sources, iam, stage
from tests.deploy.chalice_cache import NO_BYTECODE_WRITES, shared_deployments

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's
PREFIX = "timekeeper-prod"
BACKUP_SCHEDULE = "cron(15 3 ? * MON-FRI *)"
PROCESSOR_SCHEDULE = "rate(2 minutes)"
AUTHORIZATION = {"iam": "AWS_IAM", "cognito": "COGNITO_USER_POOLS", "api_key": "NONE"}
# The user's own tables, there before the first deploy, with an item each (docs/task-sources.md).
APPOINTMENTS, SESSIONS = "user-appointments", "user-sessions"
TASK_SOURCES: dict[str, dict[str, Any]] = {
    "appointments": {"table": APPOINTMENTS, "strategy": "exact", "due_attribute": "REMINDER_TIMESTAMP",
                     "enable_stream": True},
    "sessions": {"table": SESSIONS, "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]},
}
USER_ITEMS = {
    APPOINTMENTS: {"PK": {"S": "USER#1"}, "SK": {"S": "R#1"}, "REMINDER_TIMESTAMP": {"N": "1900000000"},
                   "email": {"S": "ada@example.com"}},
    SESSIONS: {"email": {"S": "grace@example.com"}, "expires_at": {"N": "1900000000"}},
}

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's server with the shims, in a child process on a free loopback port."""
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("w") as errors:
        server = subprocess.Popen([sys.executable, "-m", "tests.deploy.moto_shims"], cwd=ROOT, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors)
    assert server.stdout is not None and server.stdin is not None
    try:
        ready, _, _ = select.select([server.stdout], [], [], 60)
        assert ready, f"moto's server did not start: {log.read_text()}"
        yield f"http://127.0.0.1:{int(server.stdout.readline())}"
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def copy_project(root: Path) -> Path:
    """The files ``make deploy`` reads, the shared venv, and chalice's package cache when there is one."""
    for name in ("app.py", "requirements.txt", "requirements-dev.txt", "Makefile"):
        shutil.copy2(ROOT / name, root / name)
    for package in ("chalicelib", "deploy", "local"):
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".chalice").mkdir()
    for path in (ROOT / ".chalice").glob("*.json"):
        shutil.copy(path, root / ".chalice" / path.name)
    if (ROOT / ".chalice" / "deployments").is_dir():
        shutil.copytree(ROOT / ".chalice" / "deployments", root / ".chalice" / "deployments")
    (root / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    config = stage.load_config(root)
    config["stages"]["prod"]["environment_variables"].update(
        BACKUP_SCHEDULE=BACKUP_SCHEDULE, PROCESSOR_SCHEDULE=PROCESSOR_SCHEDULE, TASK_SOURCES=json.dumps(TASK_SOURCES))
    for name in TASK_SOURCES:  # as docs/task-sources.md says: each source function's policy file
        config["stages"]["prod"]["lambda_functions"][f"source_{name}"] = {
            "iam_policy_file": stage.policy_file("prod", f"source_{name}")}
    stage.write_json(stage.config_path(root), config)
    return root


def create_user_tables(session: boto3.session.Session, endpoint: str) -> None:
    """The user's tables as they were before the app: appointments without a stream, sessions with its
    stream and TTL; an item in each."""
    ddb = session.client("dynamodb", endpoint_url=endpoint)
    ddb.create_table(TableName=APPOINTMENTS, BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
                     AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                           {"AttributeName": "SK", "AttributeType": "S"}])
    ddb.create_table(TableName=SESSIONS, BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "email", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "email", "AttributeType": "S"}],
                     StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    ddb.update_time_to_live(TableName=SESSIONS,
                            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"})
    for table, item in USER_ITEMS.items():
        ddb.put_item(TableName=table, Item=item)


def environment(endpoint: str) -> dict[str, str]:
    """What a user's shell has for a deploy, pointed at moto: no test settings leak into the stage."""
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    return {**basics, "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
            **NO_BYTECODE_WRITES}  # chalice's package cache: tests/deploy/chalice_cache.py


@dataclass(frozen=True)
class Run:
    output: str
    seconds: float

    def changes(self) -> list[str]:
        return [line.removeprefix("changed: ") for line in self.output.splitlines() if line.startswith("changed: ")]


def make(project: Path, env: dict[str, str], *args: str) -> Run:
    """``make`` in the copy; -o: the shared venv is taken as installed (make test built it)."""
    started = time.monotonic()
    result = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", *args], cwd=project, env=env,
                            capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return Run(output, time.monotonic() - started)


def paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    return [item for page in client.get_paginator(operation).paginate(**kwargs) for item in page.get(key, [])]


def console(session: boto3.session.Session, endpoint: str) -> dict[str, Any]:
    """What the AWS console shows of the stage: roles, functions, event sources, rules, the API, the data."""
    def client(service: str) -> Any:
        return session.client(service, endpoint_url=endpoint)  # type: ignore[call-overload]

    lam, iam_, events, apigw = client("lambda"), client("iam"), client("events"), client("apigateway")
    sqs, ddb, sns, cloudwatch, scheduler = (client("sqs"), client("dynamodb"), client("sns"), client("cloudwatch"),
                                            client("scheduler"))
    roles = {}
    for role in paginate(iam_, "list_roles", "Roles"):
        if role["RoleName"].startswith(PREFIX):
            name = role["RoleName"]
            roles[name] = {
                "arn": role["Arn"], "trust": role["AssumeRolePolicyDocument"],
                "inline": {policy: iam_.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
                           for policy in paginate(iam_, "list_role_policies", "PolicyNames", RoleName=name)},
                "attached": paginate(iam_, "list_attached_role_policies", "AttachedPolicies", RoleName=name)}
    functions = {}
    for function in paginate(lam, "list_functions", "Functions"):
        if function["FunctionName"].startswith(PREFIX):
            found = lam.get_function_configuration(FunctionName=function["FunctionName"])
            functions[function["FunctionName"]] = {
                **{key: found.get(key) for key in ("FunctionArn", "Role", "Handler", "Runtime", "Timeout", "MemorySize",
                                                   "CodeSha256", "Architectures")},
                "Environment": found.get("Environment", {}).get("Variables", {})}
    mappings = {
        m["UUID"]: {key: m.get(key) for key in (
            "FunctionArn", "EventSourceArn", "BatchSize", "StartingPosition", "State", "FunctionResponseTypes",
            "BisectBatchOnFunctionError", "MaximumRetryAttempts", "MaximumRecordAgeInSeconds", "DestinationConfig",
            "FilterCriteria")}
        for m in paginate(lam, "list_event_source_mappings", "EventSourceMappings")}
    rules = {rule["Name"]: {"ScheduleExpression": rule.get("ScheduleExpression"), "State": rule["State"],
                            "Targets": sorted(t["Arn"] for t in events.list_targets_by_rule(Rule=rule["Name"])["Targets"])}
             for rule in events.list_rules(NamePrefix=PREFIX)["Rules"]}
    apis = {}
    for api in apigw.get_rest_apis()["items"]:
        methods = {}
        for resource in paginate(apigw, "get_resources", "items", restApiId=api["id"]):
            for verb in resource.get("resourceMethods") or {}:
                method = apigw.get_method(restApiId=api["id"], resourceId=resource["id"], httpMethod=verb)
                integration = method.get("methodIntegration", {})
                methods[f"{verb} {resource['path']}"] = {
                    "authorizationType": method.get("authorizationType"),
                    "apiKeyRequired": bool(method.get("apiKeyRequired")),
                    "authorizerId": method.get("authorizerId"),
                    "integration": (integration.get("type"), integration.get("uri"))}
        apis[api["id"]] = {
            "name": api["name"], "methods": methods,
            "authorizers": apigw.get_authorizers(restApiId=api["id"])["items"],
            "stages": {s["stageName"]: s.get("methodSettings", {})
                       for s in apigw.get_stages(restApiId=api["id"])["item"]},
            "gateway_responses": {r["responseType"]: r.get("responseTemplates", {})
                                  for r in apigw.get_gateway_responses(restApiId=api["id"])["items"]}}
    queues = {}
    for url in sqs.list_queues().get("QueueUrls", []):
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queues[url.rsplit("/", 1)[-1]] = {"url": url, "arn": arn}
    return {
        "roles": roles, "functions": functions, "mappings": mappings, "rules": rules, "apis": apis,
        "queues": queues,
        "user_items": {table: ddb.scan(TableName=table, ConsistentRead=True)["Items"] for table in USER_ITEMS},
        "user_ttl": ddb.describe_time_to_live(TableName=SESSIONS)["TimeToLiveDescription"],
        "tables": {name: ddb.describe_table(TableName=name)["Table"].get("LatestStreamArn")
                   for name in ddb.list_tables()["TableNames"]},
        "topics": sorted(t["TopicArn"] for t in paginate(sns, "list_topics", "Topics")),
        "alarms": sorted(a["AlarmName"] for a in cloudwatch.describe_alarms()["MetricAlarms"]),
        "schedule_groups": sorted(g["Name"] for g in scheduler.list_schedule_groups()["ScheduleGroups"]
                                  if g["Name"] != "default"),
    }


@dataclass(frozen=True)
class Deployment:
    project: Path
    first: Run
    second: Run
    destroyed: Run
    deployed: dict[str, Any]    # the console after the first make deploy
    redeployed: dict[str, Any]  # ... after the second
    after_destroy: dict[str, Any]
    records: dict[str, Any]     # .chalice/deployed/prod.json after the deploys
    packaged: dict[str, Any]    # plain `chalice package --stage prod`'s sam.json once make deploy has run

    @property
    def env(self) -> dict[str, str]:
        """The prod stage's variables as the deploy recorded them in the copy's config.json."""
        return stage.environment(stage.load_config(self.project), "prod")

    @property
    def functions(self) -> tuple[str, ...]:
        """app.py's functions for the stage: its own, and one stream function per task source."""
        return iam.function_names(stage.settings(stage.load_config(self.project), "prod"))

    def function(self, name: str) -> dict[str, Any]:
        """A function of app.py as deployed: Chalice names the API handler <app>-<stage>, the others
        <app>-<stage>-<name>."""
        return dict(self.deployed["functions"][PREFIX if name == iam.API_HANDLER else f"{PREFIX}-{name}"])


@pytest.fixture(scope="module")
def deployment(endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    project = copy_project(tmp_path_factory.mktemp("project"))
    env = environment(endpoint)
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    create_user_tables(session, endpoint)
    with shared_deployments(project, tmp_path_factory):  # the package built earlier in this run, if one was
        first = make(project, env, "deploy", "STAGE=prod")
    deployed = console(session, endpoint)
    subprocess.run([str(Path(sys.prefix) / "bin" / "chalice"), "package", "--stage", "prod", "out"], cwd=project,
                   env=env, check=True, capture_output=True, timeout=600)
    packaged = json.loads((project / "out" / "sam.json").read_text())
    second = make(project, env, "deploy", "STAGE=prod")
    redeployed = console(session, endpoint)
    records = json.loads((project / ".chalice" / "deployed" / "prod.json").read_text())
    destroyed = make(project, env, "destroy", "STAGE=prod", "CONFIRM=prod")
    print(f"\nmake deploy: {first.seconds:.1f} s, again: {second.seconds:.1f} s, make destroy: {destroyed.seconds:.1f} s")
    return Deployment(project, first, second, destroyed, deployed, redeployed, console(session, endpoint), records,
                      packaged)


def test_each_function_runs_under_its_own_role_with_exactly_the_policy_of_its_policy_file(
        deployment: Deployment) -> None:
    env = deployment.env
    where = iam.Account("aws", REGION, ACCOUNT)
    expected = iam.function_policies(stage.settings(stage.load_config(deployment.project), "prod"), where)
    roles = deployment.deployed["roles"]
    seen: set[str] = set()
    assert len(deployment.functions) == len(iam.FUNCTIONS) + len(TASK_SOURCES)
    for function in deployment.functions:
        role_arn = deployment.function(function)["Role"]
        assert role_arn not in seen, f"{function} shares a role"
        seen.add(role_arn)
        [role] = [r for r in roles.values() if r["arn"] == role_arn]
        policy_file = json.loads(stage.policy_path("prod", function, deployment.project).read_text())
        assert list(role["inline"].values()) == [policy_file], function
        assert role["attached"] == [], function
        assert policy_file == expected[function], f"{function}: the policy file is not the provisioned stage's"
        assert [s["Principal"] for s in role["trust"]["Statement"]] == [{"Service": "lambda.amazonaws.com"}]
    # Nothing else: the functions' roles and the role EventBridge Scheduler assumes.
    assert sorted(r["arn"] for r in roles.values()) == sorted([*seen, env["SCHEDULER_ROLE_ARN"]])


def test_the_functions_environment_holds_the_provisioned_names_and_arns(deployment: Deployment) -> None:
    env, seen = deployment.env, deployment.deployed
    queues = seen["queues"]
    assert env["TASKS_STREAM_ARN"] == seen["tables"][env["TASKS_TABLE"]]
    assert env["STATE_TABLE"] in seen["tables"]
    assert env["ALERT_TOPIC_ARN"] in seen["topics"]
    assert env["DUE_QUEUE_URL"] == queues[env["DUE_QUEUE"]]["url"]
    assert env["DUE_QUEUE_ARN"] == queues[env["DUE_QUEUE"]]["arn"]
    assert env["SCHEDULER_DLQ_ARN"] in [q["arn"] for q in queues.values()]
    assert env["SCHEDULER_ROLE_ARN"] == seen["roles"][f"{PREFIX}-scheduler"]["arn"]
    for name in ("BACKUP_MONITOR_QUEUE", "BACKUP_MONITOR_DLQ", "TASK_DLQ", "DUE_DLQ"):
        assert env[name] in queues, name
    config = stage.load_config(deployment.project)
    assert json.loads(env["TASK_SOURCE_STREAMS"]) == {name: seen["tables"][source["table"]]
                                                      for name, source in TASK_SOURCES.items()}
    assert len(seen["functions"]) == len(deployment.functions)  # one per handler of app.py, nothing else
    for function in deployment.functions:
        deployed = deployment.function(function)
        assert deployed["Environment"] == env, function
        timeout = config.get("lambda_functions", {}).get(function, {}).get("lambda_timeout", 60)  # Chalice's default
        assert deployed["Timeout"] == timeout, function
        # The memory and architecture docs/benchmarks.md chose from the handlers' measured CPU ("Lambda memory and
        # architecture"): Chalice's default 128 MB, on arm64 (every runtime dependency is pure Python).
        memory = config.get("lambda_functions", {}).get(function, {}).get("lambda_memory_size", 128)
        assert (deployed["MemorySize"], deployed["Architectures"]) == (memory, ["arm64"]), function
        assert deployed["Handler"] == ("app.app" if function == iam.API_HANDLER else f"app.{function}")


def test_the_mappings_chalice_created_carry_the_settings_chalice_cannot_set(deployment: Deployment) -> None:
    env, mappings = deployment.env, deployment.deployed["mappings"]
    created = {r["name"]: r for r in deployment.records["resources"] if r["resource_type"] in ("sqs_event",
                                                                                               "dynamodb_event")}
    assert sorted(mappings) == sorted(r["event_uuid"] for r in created.values()), "a mapping Chalice did not create"
    queues = deployment.deployed["queues"]
    for function, queue, batch in (("backup_monitor", "BACKUP_MONITOR_QUEUE", 1), ("task_executor", "DUE_QUEUE", 10),
                                   ("due_dead_letter", "DUE_DLQ", 10)):
        mapping = mappings[created[f"{function}-sqs-event-source"]["event_uuid"]]
        assert mapping["FunctionArn"] == deployment.function(function)["FunctionArn"]
        assert mapping["EventSourceArn"] == queues[env[queue]]["arn"]
        assert (mapping["BatchSize"], mapping["FunctionResponseTypes"]) == (batch, ["ReportBatchItemFailures"])
    # The tasks table's stream, and each task source's: the user's table's stream.
    streams = {"task_stream": env["TASKS_STREAM_ARN"],
               **{f"source_{name}": arn for name, arn in json.loads(env["TASK_SOURCE_STREAMS"]).items()}}
    assert len(streams) == 1 + len(TASK_SOURCES)
    for function, stream_arn in streams.items():
        stream = mappings[created[f"{function}-dynamodb-event-source"]["event_uuid"]]
        assert stream["FunctionArn"] == deployment.function(function)["FunctionArn"]
        assert (stream["EventSourceArn"], stream["StartingPosition"], stream["BatchSize"]) == (
            stream_arn, "TRIM_HORIZON", 100), function
        assert stream["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert stream["BisectBatchOnFunctionError"] is True
        assert stream["MaximumRetryAttempts"] == -1                # bounded by age, through an outage of hours
        assert stream["MaximumRecordAgeInSeconds"] == 12 * 3600    # set aside while the stream can still replay it
        assert stream["MaximumRecordAgeInSeconds"] < event_sources.STREAM_RETENTION_SECONDS
        assert stream["DestinationConfig"] == {"OnFailure": {"Destination": queues[env["TASK_DLQ"]]["arn"]}}


def test_the_users_tables_get_what_their_sources_need_and_nothing_else(deployment: Deployment) -> None:
    """The opted-in stream enabled on the table without one, the other table's stream kept, TTL as it was;
    the user's items untouched by make deploy, a second one and make destroy; the tables kept."""
    tables = deployment.deployed["tables"]
    assert tables[APPOINTMENTS] and tables[SESSIONS]
    enabled = [change for change in deployment.first.changes() if APPOINTMENTS in change or SESSIONS in change]
    assert enabled == [f"enabled the NEW_AND_OLD_IMAGES stream of {APPOINTMENTS} (task source appointments)"], \
        deployment.first.output
    for seen in (deployment.deployed, deployment.redeployed, deployment.after_destroy):
        assert seen["user_items"] == {table: [item] for table, item in USER_ITEMS.items()}
        assert seen["user_ttl"] == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
        assert {table: seen["tables"][table] for table in USER_ITEMS} == {
            table: tables[table] for table in USER_ITEMS}


def test_the_schedule_rules_run_the_functions_on_the_stages_expressions(deployment: Deployment) -> None:
    assert (deployment.env["BACKUP_SCHEDULE"], deployment.env["PROCESSOR_SCHEDULE"]) == (
        BACKUP_SCHEDULE, PROCESSOR_SCHEDULE)
    assert deployment.deployed["rules"] == {
        f"{PREFIX}-backup_trigger-event": {"ScheduleExpression": BACKUP_SCHEDULE, "State": "ENABLED",
                                           "Targets": [deployment.function("backup_trigger")["FunctionArn"]]},
        f"{PREFIX}-interval_processor-event": {"ScheduleExpression": PROCESSOR_SCHEDULE, "State": "ENABLED",
                                               "Targets": [deployment.function("interval_processor")["FunctionArn"]]},
    }


def test_the_rest_api_has_every_route_with_the_stages_authorization(deployment: Deployment) -> None:
    import app as app_module

    [api_id] = [r["rest_api_id"] for r in deployment.records["resources"] if r["resource_type"] == "rest_api"]
    assert list(deployment.deployed["apis"]) == [api_id]
    api = deployment.deployed["apis"][api_id]
    protected = AUTHORIZATION[deployment.env["API_AUTH"]]
    handler = deployment.function(iam.API_HANDLER)["FunctionArn"]
    expected = {f"{verb} {path}": {
        "authorizationType": "NONE" if (path, verb) in PUBLIC_ROUTES else protected,
        "apiKeyRequired": deployment.env["API_AUTH"] == "api_key" and (path, verb) not in PUBLIC_ROUTES,
        "authorizerId": None,
        "integration": ("AWS_PROXY",
                        f"arn:aws:apigateway:{REGION}:lambda:path/2015-03-31/functions/{handler}/invocations")}
        for path, entries in app_module.app.routes.items() for verb in entries}
    assert api["methods"] == expected
    assert api["authorizers"] == []  # IAM: API Gateway checks SigV4 itself, no authorizer resource
    settings = stage.settings(stage.load_config(deployment.project), "prod")
    assert api["stages"]["api"]["*/*"]["throttlingRateLimit"] == settings.api_throttle_rate
    assert api["stages"]["api"]["*/*"]["throttlingBurstLimit"] == settings.api_throttle_burst
    assert len(api["gateway_responses"]) == 17
    for kind, templates in api["gateway_responses"].items():
        assert '"error": $context.error.messageString' in templates["application/json"], kind


def test_a_second_make_deploy_changes_nothing(deployment: Deployment) -> None:
    assert deployment.redeployed == deployment.deployed
    [api_id] = deployment.deployed["apis"]
    # Only the API's gateway responses and throttling are stated again: chalice deploy overwrites the API.
    assert [line for line in deployment.second.changes() if not line.startswith(f"API {api_id}")] == []
    assert "Reusing existing deployment package." in deployment.second.output


def test_make_destroy_removes_what_deploy_created_and_keeps_the_data_tables(deployment: Deployment) -> None:
    env, after = deployment.env, deployment.after_destroy
    assert {key: after[key] for key in ("roles", "functions", "mappings", "rules", "apis", "queues", "topics",
                                        "alarms", "schedule_groups")} == {
        "roles": {}, "functions": {}, "mappings": {}, "rules": {}, "apis": {}, "queues": {}, "topics": [],
        "alarms": [], "schedule_groups": []}
    assert sorted(after["tables"]) == sorted([env["STATE_TABLE"], env["TASKS_TABLE"], *USER_ITEMS])
    assert deployment.deployed["schedule_groups"] == [PREFIX]  # it was there to delete


def test_plain_chalice_package_after_make_deploy_reads_the_recorded_stream(deployment: Deployment) -> None:
    """Chalice's own docs work once the stage is provisioned (before, app.py refuses: test_plain_chalice.py)."""
    functions = deployment.packaged["Resources"]
    streams = [event["Properties"]["Stream"] for resource in functions.values()
               for event in resource.get("Properties", {}).get("Events", {}).values() if event["Type"] == "DynamoDB"]
    assert sorted(streams) == sorted([deployment.env["TASKS_STREAM_ARN"],
                                      *json.loads(deployment.env["TASK_SOURCE_STREAMS"]).values()])
