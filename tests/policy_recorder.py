"""Record every AWS call the app's code makes during the suite; check each against its function's policy.

``RECORDER.attach(session)`` hooks botocore's ``before-parameter-build`` on the
session the test clients come from. A call counts only when app code (app.py
or chalicelib/) is on the stack, so test setup and provisioning through the
same clients are not counted. tests/deploy/test_zz_policy_coverage.py, which
runs last, maps each call to IAM actions and resource ARNs and evaluates them
against the policy of the Lambda function that made it (deploy/iam.py).

Which function made a call (``attribute``), in this order:

1. The innermost app.py frame on the stack that is a Lambda entry point: a
   route's view function is the API function (``api_handler``), an event
   handler is the function of its name (``backup_trigger``, ``task_stream``...).
   This covers everything the tests drive through chalice.test's Client (``client.http``,
   ``client.lambda_.invoke``).
2. Otherwise (a test calls chalicelib directly, or a worker thread the handler
   started), the outermost chalicelib frame on the stack, i.e. the entry
   module the caller went through: ``backups/trigger.py`` backup_trigger,
   ``backups/monitor.py`` backup_monitor, ``tasks/stream.py`` task_stream,
   ``tasks/interval.py`` interval_processor, ``tasks/executor.py`` and every
   module of ``tasks/actions/`` task_executor, ``backups/api.py`` and ``tasks/api.py``
   the API function (``ENTRY_MODULES``).
3. Otherwise (a shared module called directly: a store, alerts, dead letters)
   no single function: the call is checked against the union of the
   functions' policies (it must be allowed to at least one of them).
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlparse

import boto3

from chalicelib.settings import Settings
from chalicelib.sources import TaskSource
from deploy import iam

ROOT = Path(__file__).resolve().parents[1]
APP_CODE = (str(ROOT / "chalicelib") + "/", str(ROOT / "app.py"))
ACTION_MODULES = frozenset(str(path) for path in (ROOT / "chalicelib" / "tasks" / "actions").glob("*.py"))
API_FUNCTION = "api_handler"  # Chalice's name for the REST API's Lambda function
# Rule 2 of ``attribute``: a chalicelib entry module and the function that runs it.
ENTRY_MODULES = {
    str(ROOT / "chalicelib" / path): function for path, function in (
        ("backups/trigger.py", "backup_trigger"), ("backups/monitor.py", "backup_monitor"),
        ("backups/api.py", API_FUNCTION), ("tasks/api.py", API_FUNCTION),
        ("tasks/stream.py", "task_stream"), ("tasks/interval.py", "interval_processor"),
        ("tasks/executor.py", "task_executor"), ("tasks/webhook.py", "task_executor"),
        ("tasks/dead_letters.py", "due_dead_letter"), ("backups/restore.py", API_FUNCTION),
        ("backups/exports.py", "export_trigger"),
    )
} | dict.fromkeys(ACTION_MODULES, "task_executor")


@dataclass(frozen=True)
class Call:
    service: str        # IAM prefix: dynamodb, sqs, sns, ses, scheduler
    operation: str      # API operation: PutItem, SendMessage...
    params: tuple[tuple[str, str], ...]  # the few parameters that name resources
    origin: str         # innermost app-code file on the stack
    test: str
    settings: Settings | None = None  # what the app ran with: the policy is rendered from them
    function: str = ""  # the Lambda function whose policy applies ("": any of them, see ``attribute``)
    via: str = ""       # what the attribution rests on: app.py:<handler> or a chalicelib module


@dataclass
class Recorder:
    calls: set[Call] = field(default_factory=set)

    def attach(self, session: boto3.session.Session) -> None:
        session.events.register("before-parameter-build", self._record)

    def _record(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        stack: list[tuple[str, str]] = []  # (file, function) of the app-code frames, innermost first
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(APP_CODE[0]):
                stack.append((filename, frame.f_code.co_name))
            elif filename == APP_CODE[1]:
                stack.append((filename, _app_function(frame)))
            frame = frame.f_back  # type: ignore[assignment]
        if not stack:
            return
        function, via = attribute(stack)
        service = model.service_model.signing_name
        self.calls.add(Call(service, model.name, _naming_params(params), stack[0][0], _current_test(),
                            _running_settings(), function, via))


def _app_function(frame: FrameType) -> str:
    """The name of an app.py frame's function: a task source's stream function (app.py binds one per source,
    all of one ``def``) by the source its closure holds, any other by its code's name."""
    source = frame.f_locals.get("source") if frame.f_code.co_name == "stream_of_source" else None
    return source.function_name if isinstance(source, TaskSource) else frame.f_code.co_name


