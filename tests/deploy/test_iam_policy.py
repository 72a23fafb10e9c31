"""The committed policies, one per function and stage: wired in config.json, rendered from the
template, no wildcard actions, scoped resources, each function only what it needs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from chalice.config import Config
from chalice.deploy import models
from chalice.deploy.appgraph import ApplicationGraphBuilder

from chalicelib.settings import Settings
from deploy import iam, stage
from tests.policy_recorder import Call, Request, allowed, denied

ROOT = Path(__file__).resolve().parents[2]
WHERE = iam.Account("aws", "us-east-1", "123456789012")
# AWS has no narrower resource for these; the backup actions act on tables chosen at run time.
UNSCOPED = {"dynamodb:ListTables", "dynamodb:ListBackups", "dynamodb:ListStreams"}
ANY_TABLE = {"dynamodb:CreateBackup", "dynamodb:DescribeTable", "dynamodb:ListTagsOfResource",
             "dynamodb:DescribeBackup", "dynamodb:DeleteBackup", "dynamodb:DescribeContinuousBackups",
             "dynamodb:RestoreTableFromBackup"}  # restore: on the backups (its target table is named below)


def committed_policies(name: str) -> dict[str, iam.Policy]:
    """The stage's policy files, by the function config.json gives each to."""
    wiring = stage.policy_wiring(stage.load_config(), name)
    return {function: json.loads((ROOT / ".chalice" / file).read_text()) for function, file in wiring.items()}


def every_policy() -> list[tuple[str, iam.Policy]]:
    settings = replace(Settings.from_env(), task_action_target_arns=())  # the suite's own allow moto's account
    policies: list[tuple[str, iam.Policy]] = [
        (stage.policy_file(s, f), p) for s in stage.DEPLOYED_STAGES for f, p in committed_policies(s).items()]
    targets = ["arn:aws:sqs:us-east-1:123456789012:x"]
    policies += [(f"{f} (test stage)", p) for f, p in iam.function_policies(settings, WHERE, targets).items()]
    policies.append(("scheduler role", iam.scheduler_role_policy("arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:d")))
    return policies


def chalice_functions(name: str) -> dict[str, models.LambdaFunction]:
    """The Lambda functions ``chalice deploy --stage name`` builds from app.py and config.json."""
    import app as app_module

    config = Config(chalice_stage=name, config_from_disk=stage.load_config(),
                    user_provided_params={"chalice_app": app_module.app, "project_dir": str(ROOT)})
    graph = ApplicationGraphBuilder().build(config, name)
    found: dict[str, models.LambdaFunction] = {}
    pending: list[models.Model] = [graph]
    while pending:
        for resource in pending.pop().dependencies():
            if isinstance(resource, models.LambdaFunction):
                found[resource.resource_name] = resource
            pending.append(resource)
    return found


def test_dev_and_prod_give_each_function_its_own_policy_file_not_autogen() -> None:
    config = stage.load_config()
    for name in stage.DEPLOYED_STAGES:
        assert config["stages"][name]["autogen_policy"] is False
        stage.check_policy_wiring(config, name)
        for file in stage.policy_wiring(config, name).values():
            assert (ROOT / ".chalice" / file).exists(), file
    # No stale policy file (e.g. the former shared policy-<stage>.json) lies around unused.
    wired = {file for name in stage.DEPLOYED_STAGES for file in stage.policy_wiring(config, name).values()}
    assert {p.name for p in (ROOT / ".chalice").glob("policy-*.json")} == wired


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_chalice_gives_every_function_its_own_role_with_its_policy_file(name: str) -> None:
    functions = chalice_functions(name)
    assert set(functions) == set(iam.FUNCTIONS)  # app.py's handlers are the functions deploy/iam.py knows
    roles = set()
    for function, resource in functions.items():
        role = resource.role
        assert isinstance(role, models.ManagedIAMRole), function
        assert isinstance(role.policy, models.FileBasedIAMPolicy), function
        assert Path(role.policy.filename).resolve() == stage.policy_path(name, function), function
        roles.add(role.role_name)
    assert len(roles) == len(functions)


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_committed_policy_files_are_the_template_rendered_for_their_stage(name: str) -> None:
    expected = stage.stage_policies(stage.load_config(), name)
    assert committed_policies(name) == expected, f"run: python -m deploy.cli policy --stage {name}"


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


