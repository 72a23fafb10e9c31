"""Create every resource a stage needs, idempotently; return the environment that names them.

``provision(session, settings)`` looks each resource up first and creates only
what is missing, so a second run changes nothing.  It is used by the tests
(against moto in-process), by the offline runtime (against moto's server) and
by ``make deploy`` (against AWS).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from botocore.exceptions import ClientError

from chalicelib import metrics
from chalicelib.aws import Clients, client_config
from chalicelib.settings import DUE_EPOCH_ATTRIBUTE, STATE_TTL_ATTRIBUTE, Settings
from deploy import iam, observability

MAX_RECEIVE_COUNT = 5  # deliveries before SQS moves a message to its dead-letter queue


@dataclass(frozen=True)
class Index:
    """A global secondary index (keys only projected): its name, hash and range attributes and their types."""

    name: str
    hash_key: str
    range_key: str
    range_type: str = "S"

    def definition(self) -> dict[str, Any]:
        return {"IndexName": self.name,
                "KeySchema": [{"AttributeName": self.hash_key, "KeyType": "HASH"},
                              {"AttributeName": self.range_key, "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"}}

    def attributes(self) -> list[dict[str, str]]:
        return [{"AttributeName": self.hash_key, "AttributeType": "S"},
                {"AttributeName": self.range_key, "AttributeType": self.range_type}]


def state_indexes() -> list[Index]:
    """The state table's: the status index of the tasks' records (GET /tasks), keyed by status and shard."""
    from chalicelib.tasks.items import LISTED, STATUS_INDEX, STATUS_KEY
    return [Index(STATUS_INDEX, STATUS_KEY, LISTED)]


INDEX_WAIT_SECONDS = 15  # between two looks at an index being built
INDEX_WAIT_LOOKS = 240  # an hour: DynamoDB builds a new GSI of a large table in minutes to hours


def wait_for_indexes(clients: Clients, name: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until the table and every GSI of it are ACTIVE (a new index is built from the table's items)."""
    for _ in range(INDEX_WAIT_LOOKS):
        table = clients.dynamodb.describe_table(TableName=name)["Table"]
        indexes = table.get("GlobalSecondaryIndexes", [])
        if table.get("TableStatus") == "ACTIVE" and all(i.get("IndexStatus") == "ACTIVE" for i in indexes):
            return
        sleep(INDEX_WAIT_SECONDS)
    raise RuntimeError(f"the indexes of {name} were not ACTIVE after {INDEX_WAIT_SECONDS * INDEX_WAIT_LOOKS} s")


def key_status_records(clients: Clients, name: str, result: Provisioned) -> int:
    """Give every listed record the ``status_key`` of its status (a record written before the status index was
    sharded has none), or none for a status the index does not carry: one conditional UpdateItem each (on the
    status read, so a transition meanwhile wins). Returns how many were written."""
    from chalicelib import ddb
    from chalicelib.tasks import items
    ddb_client, written = clients.dynamodb, 0
    scan: dict[str, Any] = {
        "TableName": name, "FilterExpression": "attribute_exists(#l) AND attribute_exists(#s)",
        "ProjectionExpression": "PK, SK, #s, #k", "ExpressionAttributeNames": {
            "#l": items.LISTED, "#s": "status", "#k": items.STATUS_KEY}}
    while True:
        page = ddb_client.scan(**scan)
        for row in page.get("Items", []):
            record = ddb.deserialize(row)
            pk, status = str(record["PK"]), str(record["status"])
            if not pk.startswith(items.RECORD_PREFIX) or record["SK"] != items.RECORD_SK:
                continue
            wanted = items.status_key(pk[len(items.RECORD_PREFIX):], status)
            if record.get(items.STATUS_KEY) == wanted:
                continue
            values = {":s": {"S": status}, **({} if wanted is None else {":k": {"S": wanted}})}
            try:
                ddb_client.update_item(
                    TableName=name, Key={"PK": row["PK"], "SK": row["SK"]},
                    UpdateExpression="REMOVE #k" if wanted is None else "SET #k = :k",
                    ConditionExpression="#s = :s", ExpressionAttributeNames={"#k": items.STATUS_KEY, "#s": "status"},
                    ExpressionAttributeValues=values)
                written += 1
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise
        if "LastEvaluatedKey" not in page:
            break
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    if written:
        result.changes.append(f"wrote status_key on {written} records of {name}")
    return written