def entry_points() -> dict[str, str]:
    """app.py's Lambda entry points: Python function name -> Lambda function name."""
    import app as app_module

    app = app_module.app
    out = {entry.view_function.__name__: API_FUNCTION
           for methods in app.routes.values() for entry in methods.values()}
    for source in app.event_sources:
        out[source.handler_string.rsplit(".", 1)[-1]] = source.name
    for authorizer in app.builtin_auth_handlers:
        out[authorizer.handler_string.rsplit(".", 1)[-1]] = authorizer.name
    settings = _running_settings()
    for task_source in settings.task_sources if settings is not None else ():  # app.py binds one per source
        out[task_source.function_name] = task_source.function_name
    return out


def attribute(stack: list[tuple[str, str]]) -> tuple[str, str]:
    """(function, reason) for app-code frames ``stack`` (innermost first); the rules are in the module doc."""
    handlers = entry_points()
    for filename, name in stack:
        if filename == APP_CODE[1] and name in handlers:
            return handlers[name], f"app.py:{name}"
    outermost = [filename for filename, _ in stack if filename.startswith(APP_CODE[0])][-1:]
    for filename in outermost:
        relative = str(Path(filename).relative_to(ROOT))
        return ENTRY_MODULES.get(filename, ""), relative
    return "", "app.py"


def _running_settings() -> Settings | None:
    """The settings of the bundle the tests injected into app.py (None: the app's own)."""
    app_module = sys.modules.get("app")
    deps = getattr(getattr(app_module, "container", None), "_deps", None)
    return deps.settings if deps is not None else None


def _current_test() -> str:
    import os
    return os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]


