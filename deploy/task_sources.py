"""Deploy-time checks of the task sources' tables: what each source needs, enabled only on opt-in.

For each source (TASK_SOURCES) ``prepare_sources`` reads the user's table and
checks what its strategy needs: a stream with NEW_AND_OLD_IMAGES, TTL on the
declared attribute (lazy), the bucket index with the bucket as hash key
(interval), and the declared key attributes.  A missing stream or TTL is
enabled only when the source opts in (``enable_stream`` / ``enable_ttl``);
otherwise, and for anything it must not change (a stream of another view
type, TTL on another attribute, no index), deploy refuses with a message
saying what to do.  It never creates, deletes or changes a user's table's
data, and never creates a user's table.  The stream ARNs it finds become
TASK_SOURCE_STREAMS.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from chalicelib.settings import Settings
from chalicelib.sources import TaskSource

VIEW_TYPE = "NEW_AND_OLD_IMAGES"


class SourceRefused(ValueError):
    """A source's table is not set up as the source needs, and deploy may not (or cannot) fix it."""


def prepare_sources(dynamodb: Any, settings: Settings) -> tuple[dict[str, str], list[str]]:
    """(stream ARN by source name, changes made); SourceRefused naming the source and what to do."""
    streams: dict[str, str] = {}
    changes: list[str] = []
    for source in settings.task_sources:
        streams[source.name] = _prepare(dynamodb, source, changes)
    return streams, changes


def _refuse(source: TaskSource, problem: str) -> SourceRefused:
    return SourceRefused(f"task source {source.name!r} (table {source.table!r}): {problem}")


def _prepare(dynamodb: Any, source: TaskSource, changes: list[str]) -> str:
    try:
        table = dynamodb.describe_table(TableName=source.table)["Table"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            raise _refuse(source, "the table does not exist (the app never creates a user's table)") from exc
        raise
    keys = [k["AttributeName"] for k in sorted(table["KeySchema"], key=lambda k: k["KeyType"] != "HASH")]
    if source.key and list(source.key) != keys:
        raise _refuse(source, f"key is {list(source.key)}, but the table's key is {keys}")
    if source.strategy == "interval":
        indexes = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
        index = indexes.get(source.bucket_index or "")
        hash_key = [k["AttributeName"] for k in (index or {}).get("KeySchema", []) if k["KeyType"] == "HASH"]
        if hash_key != [source.bucket_attribute]:
            raise _refuse(source, f"needs a global secondary index {source.bucket_index!r} whose hash key is "
                                  f"{source.bucket_attribute!r} (found: {sorted(indexes) or 'none'}); "
                                  "create it yourself: deploy never changes a user's table's indexes")
    spec = table.get("StreamSpecification") or {}
    if spec.get("StreamEnabled") and spec.get("StreamViewType") != VIEW_TYPE:
        raise _refuse(source, f"its stream's view type is {spec.get('StreamViewType')}, the app needs {VIEW_TYPE}: "
                              "changing it replaces the stream its other readers use, so do it yourself")
    if not spec.get("StreamEnabled"):
        if not source.enable_stream:
            raise _refuse(source, f"the table has no stream: enable one ({VIEW_TYPE}), or set "
                                  '"enable_stream": true on the source for make deploy to')
        dynamodb.update_table(TableName=source.table,
                              StreamSpecification={"StreamEnabled": True, "StreamViewType": VIEW_TYPE})
        changes.append(f"enabled the {VIEW_TYPE} stream of {source.table} (task source {source.name})")
        table = dynamodb.describe_table(TableName=source.table)["Table"]
    if source.strategy == "lazy":
        _check_ttl(dynamodb, source, changes)
    return str(table["LatestStreamArn"])


def _check_ttl(dynamodb: Any, source: TaskSource, changes: list[str]) -> None:
    ttl = dynamodb.describe_time_to_live(TableName=source.table)["TimeToLiveDescription"]
    status, attribute = ttl.get("TimeToLiveStatus"), ttl.get("AttributeName")
    if status in ("ENABLED", "ENABLING"):
        if attribute != source.ttl_attribute:
            raise _refuse(source, f"TTL is on {attribute!r}, the source declares {source.ttl_attribute!r}: "
                                  "fix the declaration, or move the table's TTL yourself")
        return
    if not source.enable_ttl:
        raise _refuse(source, f"TTL is not enabled: enable it on {source.ttl_attribute!r}, or set "
                              '"enable_ttl": true on the source for make deploy to')
    dynamodb.update_time_to_live(TableName=source.table, TimeToLiveSpecification={
        "Enabled": True, "AttributeName": source.ttl_attribute})
    changes.append(f"enabled TTL on {source.table}.{source.ttl_attribute} (task source {source.name})")