def unindex_statuses(clients: Clients, name: str, result: Provisioned) -> int:
    """Take out of the status index the records of a status it no longer carries (PENDING, DONE: written when the
    index carried every status): each partition key of such a status queried, and each record's ``status_key``
    removed (on the condition that it is still that key, so a transition meanwhile wins). Nothing to do once done
    (one empty Query a key). Returns how many records were taken out."""
    from chalicelib.tasks import items
    removed = 0
    for status in (s.value for s in items.LISTED_STATUSES if s.value not in items.INDEXED_STATUSES):
        for key in items.status_keys(status):
            query: dict[str, Any] = {
                "TableName": name, "IndexName": items.STATUS_INDEX, "KeyConditionExpression": "#k = :k",
                "ExpressionAttributeNames": {"#k": items.STATUS_KEY}, "ExpressionAttributeValues": {":k": {"S": key}}}
            while True:
                page = clients.dynamodb.query(**query)
                for row in page.get("Items", []):
                    try:
                        clients.dynamodb.update_item(
                            TableName=name, Key={"PK": row["PK"], "SK": row["SK"]}, UpdateExpression="REMOVE #k",
                            ConditionExpression="#k = :k", ExpressionAttributeNames={"#k": items.STATUS_KEY},
                            ExpressionAttributeValues={":k": {"S": key}})
                        removed += 1
                    except ClientError as exc:
                        if _code(exc) != "ConditionalCheckFailedException":
                            raise
                if "LastEvaluatedKey" not in page:
                    break
                query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    if removed:
        result.changes.append(f"took {removed} PENDING or DONE records of {name} out of {items.STATUS_INDEX}")
    return removed


def replace_status_index(clients: Clients, name: str, result: Provisioned,
                         sleep: Callable[[float], None] = time.sleep) -> None:
    """A state table made with the status index keyed by status alone (``items.REPLACED_STATUS_INDEXES``): once
    the sharded index is built, key every record for it (``key_status_records``), then delete the old index.
    Nothing to do on a table without it."""
    from chalicelib.tasks.items import REPLACED_STATUS_INDEXES
    present = {i["IndexName"] for i in clients.dynamodb.describe_table(TableName=name)["Table"].get(
        "GlobalSecondaryIndexes", []) if i.get("IndexStatus") != "DELETING"}  # deleted by an earlier run
    for old in REPLACED_STATUS_INDEXES:
        if old in present:
            wait_for_indexes(clients, name, sleep)
            key_status_records(clients, name, result)
            clients.dynamodb.update_table(TableName=name, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": old}}])
            result.changes.append(f"deleted index {old} on {name}")


def tasks_indexes(settings: Settings) -> list[Index]:
    """The tasks table's: the interval strategy's due buckets."""
    return [Index(settings.bucket_index, settings.bucket_attribute, DUE_EPOCH_ATTRIBUTE, "N")]


@dataclass
class Provisioned:
    """What provisioning made or found: environment values and a log of changes."""

    environment: dict[str, str] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    redrive: dict[str, str] = field(default_factory=dict)  # queue name -> its dead-letter queue's name
    created: set[str] = field(default_factory=set)  # the tables this run made


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def ensure_table(clients: Clients, name: str, result: Provisioned, *,
                 stream: bool = False, ttl_attribute: str | None = None,
                 indexes: list[Index] | None = None, warm_write_units: int = 0) -> dict[str, Any]:
    """A PAY_PER_REQUEST table with string keys PK/SK (+ stream, TTL, GSIs, warm write throughput as asked); a
    GSI missing from a table made before it was added is created on it (DynamoDB backfills it while the table stays
    in use). An existing table's warm throughput is left to ``ensure_warm_writes`` (once its indexes are built)."""
    ddb = clients.dynamodb
    indexes = indexes or []
    try:
        table = ddb.describe_table(TableName=name)["Table"]
    except ClientError as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise
        attributes = [{"AttributeName": "PK", "AttributeType": "S"},
                      {"AttributeName": "SK", "AttributeType": "S"}]
        kwargs: dict[str, Any] = {
            "TableName": name, "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"},
                          {"AttributeName": "SK", "KeyType": "RANGE"}],
        }
        if stream:
            kwargs["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        if indexes:
            for index in indexes:
                attributes += [a for a in index.attributes() if a not in attributes]
            kwargs["GlobalSecondaryIndexes"] = [index.definition() for index in indexes]
        kwargs["AttributeDefinitions"] = attributes
        if warm_write_units:
            kwargs["WarmThroughput"] = {"WriteUnitsPerSecond": warm_write_units}
        table = ddb.create_table(**kwargs)["TableDescription"]
        ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        table = ddb.describe_table(TableName=name)["Table"]
        result.changes.append(f"created table {name}")
        result.created.add(name)
    present = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    for index in indexes:
        if index.name not in present:
            update: dict[str, Any] = {"TableName": name, "AttributeDefinitions": index.attributes(),
                                      "GlobalSecondaryIndexUpdates": [{"Create": index.definition()}]}
            ddb.update_table(**update)
            result.changes.append(f"created index {index.name} on {name}")
    if ttl_attribute:
        current = ddb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING") or \
                current.get("AttributeName") != ttl_attribute:
            ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={
                "Enabled": True, "AttributeName": ttl_attribute})
            result.changes.append(f"enabled TTL on {name}.{ttl_attribute}")
    return cast(dict[str, Any], table)


