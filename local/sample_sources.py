"""The local stage's task source tables: every declared source's table, made (or adopted) on moto.

``make run`` declares sources in the local stage (TASK_SOURCES in .chalice/config.json; the shell's
when the stage sets none): the three samples, one table of each seed's shape, and any a user adds.  For
each, before app.py is imported, ``provision_sources`` makes the table on moto from the declaration
(its ``key``, or the sample's known key; string keys) with what its strategy needs: a NEW_AND_OLD_IMAGES
stream, TTL on the ``ttl_attribute`` (lazy), the ``bucket_index`` GSI (interval).  A table that exists
already is adopted: what it lacks of those is added.  Its stream ARN goes to TASK_SOURCE_STREAMS, as
TASKS_STREAM_ARN does.  A source whose table cannot be made (no key declared, a stream of another view
type) gets one banner line saying what to do, and is not run.  docs/task-sources.md shows how to write
to them with the AWS CLI.  Only the offline runtime makes tables: on AWS the app never creates a user's
table (deploy/task_sources.py checks them instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.aws import Clients
from chalicelib.sources import TaskSource

VIEW_TYPE = "NEW_AND_OLD_IMAGES"
STREAM = {"StreamEnabled": True, "StreamViewType": VIEW_TYPE}

# source name -> (table, key schema [(name, type)], TTL attribute, GSI (name, hash key))
SAMPLE_SOURCES: dict[str, tuple[str, list[tuple[str, str]], str | None, tuple[str, str] | None]] = {
    "appointments": ("seed-appointments", [("PK", "S"), ("SK", "S")], None, None),
    "sessions": ("seed-sessions", [("email", "S")], "expires_at", None),
    "slots": ("seed-slots", [("id", "S")], None, ("taskDateTime-index", "taskDateTime")),
}
SAMPLE_KEYS = {table: keys for table, keys, _, _ in SAMPLE_SOURCES.values()}


@dataclass(frozen=True)
class SourceTable:
    """What became of one source's table: its stream ARN ("" when the source cannot run offline) and a
    note for the banner (what make run did to a user's table, or what the user must do; "" for a sample
    table made as the sample declares it)."""

    stream_arn: str
    note: str = ""


def provision_sources(clients: Clients, sources: Sequence[TaskSource]) -> dict[str, SourceTable]:
    """Each declared source's table, made or adopted on moto, by source name."""
    return {source.name: _provision(clients.dynamodb, source) for source in sources}


def declared_keys(source: TaskSource) -> list[tuple[str, str]]:
    """The key schema to make the source's table with: the sample's, else the declared ``key`` (strings)."""
    return SAMPLE_KEYS.get(source.table) or [(name, "S") for name in source.key]


def missing_key_note(source: TaskSource) -> str:
    return (f"not run: table {source.table} is not on moto and its key is unknown; add \"key\": [\"<hash "
            f"key>\"] (or [\"<hash key>\", \"<range key>\"]) to source {source.name!r} in TASK_SOURCES and "
            "restart make run, which then makes the table (string keys)")


def _provision(ddb: Any, source: TaskSource) -> SourceTable:
    try:
        table = ddb.describe_table(TableName=source.table)["Table"]
    except ddb.exceptions.ResourceNotFoundException:
        keys = declared_keys(source)
        if not keys:
            return SourceTable("", missing_key_note(source))
        arn = _create(ddb, source, keys)
        shown = ", ".join(name for name, _ in keys)
        note = "" if source.table in SAMPLE_KEYS else f"made on moto: key {shown} (strings), stream" + (
            f", TTL {source.ttl_attribute}" if source.strategy == "lazy" else "") + (
            f", index {source.bucket_index}" if source.strategy == "interval" else "")
        return SourceTable(arn, note)
    done: list[str] = []
    spec = table.get("StreamSpecification") or {}
    if spec.get("StreamEnabled") and spec.get("StreamViewType") != VIEW_TYPE:
        return SourceTable("", f"not run: the stream of table {source.table} is {spec.get('StreamViewType')}, "
                               f"the app needs {VIEW_TYPE}; declare the source on another table")
    if not spec.get("StreamEnabled"):
        table = ddb.update_table(TableName=source.table, StreamSpecification=STREAM)["TableDescription"]
        done.append(f"{VIEW_TYPE} stream enabled")
    if source.strategy == "interval" and not _has_bucket_index(table, source):
        ddb.update_table(TableName=source.table,
                         AttributeDefinitions=[{"AttributeName": str(source.bucket_attribute), "AttributeType": "S"}],
                         GlobalSecondaryIndexUpdates=[{"Create": _bucket_index(source)}])
        done.append(f"index {source.bucket_index} added")
    if source.strategy == "lazy":
        ttl = ddb.describe_time_to_live(TableName=source.table)["TimeToLiveDescription"]
        if ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
            _enable_ttl(ddb, source)
            done.append(f"TTL enabled on {source.ttl_attribute}")
        elif ttl.get("AttributeName") != source.ttl_attribute:
            done.append(f"TTL is on {ttl.get('AttributeName')}, not {source.ttl_attribute}: fix the source")
    return SourceTable(str(table["LatestStreamArn"]), "adopted the existing table" + "".join(f"; {d}" for d in done))


def _create(ddb: Any, source: TaskSource, keys: list[tuple[str, str]]) -> str:
    definitions = [{"AttributeName": name, "AttributeType": kind} for name, kind in keys]
    extra: dict[str, Any] = {}
    if source.strategy == "interval" and source.bucket_attribute not in {name for name, _ in keys}:
        definitions.append({"AttributeName": str(source.bucket_attribute), "AttributeType": "S"})
    if source.strategy == "interval":
        extra["GlobalSecondaryIndexes"] = [_bucket_index(source)]
    schema = [{"AttributeName": name, "KeyType": kind} for (name, _), kind in zip(keys, ("HASH", "RANGE"), strict=False)]
    created = ddb.create_table(TableName=source.table, BillingMode="PAY_PER_REQUEST", StreamSpecification=STREAM,
                               KeySchema=schema, AttributeDefinitions=definitions, **extra)
    if source.strategy == "lazy":
        _enable_ttl(ddb, source)
    return str(created["TableDescription"]["LatestStreamArn"])


def _bucket_index(source: TaskSource) -> dict[str, Any]:
    return {"IndexName": source.bucket_index, "Projection": {"ProjectionType": "KEYS_ONLY"},
            "KeySchema": [{"AttributeName": source.bucket_attribute, "KeyType": "HASH"}]}


def _has_bucket_index(table: dict[str, Any], source: TaskSource) -> bool:
    return any(index.get("IndexName") == source.bucket_index for index in table.get("GlobalSecondaryIndexes", []))


def _enable_ttl(ddb: Any, source: TaskSource) -> None:
    ddb.update_time_to_live(TableName=source.table, TimeToLiveSpecification={
        "Enabled": True, "AttributeName": source.ttl_attribute})