# The functions that may perform each of these actions: no other function's policy names it.
ONLY = {
    "iam:PassRole": {"task_stream"},
    "scheduler:CreateSchedule": {"task_stream"},
    "scheduler:DeleteSchedule": {"task_stream"},
    "dynamodb:GetRecords": {"task_stream"},
    "ses:SendEmail": {"task_executor"},
    # the monitor resumes a start whose trigger died (the start watch)
    "dynamodb:CreateBackup": {"backup_trigger", "backup_monitor", iam.API_HANDLER},
    "dynamodb:DeleteBackup": {"backup_monitor"},
    "dynamodb:ListBackups": {"backup_trigger", "backup_monitor", iam.API_HANDLER},
    "sqs:ReceiveMessage": {"backup_monitor", "task_executor", "due_dead_letter"},
    "sqs:DeleteMessage": {"backup_monitor", "task_executor", "due_dead_letter"},
    # the executor never deletes: it claims and settles on a record; the monitor only on its restore tables,
    # and only on a stage that verifies restores (dev and prod do not: BACKUP_VERIFY none)
    "dynamodb:DeleteItem": {iam.API_HANDLER},
    "dynamodb:RestoreTableFromBackup": set(),
    # the trigger deletes the temporary tables a dead verification left behind (by their names only)
    "dynamodb:DeleteTable": {"backup_trigger"},
}


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_restore_verification_touches_tables_only_by_the_stages_temporary_names(name: str) -> None:
    table_actions = {"dynamodb:DeleteTable", "dynamodb:Scan", "dynamodb:PutItem", "dynamodb:UpdateItem",
                     "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:Query", "dynamodb:GetItem"}
    policies = committed_policies(name)
    for function in ("backup_trigger", "backup_monitor"):
        for statement in policies[function]["Statement"]:
            if set(statement["Action"]) & {"dynamodb:DeleteTable", "dynamodb:Scan"}:
                assert statement["Resource"] == [f"arn:aws:dynamodb:*:*:table/timekeeper-{name}.verify.*"], statement
            elif set(statement["Action"]) & table_actions:
                assert all(f"table/timekeeper-{name}-" in r for r in statement["Resource"]), statement


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_each_function_gets_only_what_it_needs(name: str) -> None:
    policies = committed_policies(name)
    for action, functions in ONLY.items():
        assert {f for f, p in policies.items() if action in iam.actions_of(p, "Allow")} == functions, action
    for function, policy in policies.items():
        [logs] = [s for s in policy["Statement"] if s["Sid"] == "WriteLogs"]
        group = iam.function_log_group(stage.settings(stage.load_config(), name), function)
        assert all(f"log-group:{group}" in r and f"{group}-" not in r for r in logs["Resource"]), function


def test_the_stream_function_may_send_to_its_on_failure_queue() -> None:
    settings = Settings.from_env()
    policy = iam.function_policies(settings, WHERE, stream_on_failure_queue="stream-failures")["task_stream"]
    for queue in ("stream-failures", settings.task_dlq):
        assert allowed(policy, Request("sqs:SendMessage", f"arn:aws:sqs:us-east-1:123456789012:{queue}"))


def test_the_scheduler_role_may_only_send_to_the_due_queue_and_its_dead_letter_queue() -> None:
    policy = iam.scheduler_role_policy("arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:due-scheduler-dlq")
    [statement] = policy["Statement"]
    assert statement["Action"] == ["sqs:SendMessage"]
    assert statement["Resource"] == ["arn:aws:sqs:us-east-1:1:due", "arn:aws:sqs:us-east-1:1:due-scheduler-dlq"]


def test_the_scheduler_role_trusts_only_scheduler_of_its_own_account() -> None:
    [statement] = iam.scheduler_trust_policy(WHERE)["Statement"]
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}


def test_each_event_function_may_consume_its_own_queue_or_stream() -> None:
    from chalice.app import DynamoDBEventConfig, SQSEventConfig

    import app as app_module

    settings = Settings.from_env()
    policies = iam.function_policies(settings, WHERE)
    for source in app_module.app.event_sources:
        policy = policies[source.name]
        if isinstance(source, SQSEventConfig):
            arn = f"arn:aws:sqs:us-east-1:123456789012:{source.queue}"
            for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"):
                assert allowed(policy, Request(action, arn)), (source.name, action)
        if isinstance(source, DynamoDBEventConfig):
            for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"):
                assert allowed(policy, Request(action, settings.tasks_stream_arn)), (source.name, action)