def warm_writes(table: Mapping[str, Any]) -> int:
    """A table's warm write throughput as DescribeTable gives it (0: none given)."""
    return int((table.get("WarmThroughput") or {}).get("WriteUnitsPerSecond") or 0)


def ensure_warm_writes(clients: Clients, name: str, units: int, result: Provisioned) -> None:
    """Raise the table's warm write throughput to ``units`` when it is lower (UpdateTable ``WarmThroughput``;
    AWS bills the raise once and never lowers it): never lower it, nothing to do when ``units`` is 0 or reached."""
    if not units:
        return
    have = warm_writes(clients.dynamodb.describe_table(TableName=name)["Table"])
    if have >= units:
        return
    clients.dynamodb.update_table(TableName=name, WarmThroughput={"WriteUnitsPerSecond": units})
    result.changes.append(f"raised the warm write throughput of {name} from {have} to {units} write units a second")


def ensure_queue(clients: Clients, name: str, result: Provisioned, *,
                 dlq_arn: str | None = None, visibility_timeout: int = 60,
                 retention_seconds: int = 1209600, delay_seconds: int = 0) -> tuple[str, str]:
    """A standard queue (with a redrive policy to ``dlq_arn``); returns (url, arn)."""
    sqs = clients.sqs
    attributes: dict[Any, str] = {"VisibilityTimeout": str(visibility_timeout),
                  "MessageRetentionPeriod": str(retention_seconds), "DelaySeconds": str(delay_seconds)}
    if dlq_arn:
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT})
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    except ClientError as exc:
        if _code(exc) not in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
            raise
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        result.changes.append(f"created queue {name}")
    current: dict[Any, str] = dict(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])
    drift = {k: v for k, v in attributes.items()
             if (json.loads(current.get(k, "{}")) if k == "RedrivePolicy" else current.get(k))
             != (json.loads(v) if k == "RedrivePolicy" else v)}
    if drift:
        sqs.set_queue_attributes(QueueUrl=url, Attributes=drift)
        result.changes.append(f"updated queue {name}: {', '.join(sorted(drift))}")
    if dlq_arn:
        result.redrive[name] = dlq_arn.rsplit(":", 1)[-1]
    return url, current["QueueArn"]


def ensure_topic(clients: Clients, name: str, result: Provisioned) -> str:
    sns = clients.sns
    for page in sns.get_paginator("list_topics").paginate():
        for topic in page.get("Topics", []):
            if topic["TopicArn"].rsplit(":", 1)[-1] == name:
                return topic["TopicArn"]
    arn = sns.create_topic(Name=name)["TopicArn"]  # create_topic is idempotent too
    result.changes.append(f"created topic {name}")
    return arn


def ensure_schedule_group(clients: Clients, name: str, result: Provisioned) -> None:
    try:
        clients.scheduler.get_schedule_group(Name=name)
    except ClientError as exc:
        if _code(exc) != "ResourceNotFoundException":
            raise
        clients.scheduler.create_schedule_group(Name=name)
        result.changes.append(f"created schedule group {name}")


