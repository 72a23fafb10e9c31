"""``make deploy`` / ``make destroy``: a stage on AWS, from the usual credential chain.

    python -m deploy.cli deploy  --stage prod
    python -m deploy.cli destroy --stage prod [--confirm prod] [--delete-data]
    python -m deploy.cli policy  --stage prod            # render .chalice/policy-prod-<function>.json
    python -m deploy.cli template                        # render deploy/resources.json (prod)
    python -m deploy.cli package --stage prod OUT_DIR    # chalice package + merge template
    python -m deploy.cli replay-stream-failures --stage prod   # stream batches Lambda gave up on

deploy: provision() the stage's resources (the same idempotent function the
local runtime uses), write their names and ARNs into the stage's
environment_variables, render each function's policy file from them, run
``chalice deploy`` (its package ships compiled bytecode: deploy/bytecode.py),
then apply the event-source settings Chalice lacks. Every step only changes
what differs, so a second run reports no changes.

Credentials and region come from boto3's chain (AWS_PROFILE, AWS_REGION,
...); nothing secret is written to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from chalicelib.aws import Clients, Deps
from chalicelib.settings import Settings
from deploy import api_gateway, event_sources, iam, observability, replay, stage, task_sources, template
from deploy.provision import (
    SCHEDULER_ROLE_POLICY,
    cloudwatch_client,
    dead_letter_queues,
    deploy_client,
    dlq_alarm_name,
    iam_client,
    provision,
)

DEPLOYABLE_AUTH = ("iam", "api_key", "cognito")
RunChalice = Callable[[Sequence[str], Path], None]
PackageChalice = Callable[[Sequence[str], Path, Mapping[str, str]], None]  # and the environment to run it in


class DeployError(RuntimeError):
    pass


@dataclass
class Report:
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # printed; the command then exits 1
    notes: list[str] = field(default_factory=list)     # printed only


def chalice_command(args: Sequence[str]) -> list[str]:
    """The ``chalice`` command line whose deployment packages ship compiled bytecode (deploy/bytecode.py).

    Run in the project directory, which stays first on the path for the app's imports; this checkout
    is appended for ``deploy.bytecode`` itself.
    """
    boot = (f"import sys; sys.path.append({str(stage.PROJECT)!r}); "
            f"from deploy.bytecode import main; sys.exit(main())")
    return [sys.executable, "-c", boot, *args]


def run_chalice(args: Sequence[str], project: Path, env: Mapping[str, str] | None = None) -> None:
    subprocess.run(chalice_command(args), cwd=project, check=True, env=None if env is None else dict(env))


def package_region(environ: Mapping[str, str], config: Mapping[str, Any], name: str) -> str:
    """The region ``chalice package`` runs in (its session refuses to start without one; the template it
    writes names none): the shell's AWS_DEFAULT_REGION or AWS_REGION, else the stage's AWS_REGION, else the
    app's default (chalicelib/settings.py)."""
    return (environ.get("AWS_DEFAULT_REGION") or environ.get("AWS_REGION")
            or stage.environment(config, name).get("AWS_REGION") or stage.settings(config, name).region)


def _region(session: boto3.session.Session) -> str:
    region = session.region_name
    if not region:
        raise DeployError("no AWS region: set AWS_REGION (or a region in the AWS_PROFILE's config)")
    return region


def check_deployable(config: Mapping[str, Any], name: str) -> None:
    if name == "local":
        raise DeployError("the local stage runs offline (make run); deploy dev or prod")
    api_auth = stage.environment(config, name).get("API_AUTH", "none")
    if api_auth not in DEPLOYABLE_AUTH:
        raise DeployError(f"stage {name} has API_AUTH={api_auth!r}; a deployed stage needs one of "
                          f"{', '.join(DEPLOYABLE_AUTH)} (set it in .chalice/config.json)")