def test_the_coverage_check_catches_a_missing_permission_and_a_foreign_resource() -> None:
    policy = iam.app_policy(Settings.from_env(), WHERE)  # the union, which calls of no single function get
    calls = [
        Call("dynamodb", "DeleteTable", (("TableName", "timekeeper-state"),), "chalicelib/x.py", "t"),
        Call("dynamodb", "PutItem", (("TableName", "someone-elses"),), "chalicelib/x.py", "t"),
        Call("sqs", "SendMessageBatch", (("QueueUrl", "http://q/123456789012/timekeeper-due"),), "x", "t"),
        Call("ses", "SendEmail", (("FromEmailAddress", "reminders@example.com"),), "x", "t"),
        Call("scheduler", "CreateSchedule", (("GroupName", "timekeeper"), ("Name", "t1"),
                                             ("RoleArn", "arn:aws:iam::123456789012:role/timekeeper-scheduler")), "x", "t"),
    ]
    problems = denied(policy, calls, "aws", "us-east-1", "123456789012")
    assert [(c.operation, r.resource.rsplit(":", 1)[-1]) for c, r in problems] == [
        ("DeleteTable", "table/timekeeper-state"), ("PutItem", "table/someone-elses")]


def test_task_executor_may_send_to_exactly_the_stages_action_targets() -> None:
    targets = "arn:aws:sqs:us-east-1:123456789012:orders,arn:aws:sns:us-east-1:123456789012:team-*"
    settings = Settings.from_env({"TASK_ACTION_TARGET_ARNS": targets})
    policies = iam.function_policies(settings, WHERE)
    granted = {(action, resource) for statement in policies["task_executor"]["Statement"]
               for action in statement["Action"] for resource in statement["Resource"]
               if action in ("sqs:SendMessage", "sns:Publish") and "timekeeper" not in resource}
    assert granted == {("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:orders"),
                       ("sns:Publish", "arn:aws:sns:us-east-1:123456789012:team-*")}
    for name, policy in policies.items():
        if name != "task_executor":
            assert "orders" not in json.dumps(policy) and "team-" not in json.dumps(policy), name


def test_the_action_targets_set_in_the_deploys_environment_are_refused_not_ignored() -> None:
    with pytest.raises(ValueError, match="stage setting"):
        iam.action_targets_from({"TASK_ACTION_TARGET_ARNS": "arn:aws:sqs:us-east-1:123456789012:orders"})
    assert iam.action_targets_from({"TASK_ACTION_TARGET_ARNS": ""}) == []


def test_a_wildcard_target_never_reaches_the_apps_own_queues_the_executor_does_not_use_itself() -> None:
    settings = Settings.from_env({"TASK_ACTION_TARGET_ARNS": "arn:aws:sqs:*:*:*,arn:aws:sns:*:*:*"})
    policy = iam.function_policies(settings, WHERE)["task_executor"]

    def may(action: str, service: str, name: str) -> bool:
        return allowed(policy, Request(action, f"arn:aws:{service}:us-east-1:123456789012:{name}"))

    used = {settings.due_queue, settings.task_dlq}  # re-queue hops, dead letters
    for queue in settings.own_queues():
        assert may("sqs:SendMessage", "sqs", queue) is (queue in used), queue
    assert settings.due_dlq not in used and settings.scheduler_dlq not in used
    # The alert topic is the only own topic and the executor publishes its alerts there: no Deny can cover it
    # (the app refuses it as a target: chalicelib/tasks/actions/targets.py).
    assert settings.own_topics() == (settings.alert_topic,)
    assert may("sns:Publish", "sns", settings.alert_topic)
    assert may("sqs:SendMessage", "sqs", "orders") and may("sns:Publish", "sns", "team")
    [deny] = [s for s in policy["Statement"] if s["Effect"] == "Deny" and s["Sid"] == "DenyOwnQueues"]
    assert deny["Action"] == ["sqs:SendMessage"]
    assert sorted(deny["Resource"]) == sorted(
        f"arn:aws:sqs:us-east-1:123456789012:{q}" for q in settings.own_queues() if q not in used)