def ensure_sender(clients: Clients, email: str, result: Provisioned) -> None:
    try:
        clients.ses.get_email_identity(EmailIdentity=email)
    except ClientError as exc:
        if _code(exc) != "NotFoundException":
            raise
        clients.ses.create_email_identity(EmailIdentity=email)
        result.changes.append(f"created SES identity {email}")


SCHEDULER_ROLE_POLICY = "send-due-tasks"


def deploy_client(clients: Clients, service: str) -> Any:
    """A client of a service only the deploy uses (never Lambda, so not one of ``Clients``' own), built as they
    are: the stage's client configuration and endpoint, the same session."""
    kwargs: dict[str, Any] = {"config": client_config(clients.settings)}
    if clients.settings.endpoint_url:
        kwargs["endpoint_url"] = clients.settings.endpoint_url
    return clients.session.client(service, **kwargs)  # type: ignore[call-overload]


def iam_client(clients: Clients) -> Any:
    """IAM is only needed to provision (never in Lambda), so its client is built here."""
    return deploy_client(clients, "iam")


def ensure_scheduler_role(clients: Clients, name: str, due_queue_arn: str, scheduler_dlq_arn: str,
                          result: Provisioned) -> str:
    """A role EventBridge Scheduler (of this account only) assumes, allowed only sqs:SendMessage
    to the due queue and its scheduler dead-letter queue; returns its ARN."""
    client = iam_client(clients)
    where = iam.Account.from_environment({"SCHEDULER_DLQ_ARN": scheduler_dlq_arn})
    trust = iam.scheduler_trust_policy(where)
    policy = iam.scheduler_role_policy(due_queue_arn, scheduler_dlq_arn)
    try:
        role = client.get_role(RoleName=name)["Role"]
        if _as_document(role.get("AssumeRolePolicyDocument")) != trust:
            client.update_assume_role_policy(RoleName=name, PolicyDocument=json.dumps(trust))
            result.changes.append(f"updated trust policy of role {name}")
    except ClientError as exc:
        if _code(exc) != "NoSuchEntity":
            raise
        role = client.create_role(
            RoleName=name, AssumeRolePolicyDocument=json.dumps(trust),
            Description="EventBridge Scheduler delivers due timekeeper tasks to the due queue")["Role"]
        result.changes.append(f"created role {name}")
    try:
        current = _as_document(client.get_role_policy(
            RoleName=name, PolicyName=SCHEDULER_ROLE_POLICY)["PolicyDocument"])
    except ClientError as exc:
        if _code(exc) != "NoSuchEntity":
            raise
        current = None
    if current != policy:
        client.put_role_policy(RoleName=name, PolicyName=SCHEDULER_ROLE_POLICY, PolicyDocument=json.dumps(policy))
        result.changes.append(f"{'updated' if current else 'attached'} policy {SCHEDULER_ROLE_POLICY} of role {name}")
    return str(role["Arn"])


def _as_document(value: Any) -> Any:
    """IAM returns policy documents URL-decoded as dicts (boto3) or as JSON text (some emulators)."""
    if isinstance(value, str):
        from urllib.parse import unquote
        return json.loads(unquote(value))
    return value