def check_policies_wired(config: Mapping[str, Any], name: str) -> None:
    """Chalice will give each function the policy file deploy/iam.py renders for it."""
    if config["stages"][name].get("autogen_policy") is not False:
        raise DeployError(f"stage {name} must set autogen_policy: false (its functions run under "
                          f"the policies deploy/iam.py renders)")
    try:
        stage.check_policy_wiring(config, name)
    except ValueError as exc:
        raise DeployError(str(exc)) from exc


def check_backup_prefixes(config: Mapping[str, Any]) -> None:
    """No two stages of .chalice/config.json may name backups so that one's retention takes the other's."""
    conflicts = stage.backup_prefix_conflicts(stage.backup_prefixes(config))
    if conflicts:
        raise DeployError("; ".join(conflicts) + " (give each stage its own BACKUP_NAME_PREFIX, or leave it "
                          "empty for timekeeper-<STAGE>)")


def export_bucket_note(settings: Settings, where: iam.Account) -> str:
    """The bucket policy EXPORT_BUCKET's owner must apply (docs/deploying.md), validated; a DeployError if the
    rendered policy would grant what it must not."""
    policy = iam.export_bucket_policy(settings, where)
    problems = iam.export_bucket_policy_problems(policy, settings)
    if problems:
        raise DeployError("the export bucket policy is wrong: " + "; ".join(problems))
    return (f"EXPORT_BUCKET {settings.export_bucket} belongs to account {settings.export_bucket_owner}: its owner "
            f"applies this bucket policy (aws s3api put-bucket-policy):\n{json.dumps(policy, indent=2)}")


def _queue_arn(clients: Clients, name: str) -> str:
    url = clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
    return clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def lambda_client(clients: Clients) -> Any:
    return deploy_client(clients, "lambda")


def streams_client(clients: Clients) -> Any:
    return deploy_client(clients, "dynamodbstreams")


def deploy(name: str, session: boto3.session.Session, environ: Mapping[str, str],
           project: Path = stage.PROJECT, chalice: RunChalice = run_chalice) -> Report:
    """Provision, record, render the functions' policies, chalice deploy, apply event-source settings and the
    API's gateway responses and throttling."""
    config = stage.load_config(project)
    check_deployable(config, name)
    check_policies_wired(config, name)
    check_backup_prefixes(config)
    options = event_sources.EventSourceOptions.from_env(environ)
    targets = iam.action_targets_from(environ)
    settings = stage.settings(config, name, _region(session))
    clients = Clients(settings, session=session)
    report = Report()

    provisioned = provision(clients, settings)
    report.changes += provisioned.changes
    if settings.task_sources:  # the users' tables: checked, and changed only where a source opts in
        try:
            streams, source_changes = task_sources.prepare_sources(clients.dynamodb, settings)
        except task_sources.SourceRefused as exc:
            raise DeployError(str(exc)) from exc
        report.changes += source_changes
        provisioned.environment["TASK_SOURCE_STREAMS"] = json.dumps(streams, sort_keys=True)
    changed = stage.record_environment(name, provisioned.environment, project)
    report.changes += [f"config.json: {name}.{variable}" for variable in changed]
    env = stage.environment(stage.load_config(project), name)
    rendered = stage.render_policies(name, targets, iam.Account.from_environment(env), project,
                                     options.stream_on_failure_queue)
    report.changes += [f"rendered .chalice/{file}" for file in rendered]
    if settings.export_bucket_owner:  # another account's bucket: the policy its owner must put on it, checked
        report.notes.append(export_bucket_note(settings, iam.Account.from_environment(env)))

    chalice(["deploy", "--stage", name], project)

    deployed = project / ".chalice" / "deployed" / f"{name}.json"
    mappings = event_sources.deployed_mappings(deployed) if deployed.exists() else []
    on_failure = _queue_arn(clients, options.stream_on_failure_queue or settings.task_dlq)
    report.changes += event_sources.apply(lambda_client(clients), mappings, options, on_failure,
                                          settings.executor_max_concurrency)
    rest_api_id = api_gateway.deployed_rest_api(json.loads(deployed.read_text())) if deployed.exists() else None
    if rest_api_id:
        api_stage = str(config["stages"][name].get("api_gateway_stage", "api"))
        report.changes += api_gateway.apply(deploy_client(clients, "apigateway"), rest_api_id, api_stage, settings)
    return report