def test_the_executor_may_call_the_listed_functions_buses_and_state_machines_never_the_apps_own_functions() -> None:
    settings = Settings.from_env({"STAGE": "prod", "TASK_ACTION_TARGET_ARNS": (
        "arn:aws:lambda:*:*:function:*,arn:aws:events:*:*:event-bus/orders,arn:aws:states:*:*:stateMachine:ship")})
    policy = iam.function_policies(settings, WHERE)["task_executor"]

    def may(action: str, resource: str) -> bool:
        return allowed(policy, Request(action, f"arn:aws:{resource}"))

    assert may("lambda:InvokeFunction", "lambda:us-east-1:123456789012:function:billing")
    assert may("lambda:InvokeFunction", "lambda:us-east-1:123456789012:function:billing:live")
    for own in ("timekeeper-prod", "timekeeper-prod:live", "timekeeper-prod-task_executor",
                "timekeeper-prod-source_orders"):
        assert not may("lambda:InvokeFunction", f"lambda:us-east-1:123456789012:function:{own}"), own
    assert may("events:PutEvents", "events:us-east-1:123456789012:event-bus/orders")
    assert not may("events:PutEvents", "events:us-east-1:123456789012:event-bus/default")
    assert may("states:StartExecution", "states:us-east-1:123456789012:stateMachine:ship")
    assert not may("states:StartExecution", "states:us-east-1:123456789012:stateMachine:other")


@pytest.mark.parametrize("name", stage.DEPLOYED_STAGES)
def test_the_committed_executor_policy_denies_the_own_queues_it_does_not_use(name: str) -> None:
    settings = stage.settings(stage.load_config(), name)
    [deny] = [s for s in committed_policies(name)["task_executor"]["Statement"]
              if s["Effect"] == "Deny" and s["Sid"] == "DenyOwnQueues"]
    denied_names = {r.rsplit(":", 1)[-1] for r in deny["Resource"]}
    assert denied_names == set(settings.own_queues()) - {settings.due_queue, settings.task_dlq}
    assert settings.due_dlq in denied_names


def test_the_recorders_evaluation_lets_an_explicit_deny_win_over_any_allow() -> None:
    policy = {"Statement": [
        {"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": ["arn:aws:sqs:*:*:*"]},
        {"Effect": "Deny", "Action": ["sqs:SendMessage"], "Resource": ["arn:aws:sqs:*:*:mine"]}]}
    assert allowed(policy, Request("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:theirs"))
    assert not allowed(policy, Request("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:mine"))
    assert denied(policy, [Call("sqs", "SendMessage", (("QueueUrl", "http://q/123456789012/mine"),), "x", "t")],
                  "aws", "us-east-1", "123456789012")


def restore_grants(**environment: str) -> list[str]:
    """The backups restore verification's RestoreTableFromBackup (backup_monitor's) may restore on a stage with
    ``environment``."""
    policy = iam.function_policies(Settings.from_env(environment), WHERE)["backup_monitor"]
    return [r for st in policy["Statement"] if st["Sid"] == "RestoreBackups" for r in st["Resource"] if "/backup/" in r]


def test_a_stage_that_does_not_verify_restores_never_touches_a_verification_table() -> None:
    settings = Settings.from_env({"BACKUP_VERIFY": "none", "BACKUP_TABLE_PATTERN": ".*"})
    policy = iam.function_policies(settings, WHERE)["backup_monitor"]
    assert ".verify." not in json.dumps(policy)
    backup = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/backup/01700000000000-abcdef12"
    assert not allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}timekeeper-local.verify.x.orders"))
    assert allowed(policy, Request("dynamodb:RestoreTableFromBackup", backup))  # restore on demand's


def test_a_stage_that_selects_no_table_and_does_not_verify_may_not_restore() -> None:
    policies = iam.function_policies(Settings.from_env({"BACKUP_VERIFY": "none"}), WHERE)
    for policy in policies.values():
        assert not {"dynamodb:RestoreTableFromBackup", "dynamodb:RestoreTableToPointInTime"} & set(iam.actions_of(policy))


def test_restore_on_demand_is_granted_on_the_selections_tables_and_the_target_pattern_only() -> None:
    settings = Settings.from_env({"BACKUP_TABLES": "orders", "BACKUP_API_TABLES": "audit"})
    policies = iam.function_policies(settings, WHERE)
    api, monitor = policies[iam.API_HANDLER], policies["backup_monitor"]
    backup = f"{B}orders/backup/01700000000000-abcdef12"
    for policy in (api, monitor):
        assert allowed(policy, Request("dynamodb:RestoreTableFromBackup", backup))
        assert allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}orders-restored-1"))
        assert allowed(policy, Request("dynamodb:RestoreTableToPointInTime", f"{B}audit"))
        assert allowed(policy, Request("dynamodb:PutItem", f"{B}audit-restored-x"))
        assert not allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}secrets/backup/01700000000000-a"))
        assert not allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}orders-copy"))
        assert not allowed(policy, Request("dynamodb:RestoreTableToPointInTime", f"{B}secrets"))
        assert not allowed(policy, Request("dynamodb:PutItem", f"{B}orders"))
    for action in ("UpdateTable", "UpdateTimeToLive", "UpdateContinuousBackups", "TagResource"):
        assert allowed(monitor, Request(f"dynamodb:{action}", f"{B}orders-restored-1"))
        assert not allowed(monitor, Request(f"dynamodb:{action}", f"{B}orders"))
        assert not allowed(api, Request(f"dynamodb:{action}", f"{B}orders-restored-1"))
    for function in ("backup_trigger", "task_stream", "interval_processor", "task_executor", "due_dead_letter"):
        assert not allowed(policies[function], Request("dynamodb:RestoreTableFromBackup", backup))