def provision(clients: Clients, settings: Settings, scheduler_role_arn: str = "") -> Provisioned:
    """Every resource the app needs; returns the stage environment naming them."""
    result = Provisioned()
    ensure_table(clients, settings.state_table, result, ttl_attribute=STATE_TTL_ATTRIBUTE, indexes=state_indexes(),
                 warm_write_units=settings.state_table_warm_write_units)
    if settings.state_table not in result.created:  # a table made just now holds no record of an earlier layout
        replace_status_index(clients, settings.state_table, result)
        wait_for_indexes(clients, settings.state_table)
        unindex_statuses(clients, settings.state_table, result)
        # The burst's writes (claims and settles) are the state table's own; its status index carries none of them.
        ensure_warm_writes(clients, settings.state_table, settings.state_table_warm_write_units, result)
    tasks = ensure_table(clients, settings.tasks_table, result, stream=True, ttl_attribute=settings.ttl_attribute,
                         indexes=tasks_indexes(settings))
    _, monitor_dlq_arn = ensure_queue(clients, settings.backup_monitor_dlq, result)
    ensure_queue(clients, settings.backup_monitor_queue, result, dlq_arn=monitor_dlq_arn,
                 visibility_timeout=300, delay_seconds=settings.backup_monitor_delay_seconds)
    ensure_queue(clients, settings.task_dlq, result)
    # A due message SQS gives up on goes to its own queue, whose handler tells (docs/executor.md: "Dead-lettered due
    # messages") and forwards it to TASK_DLQ.  No redrive of its own: a moved message keeps its receive count,
    # so a redrive would pass it on before the handler saw it; one it cannot handle stays there, retried.
    _, due_dlq_arn = ensure_queue(clients, settings.due_dlq, result)
    due_queue_url, due_queue_arn = ensure_queue(clients, settings.due_queue, result, dlq_arn=due_dlq_arn,
                                    visibility_timeout=120)
    _, scheduler_dlq_arn = ensure_queue(clients, iam.scheduler_dlq_name(settings), result)
    if not scheduler_role_arn:
        scheduler_role_arn = ensure_scheduler_role(
            clients, iam.scheduler_role_name(settings), due_queue_arn, scheduler_dlq_arn, result)
    topic_name = iam.alert_topic_name(settings)
    topic_arn = ensure_topic(clients, topic_name, result)
    dlqs = dead_letter_queues(settings, result.redrive)
    ensure_dlq_alarms(clients, dlqs, topic_arn, result)
    ensure_alarms(clients, observability.metric_alarms(settings, topic_arn), result)
    ensure_dashboard(clients, observability.dashboard_name(settings),
                     observability.dashboard_json(settings, dlqs, settings.region), result)
    ensure_line_metric_filters(clients, settings, result)
    ensure_schedule_group(clients, settings.schedule_group, result)
    ensure_sender(clients, settings.sender_email, result)
    result.environment.update({
        "STATE_TABLE": settings.state_table,
        "TASKS_TABLE": settings.tasks_table,
        "TASKS_STREAM_ARN": tasks["LatestStreamArn"],
        "ALERT_TOPIC_ARN": topic_arn,
        "SCHEDULER_DLQ_ARN": scheduler_dlq_arn,
        "BACKUP_MONITOR_QUEUE": settings.backup_monitor_queue,
        "BACKUP_MONITOR_DLQ": settings.backup_monitor_dlq,
        "DUE_QUEUE": settings.due_queue,
        "DUE_QUEUE_URL": due_queue_url,
        "DUE_QUEUE_ARN": due_queue_arn,
        "TASK_DLQ": settings.task_dlq,
        "DUE_DLQ": settings.due_dlq,
        "SCHEDULER_ROLE_ARN": scheduler_role_arn,
    })
    return result


# --- dead-letter queue alarms ------------------------------------------------

DLQ_METRIC = "ApproximateNumberOfMessagesVisible"


def settings_dead_letter_queues(settings: Settings) -> list[str]:
    """The queues the settings name as dead-letter queues: every ``*_dlq`` (a name) and ``*_dlq_arn``
    (an ARN) setting, and the Scheduler DLQ (named after the due queue until provisioned)."""
    names: list[str] = []
    for spec in dataclasses.fields(settings):
        value = getattr(settings, spec.name)
        if isinstance(value, str) and value and spec.name.endswith(("_dlq", "_dlq_arn")):
            names.append(value.rsplit(":", 1)[-1])
    names.append(iam.scheduler_dlq_name(settings))
    return names


def dead_letter_queues(settings: Settings, redrive: Mapping[str, str]) -> list[str]:
    """Every dead-letter queue of the app, once each, sorted: each queue some queue redrives to
    (``{queue: its DLQ}``) and each queue the settings name as a DLQ."""
    return sorted({*redrive.values(), *settings_dead_letter_queues(settings)})


def dlq_alarm_name(queue: str) -> str:
    return f"{queue}-not-empty"


def dlq_alarm(queue: str, topic_arn: Any) -> dict[str, Any]:
    """The CloudWatch alarm (PutMetricAlarm's arguments) that tells ``topic_arn`` when ``queue`` holds a message.

    SQS publishes the metric every minute while the queue is active; no data (an idle queue) is not a breach.
    """
    return {
        "AlarmName": dlq_alarm_name(queue),
        "AlarmDescription": f"Messages are waiting in the dead-letter queue {queue}: inspect them and redrive or delete",
        "Namespace": "AWS/SQS", "MetricName": DLQ_METRIC,
        "Dimensions": [{"Name": "QueueName", "Value": queue}],
        "Statistic": "Maximum", "Period": 60, "EvaluationPeriods": 1,
        "Threshold": 0.0, "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching", "ActionsEnabled": True,
        "AlarmActions": [topic_arn],
    }