def destroy_resources(clients: Clients, settings: Settings, delete_data: bool) -> list[str]:
    """Delete what provision() made (tables only with ``delete_data``); missing ones are skipped."""
    changes: list[str] = []

    def gone(exc: ClientError) -> bool:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return code in ("ResourceNotFoundException", "ResourceNotFound", "NoSuchEntity", "NotFoundException",
                        "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")

    def attempt(what: str, call: Callable[[], Any]) -> None:
        try:
            call()
            changes.append(f"deleted {what}")
        except ClientError as exc:
            if not gone(exc):
                raise

    for queue in settings.own_queues():  # every queue the stage provisions (settings.OWN_QUEUES)
        attempt(f"queue {queue}", lambda q=queue: clients.sqs.delete_queue(  # type: ignore[misc]
            QueueUrl=clients.sqs.get_queue_url(QueueName=q)["QueueUrl"]))
    alarms = [dlq_alarm_name(q) for q in dead_letter_queues(settings, {})] + [
        a["AlarmName"] for a in observability.metric_alarms(settings, "")]
    attempt(f"alarms {', '.join(alarms)}", lambda: cloudwatch_client(clients).delete_alarms(AlarmNames=alarms))
    dashboard = observability.dashboard_name(settings)
    attempt(f"dashboard {dashboard}", lambda: cloudwatch_client(clients).delete_dashboards(DashboardNames=[dashboard]))
    topics = settings.own_topics()
    for page in clients.sns.get_paginator("list_topics").paginate():
        for arn in [t["TopicArn"] for t in page.get("Topics", []) if t["TopicArn"].rsplit(":", 1)[-1] in topics]:
            attempt(f"topic {arn.rsplit(':', 1)[-1]}", lambda a=arn: clients.sns.delete_topic(TopicArn=a))  # type: ignore[misc]
    attempt(f"schedule group {settings.schedule_group}",
            lambda: clients.scheduler.delete_schedule_group(Name=settings.schedule_group))
    role = iam.scheduler_role_name(settings)
    client = iam_client(clients)
    attempt(f"policy of role {role}", lambda: client.delete_role_policy(RoleName=role, PolicyName=SCHEDULER_ROLE_POLICY))
    attempt(f"role {role}", lambda: client.delete_role(RoleName=role))
    if delete_data:
        for table in (settings.state_table, settings.tasks_table):
            attempt(f"table {table}", lambda t=table: clients.dynamodb.delete_table(TableName=t))  # type: ignore[misc]
    return changes


def destroy(name: str, session: boto3.session.Session, confirm: str | None, delete_data: bool,
            project: Path = stage.PROJECT, chalice: RunChalice = run_chalice,
            ask: Callable[[str], str] = input) -> Report:
    config = stage.load_config(project)
    check_deployable(config, name)
    typed = confirm if confirm is not None else ask(
        f"This deletes stage {name!r} ({'and its data tables' if delete_data else 'tables are kept'}). "
        f"Type the stage name to go on: ")
    if typed.strip() != name:
        raise DeployError(f"not confirmed (typed {typed.strip()!r}, expected {name!r}); nothing deleted")
    settings = stage.settings(config, name, _region(session))
    clients = Clients(settings, session=session)
    if (project / ".chalice" / "deployed" / f"{name}.json").exists():
        chalice(["delete", "--stage", name], project)
    return Report(destroy_resources(clients, settings, delete_data))