B = "arn:aws:dynamodb:us-east-1:123456789012:table/"


@pytest.mark.parametrize("environment, grants", [
    ({"BACKUP_VERIFY": "orders,users", "BACKUP_TABLE_PATTERN": ".*"}, [f"{B}orders/backup/*", f"{B}users/backup/*"]),
    ({"BACKUP_VERIFY": "2", "BACKUP_TABLES": "orders,users", "BACKUP_API_TABLES": "audit"},
     [f"{B}orders/backup/*", f"{B}users/backup/*", f"{B}audit/backup/*"]),
    # a pattern or a tag selects tables whose names are not known when the policy is written
    ({"BACKUP_VERIFY": "2", "BACKUP_TABLES": "orders", "BACKUP_TABLE_PATTERN": "app-.*"}, [f"{B}*/backup/*"]),
    ({"BACKUP_VERIFY": "1", "BACKUP_TABLE_TAG": "backup=daily"}, [f"{B}*/backup/*"]),
    ({"BACKUP_VERIFY": "none", "BACKUP_TABLES": "orders"}, []),
])
def test_restore_is_granted_only_on_the_backups_of_the_tables_a_verifying_stage_may_verify(
        environment: dict[str, str], grants: list[str]) -> None:
    assert restore_grants(**environment) == grants


def test_a_stage_verifying_named_tables_may_restore_their_backups_and_no_other() -> None:
    settings = Settings.from_env({"BACKUP_VERIFY": "1", "BACKUP_TABLES": "orders"})
    policy = iam.function_policies(settings, WHERE)["backup_monitor"]
    assert allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}orders/backup/01700000000000-abcdef12"))
    assert not allowed(policy, Request("dynamodb:RestoreTableFromBackup", f"{B}secrets/backup/01700000000000-abc"))
    restore_table = f"{B}{settings.backup_name_prefix}.verify.20261122T120000Z-abc.orders"
    assert allowed(policy, Request("dynamodb:Scan", restore_table))
    assert not allowed(policy, Request("dynamodb:Scan", f"{B}orders"))


def test_a_restore_targets_pattern_never_reaches_the_apps_own_tables() -> None:
    """A pattern that covers the app's own tables (`timekeeper-*`, on a stage selecting tables by pattern):
    the restore's actions are denied there, but for what the function is granted there otherwise."""
    source = {"table": "timekeeper-appointments", "strategy": "exact", "due_attribute": "due"}
    stream = f"{B}timekeeper-appointments/stream/2026-01-01T00:00:00.000"
    settings = Settings.from_env({
        "BACKUP_TABLE_PATTERN": ".*", "RESTORE_TARGET_PATTERN": "timekeeper-*",
        "TASK_SOURCES": json.dumps({"appointments": source}), "TASK_SOURCE_STREAMS": json.dumps({"appointments": stream})})
    own = [f"{B}{name}" for name in settings.own_tables()]
    assert len(own) == 3 and f"{B}timekeeper-appointments" in own
    policies = iam.function_policies(settings, WHERE)
    for function in (iam.API_HANDLER, "backup_monitor"):
        policy = policies[function]
        denied_arns = {r for st in policy["Statement"] if st["Effect"] == "Deny" and "Restores" in st["Sid"]
                       for r in st["Resource"]}
        assert denied_arns == set(own), function
        assert allowed(policy, Request("dynamodb:PutItem", f"{B}timekeeper-restored-1"))
        assert allowed(policy, Request("dynamodb:Scan", f"{B}timekeeper-restored-1"))
        for arn in own:
            for action in ("Scan", "RestoreTableFromBackup", "RestoreTableToPointInTime"):
                listing = (function, action, arn) == (iam.API_HANDLER, "Scan", f"{B}{settings.state_table}")
                assert allowed(policy, Request(f"dynamodb:{action}", arn)) is listing, (function, action, arn)
        assert not allowed(policy, Request("dynamodb:BatchWriteItem", f"{B}{settings.tasks_table}"))
    api, monitor = policies[iam.API_HANDLER], policies["backup_monitor"]
    assert allowed(api, Request("dynamodb:PutItem", f"{B}{settings.state_table}"))  # its own writes stay
    assert allowed(api, Request("dynamodb:DeleteItem", f"{B}{settings.tasks_table}"))
    assert not allowed(api, Request("dynamodb:PutItem", f"{B}timekeeper-appointments"))
    assert allowed(monitor, Request("dynamodb:UpdateItem", f"{B}{settings.state_table}"))
    for action in ("PutItem", "UpdateItem", "DeleteItem", "UpdateTable", "TagResource"):
        assert not allowed(monitor, Request(f"dynamodb:{action}", f"{B}{settings.tasks_table}")), action