def cloudwatch_client(clients: Clients) -> Any:
    """CloudWatch is only needed to provision (never in Lambda), so its client is built here."""
    return deploy_client(clients, "cloudwatch")


def ensure_dlq_alarms(clients: Clients, queues: list[str], topic_arn: str, result: Provisioned) -> None:
    """One alarm per dead-letter queue, to the alert topic; put only when missing or different."""
    ensure_alarms(clients, [dlq_alarm(q, topic_arn) for q in queues], result)


def ensure_alarms(clients: Clients, alarms: list[dict[str, Any]], result: Provisioned) -> None:
    """Each alarm (PutMetricAlarm's arguments), put only when missing or different."""
    client = cloudwatch_client(clients)
    wanted = {a["AlarmName"]: a for a in alarms}
    existing = {a["AlarmName"]: a for a in client.describe_alarms(AlarmNames=sorted(wanted))["MetricAlarms"]}
    for name, alarm in wanted.items():
        have = existing.get(name)
        if have is not None and all(have.get(k) == v for k, v in alarm.items()):
            continue
        client.put_metric_alarm(**alarm)
        result.changes.append(f"{'updated' if have else 'created'} alarm {name}")


def ensure_dashboard(clients: Clients, name: str, body: str, result: Provisioned) -> None:
    """The stage's dashboard (deploy/observability.py), put only when missing or different."""
    client = cloudwatch_client(clients)
    try:
        have = client.get_dashboard(DashboardName=name).get("DashboardBody")
    except ClientError as exc:
        if _code(exc) not in ("ResourceNotFound", "ResourceNotFoundException"):
            raise
        have = None
    if have is not None and json.loads(have) == json.loads(body):
        return
    client.put_dashboard(DashboardName=name, DashboardBody=body)
    result.changes.append(f"{'updated' if have is not None else 'created'} dashboard {name}")


def logs_client(clients: Clients) -> Any:
    """CloudWatch Logs is only needed to provision (never in Lambda), so its client is built here."""
    return deploy_client(clients, "logs")


def line_metric_filters(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """PutMetricFilter's arguments for the metrics read from log lines (chalicelib/metrics.py ``LINE_METRICS``),
    by the log group they are on: the writing function's, as Chalice names it."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for metric in metrics.LINE_METRICS:
        group = iam.function_log_group(settings, metric.function)
        groups.setdefault(group, []).append({
            "logGroupName": group, "filterName": metric.filter_name, "filterPattern": metric.filter_pattern,
            "metricTransformations": [metric.transformation()]})
    return groups


def ensure_line_metric_filters(clients: Clients, settings: Settings, result: Provisioned) -> None:
    """The log group of each function whose lines carry line metrics (created when missing: Lambda would create
    it at the function's first line, too late for a filter), and one metric filter per metric on it, put only
    when missing or different."""
    client = logs_client(clients)
    for group, filters in line_metric_filters(settings).items():
        have: dict[str, Any] = {}
        try:
            client.create_log_group(logGroupName=group)
            result.changes.append(f"created log group {group}")
        except ClientError as exc:
            if _code(exc) != "ResourceAlreadyExistsException":
                raise
            have = {f["filterName"]: f for f in client.describe_metric_filters(logGroupName=group)["metricFilters"]}
        for wanted in filters:
            found = have.get(wanted["filterName"])
            if found is not None and all(found.get(k) == v for k, v in wanted.items()):
                continue
            client.put_metric_filter(**wanted)
            result.changes.append(f"{'updated' if found else 'created'} metric filter {wanted['filterName']} "
                                  f"on {group}")


def create_sample_tables(clients: Clients, names: list[str], rows: int, result: Provisioned) -> None:
    """A few tables with data, to back up on the local stage."""
    for name in names:
        ensure_table(clients, name, result)
        for i in range(rows):
            clients.dynamodb.put_item(TableName=name, Item={
                "PK": {"S": f"sample#{i}"}, "SK": {"S": "row"}, "value": {"N": str(i)}})