def replay_stream_failures(name: str, session: boto3.session.Session, environ: Mapping[str, str],
                           project: Path = stage.PROJECT) -> Report:
    """Replay the stream batches whose positions Lambda sent to the stream's on-failure queue."""
    config = stage.load_config(project)
    options = event_sources.EventSourceOptions.from_env(environ)
    settings = stage.settings(config, name, session.region_name or None)
    missing = [v for v, value in (("TASKS_STREAM_ARN", settings.tasks_stream_arn),
                                  ("SCHEDULER_ROLE_ARN", settings.scheduler_role_arn)) if not value]
    if missing:
        raise DeployError(f"stage {name} has no {' or '.join(missing)} in .chalice/config.json: deploy it first")
    clients = Clients(settings, session=session)
    result = replay.replay_stream_failures(Deps(settings=settings, clients=clients), streams_client(clients),
                                           options.stream_on_failure_queue or settings.task_dlq)
    notes = [f"{result.other_messages} other message(s) left in the queue (dead letters to inspect)"] \
        if result.other_messages else []
    return Report(result.changes, result.problems, notes)


def render_template(environ: Mapping[str, str], project: Path = stage.PROJECT, name: str = "prod") -> dict[str, Any]:
    """The merge template of stage ``name``: its resources and app.py's event-source settings."""
    import app as app_module

    settings = stage.settings(stage.load_config(project), name)
    return template.with_event_settings(template.resources(settings), app_module.app, settings,
                                       event_sources.EventSourceOptions.from_env(environ))


def package(name: str, out: Path, environ: Mapping[str, str], project: Path = stage.PROJECT,
            chalice: PackageChalice = run_chalice) -> None:
    """``chalice package`` with the stage's merge template (and compiled bytecode, as ``deploy``), in
    ``environ`` with its region defaulted (``package_region``)."""
    merge = render_template(environ, project, name)
    env = {**environ, "AWS_DEFAULT_REGION": package_region(environ, stage.load_config(project), name)}
    with tempfile.TemporaryDirectory() as tmp:
        merge_file = Path(tmp) / "merge.json"
        merge_file.write_text(json.dumps(merge, indent=2))
        chalice(["package", "--stage", name, "--merge-template", str(merge_file), str(out)], project, env)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.cli", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("deploy", "destroy", "policy", "package", "replay-stream-failures", "export-bucket-policy"):
        sub = commands.add_parser(command)
        sub.add_argument("--stage", required=True)
        if command == "destroy":
            sub.add_argument("--confirm", default=os.environ.get("CONFIRM") or None)
            sub.add_argument("--delete-data", action="store_true", default=os.environ.get("DELETE_DATA") == "1")
        if command == "package":
            sub.add_argument("out", type=Path)
    commands.add_parser("template")
    args = parser.parse_args(argv)
    try:
        if args.command == "deploy":
            report = deploy(args.stage, boto3.session.Session(), os.environ)
        elif args.command == "destroy":
            report = destroy(args.stage, boto3.session.Session(), args.confirm, args.delete_data)
        elif args.command == "policy":
            targets = iam.action_targets_from(os.environ)
            on_failure = event_sources.EventSourceOptions.from_env(os.environ).stream_on_failure_queue
            rendered = stage.render_policies(args.stage, targets, stream_on_failure_queue=on_failure)
            report = Report([f"rendered .chalice/{file}" for file in rendered])
        elif args.command == "export-bucket-policy":
            config = stage.load_config()
            settings = stage.settings(config, args.stage, os.environ.get("AWS_REGION", "us-east-1"))
            where = iam.Account.from_environment(stage.environment(config, args.stage))
            print(export_bucket_note(settings, where))
            report = Report()
        elif args.command == "replay-stream-failures":
            report = replay_stream_failures(args.stage, boto3.session.Session(), os.environ)
        elif args.command == "template":
            changed = stage.write_json(stage.PROJECT / "deploy" / "resources.json", render_template(os.environ))
            report = Report(["rendered deploy/resources.json"] if changed else [])
        else:
            package(args.stage, args.out, os.environ)
            report = Report()
    except (DeployError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for change in report.changes:
        print(f"changed: {change}")
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in report.problems:
        print(f"problem: {problem}", file=sys.stderr)
    print(f"{len(report.changes)} change(s)")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