def _naming_params(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for key in ("TableName", "IndexName", "BackupArn", "ResourceArn", "QueueUrl", "QueueName", "TopicArn",
                "TargetArn", "FromEmailAddress", "Name", "GroupName", "SecretId", "FunctionName",
                "stateMachineArn", "TableArn", "ExportArn", "S3Bucket", "S3Prefix", "Bucket", "Key", "Prefix"):
        if isinstance(params.get(key), str):
            out.append((key, params[key]))
    if isinstance(params.get("Key"), dict) and isinstance(params.get("TableName"), str):
        # dynamodb:Attributes: the top-level attributes a request accesses (key, names, item)
        names = [*params["Key"], *(params.get("ExpressionAttributeNames") or {}).values()]
        out.extend(("Attribute", str(n)) for n in names)
    if isinstance(params.get("Item"), dict) and isinstance(params.get("TableName"), str):
        out.extend(("Attribute", str(n)) for n in params["Item"])
    for key in ("SourceTableName", "TargetTableName"):  # a restore: authorized on the source and the target
        if isinstance(params.get(key), str):
            out.append(("RestoreTable", params[key]))
    for key in ("RequestItems",):
        if isinstance(params.get(key), dict):
            out.extend(("TableName", t) for t in params[key])
    for item in params.get("TransactItems", []) or []:
        for kind, spec in item.items():
            out.append((f"Transact{kind}", spec.get("TableName", "")))
    for entry in params.get("Entries", []) or []:  # events.PutEvents: each entry's bus
        if isinstance(entry, dict) and isinstance(entry.get("EventBusName"), str):
            out.append(("EventBusName", entry["EventBusName"]))
    creation, source = params.get("TableCreationParameters"), params.get("S3BucketSource")  # dynamodb.ImportTable
    if isinstance(creation, dict) and isinstance(source, dict):
        out += [("ImportTable", str(creation.get("TableName", ""))), ("ImportBucket", str(source.get("S3Bucket", ""))),
                ("ImportPrefix", str(source.get("S3KeyPrefix", "")))]
    delete = params.get("Delete")  # s3.DeleteObjects: each object (and whether a version is named)
    if isinstance(delete, dict):
        for entry in delete.get("Objects", []) or []:
            out.append(("Key", str(entry.get("Key", ""))))
            if entry.get("VersionId"):
                out.append(("VersionId", "yes"))
    if isinstance(params.get("VersionId"), str):
        out.append(("VersionId", "yes"))
    target = params.get("Target")
    if isinstance(target, dict) and isinstance(target.get("RoleArn"), str):
        out.append(("RoleArn", target["RoleArn"]))
    return tuple(sorted(set(out)))


RECORDER = Recorder()


# --- IAM evaluation ------------------------------------------------------------------------------

# S3 operations whose IAM action is not their name: on the bucket, and on each object a call names.
S3_BUCKET_ACTIONS = {"ListObjectVersions": "ListBucketVersions", "ListObjectsV2": "ListBucket",
                     "GetObjectLockConfiguration": "GetBucketObjectLockConfiguration"}
S3_OBJECT_ACTIONS = {"DeleteObjects": ("DeleteObject", "DeleteObjectVersion"),
                     "PutObjectRetention": ("PutObjectRetention",), "GetObject": ("GetObject",)}
BATCH_ACTIONS = {("sqs", "SendMessageBatch"): "SendMessage", ("sqs", "DeleteMessageBatch"): "DeleteMessage",
                 ("sqs", "ChangeMessageVisibilityBatch"): "ChangeMessageVisibility"}
TRANSACT_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                    "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}


@dataclass(frozen=True)
class Request:
    """One IAM authorization an API call needs: action, resource ARN, request context."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()


def requests_of(call: Call, partition: str, region: str, account: str) -> list[Request]:
    """The IAM authorizations ``call`` needs (SESv2 SendEmail is ses:SendEmail, batches their item action)."""
    params = dict(call.params)

    def arn(service: str, resource: str) -> str:
        return f"arn:{partition}:{service}:{region}:{account}:{resource}"

    action = f"{call.service}:{BATCH_ACTIONS.get((call.service, call.operation), call.operation)}"
    if call.service == "dynamodb":
        transact = [(k[len("Transact"):], v) for k, v in call.params if k.startswith("Transact")]
        if transact:
            return [Request(f"dynamodb:{TRANSACT_ACTIONS[kind]}", arn("dynamodb", f"table/{table}"))
                    for kind, table in transact]
        restored = [v for k, v in call.params if k == "RestoreTable"]
        if restored:  # RestoreTableFromBackup: the backup and the target; to a point in time: source and target
            backup = [Request(action, params["BackupArn"])] if "BackupArn" in params else []
            return [*backup, *(Request(action, arn("dynamodb", f"table/{t}")) for t in restored)]
        tables = [v for k, v in call.params if k == "TableName"]
        if "IndexName" in params and tables:
            return [Request(action, arn("dynamodb", f"table/{tables[0]}/index/{params['IndexName']}"))]
        attributes = sorted({v for k, v in call.params if k == "Attribute"})
        context = (("dynamodb:Attributes", ",".join(attributes)),) if attributes else ()
        if tables:
            return [Request(action, arn("dynamodb", f"table/{t}"), context) for t in tables]
        if call.operation == "ImportTable":  # the new table, and the export's objects it reads
            return [Request(action, arn("dynamodb", f"table/{params.get('ImportTable', '')}")),
                    Request("s3:GetObject", f"arn:{partition}:s3:::{params.get('ImportBucket', '')}/"
                                            f"{params.get('ImportPrefix', '')}x")]
        if "TableArn" in params and "S3Bucket" in params:  # an export writes its objects with the caller's rights
            objects = f"arn:{partition}:s3:::{params['S3Bucket']}/{params.get('S3Prefix', '')}/AWSDynamoDB/x"
            return [Request(action, params["TableArn"]), Request("s3:PutObject", objects)]
        for key in ("BackupArn", "ResourceArn", "TableArn", "ExportArn"):
            if key in params:
                return [Request(action, params[key])]
        return [Request(action, "*")]
    if call.service == "sqs":
        name = params.get("QueueName") or urlparse(params.get("QueueUrl", "")).path.rsplit("/", 1)[-1]
        return [Request(action, arn("sqs", name) if name else "*")]
    if call.service == "sns":
        return [Request(action, params.get("TopicArn") or params.get("TargetArn") or "*")]
    if call.service == "ses":
        sender = params.get("FromEmailAddress", "")
        if not sender:
            return [Request(action, "*")]
        # SES authorizes the address's identity or, when only the domain is verified, the domain's.
        return [Request(action, arn("ses", f"identity/{sender}"))]
    if call.service == "lambda" and call.operation == "Invoke":  # by ARN (the actions name their function so)
        return [Request("lambda:InvokeFunction", params.get("FunctionName", "*"))]
    if call.service == "events" and call.operation == "PutEvents":
        return [Request(action, bus) for k, bus in call.params if k == "EventBusName"] or [Request(action, "*")]
    if call.service == "states" and "stateMachineArn" in params:
        return [Request(action, params["stateMachineArn"])]
    if call.service == "scheduler" and "Name" in params:
        group = params.get("GroupName", "default")
        out = [Request(action, arn("scheduler", f"schedule/{group}/{params['Name']}"))]
        if "RoleArn" in params:
            out.append(Request("iam:PassRole", params["RoleArn"], (("iam:PassedToService", "scheduler.amazonaws.com"),)))
        return out
    if call.service == "s3" and "Bucket" in params:
        bucket = f"arn:{partition}:s3:::{params['Bucket']}"
        if call.operation in S3_BUCKET_ACTIONS:  # a listing (under s3:prefix) or the bucket's own configuration
            prefix = (("s3:prefix", params["Prefix"]),) if "Prefix" in params else ()
            return [Request(f"s3:{S3_BUCKET_ACTIONS[call.operation]}", bucket, prefix)]
        keys = [v for k, v in call.params if k == "Key"]
        versioned = any(k == "VersionId" for k, _ in call.params)
        named = S3_OBJECT_ACTIONS.get(call.operation, (call.operation,))
        return [Request(f"s3:{a}", f"{bucket}/{key}") for key in keys for a in named
                if versioned or not a.endswith("Version")]
    if call.service == "ssm" and "Name" in params:
        return [Request(action, arn("ssm", "parameter/" + params["Name"].lstrip("/")))]
    if call.service == "secretsmanager" and "SecretId" in params:  # AWS appends six characters to the name
        return [Request(action, arn("secretsmanager", f"secret:{params['SecretId']}-AbCdEf"))]
    return [Request(action, "*")]


def _listify(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _conditions_hold(condition: Mapping[str, Any] | None, context: Mapping[str, str]) -> bool:
    for operator, tests in (condition or {}).items():
        for key, expected in tests.items():
            if key not in context:
                return False
            if operator == "ForAllValues:StringEquals":
                if not set(context[key].split(",")) <= set(_listify(expected)):
                    return False
                continue
            if operator == "StringEquals" and context[key] not in _listify(expected):
                return False
            if operator in ("StringLike", "ArnLike") and \
                    not any(fnmatch.fnmatchcase(context[key], p) for p in _listify(expected)):
                return False
            if operator not in ("StringEquals", "StringLike", "ArnLike"):
                return False
    return True


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    """The statement names the action and a resource pattern matching the ARN, and its conditions hold."""
    return (request.action in _listify(statement.get("Action", []))
            and any(fnmatch.fnmatchcase(request.resource, p) for p in _listify(statement.get("Resource", [])))
            and _conditions_hold(statement.get("Condition"), dict(request.context)))


def allowed(policy: Mapping[str, Any], request: Request) -> bool:
    """IAM's evaluation within one policy: an explicit Deny that applies wins; else True when an Allow applies."""
    statements = policy["Statement"]
    if any(s.get("Effect") == "Deny" and _applies(s, request) for s in statements):
        return False
    return any(s.get("Effect") == "Allow" and _applies(s, request) for s in statements)


def denied(policy: Callable[[Call], Mapping[str, Any]] | Mapping[str, Any], calls: Iterable[Call],
           partition: str, region: str, account: str,
           action_policy: Callable[[Call], Mapping[str, Any]] | None = None) -> list[tuple[Call, Request]]:
    """Every (call, authorization) its policy does not allow; calls from the task actions module
    are checked against ``action_policy`` (which adds the actions' targets) when given."""
    out: list[tuple[Call, Request]] = []
    for call in sorted(calls, key=lambda c: (c.service, c.operation, c.params, c.test)):
        chooser = action_policy if (action_policy is not None and call.origin in ACTION_MODULES) else policy
        chosen = chooser(call) if callable(chooser) else chooser
        out.extend((call, r) for r in requests_of(call, partition, region, account) if not allowed(chosen, r))
    return out


# --- the check over the whole suite -----------------------------------------------------

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
# In the tests, task actions send to queues and topics the tests create; on a stage, to TASK_ACTION_TARGET_ARNS.
TEST_ACTION_TARGETS = [f"arn:aws:sqs:{REGION}:{ACCOUNT}:*", f"arn:aws:sns:{REGION}:{ACCOUNT}:*",
                       f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:*", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/*",
                       f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:*"]


def policy_for(call: Call, where: iam.Account, default: Settings) -> iam.Policy:
    """The policy of the function that made ``call`` (the union when no single function did)."""
    settings = call.settings or default
    targets = TEST_ACTION_TARGETS if call.origin in ACTION_MODULES else ()
    if not call.function:
        return iam.app_policy(settings, where, targets)
    policies = iam.function_policies(settings, where, targets)
    return policies.get(call.function, {"Statement": []})


def suite_problems(calls: Iterable[Call]) -> list[tuple[Call, Request]]:
    """Every recorded call (and authorization) the policy of the function that made it does not allow."""
    where = iam.Account("aws", REGION, ACCOUNT)
    default = Settings.from_env()
    return denied(lambda call: policy_for(call, where, default), calls, "aws", REGION, ACCOUNT)


def report(problems: list[tuple[Call, Request]]) -> str:
    lines = [f"{request.action} on {request.resource} needed by {call.service}.{call.operation} "
             f"in function {call.function or '(any: union of all)'} (attributed by {call.via}) "
             f"from {call.origin} in {call.test}"
             for call, request in problems[:30]]
    return "the function's IAM policy (deploy/iam.py) does not allow:\n" + "\n".join(lines)