def test_exports_get_their_actions_on_the_selection_and_the_stage_prefix_only_and_nothing_that_unlocks() -> None:
    settings = replace(Settings.from_env(), task_action_target_arns=(), export_bucket="vault",
                       export_prefix="timekeeper-prod", export_tables=("orders", "users"), backup_tables=("orders",))
    policies = iam.function_policies(settings, WHERE)
    assert "export_trigger" in policies and "export_trigger" not in iam.function_policies(
        replace(settings, export_bucket=""), WHERE)  # a stage without EXPORT_BUCKET has no export function
    objects = "arn:aws:s3:::vault/timekeeper-prod/*"
    for function, policy in policies.items():
        for statement in policy["Statement"]:
            actions = set(statement["Action"])
            assert not actions & {"s3:BypassGovernanceRetention", "s3:PutBucketObjectLockConfiguration",
                                  "s3:PutBucketPolicy", "s3:DeleteBucket"}, (function, statement)
            if actions & {"dynamodb:ExportTableToPointInTime"}:
                assert statement["Resource"] == [WHERE.arn("dynamodb", "table/orders"),
                                                 WHERE.arn("dynamodb", "table/users")], statement
            if actions & {"dynamodb:ImportTable"} and statement["Effect"] == "Allow":  # a new table: a target only
                assert statement["Resource"] == [WHERE.arn("dynamodb", "table/orders-restored-*")], statement
            object_actions = {a for a in actions if a.startswith("s3:") and "Bucket" not in a}
            if object_actions:
                assert statement["Resource"] == [objects], statement
            elif actions & {"s3:ListBucket", "s3:ListBucketVersions"}:
                assert statement["Condition"] == {"StringLike": {"s3:prefix": ["timekeeper-prod/*"]}}, statement
    granted = {a for p in policies.values() for s in p["Statement"] for a in s["Action"]}
    assert {"dynamodb:ExportTableToPointInTime", "dynamodb:ImportTable", "s3:GetObject", "s3:PutObject", "s3:PutObjectRetention",
            "s3:DeleteObjectVersion"} <= granted


def test_the_bucket_policy_for_another_accounts_bucket_is_rendered_and_a_wrong_one_refused() -> None:
    from deploy.cli import export_bucket_note

    settings = replace(Settings.from_env(), stage="prod", export_bucket="vault", export_bucket_owner="210987654321",
                       export_prefix="timekeeper-prod")
    note = export_bucket_note(settings, WHERE)
    policy = json.loads(note[note.index("{"):])
    assert iam.export_bucket_policy_problems(policy, settings) == []
    (objects, listing, lock) = policy["Statement"]
    assert objects["Resource"] == ["arn:aws:s3:::vault/timekeeper-prod/*"]
    assert objects["Principal"]["AWS"] == [f"arn:aws:iam::123456789012:role/timekeeper-prod-{f}"
                                           for f in ("export_trigger", "backup_monitor", "api_handler")]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["timekeeper-prod/*"]}}
    assert lock["Action"] == ["s3:GetBucketObjectLockConfiguration"]

    objects["Action"].append("s3:BypassGovernanceRetention")
    objects["Resource"] = ["arn:aws:s3:::vault/*"]
    del listing["Condition"]
    assert iam.export_bucket_policy_problems(policy, settings) == [
        "TimekeeperExportObjects: grants s3:BypassGovernanceRetention",
        "TimekeeperExportObjects: object actions on arn:aws:s3:::vault/*, outside timekeeper-prod/",
        "TimekeeperListExports: lists the whole bucket (no s3:prefix condition)"]
