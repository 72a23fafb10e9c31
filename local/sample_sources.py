"""The local stage's sample task sources: one table of each seed's shape, as the seeds' own code creates them.

``make run`` creates them (empty) next to the app's resources; the local stage declares them as task
sources (TASK_SOURCES in .chalice/config.json) and their stream ARNs go to TASK_SOURCE_STREAMS before
app.py is imported, as TASKS_STREAM_ARN does.  docs/task-sources.md shows how to write to them with the
AWS CLI.  Only the offline runtime makes them: on AWS the app never creates a user's table.
"""

from __future__ import annotations

from typing import Any

from chalicelib.aws import Clients

STREAM = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}

# source name -> (table, key schema [(name, type)], TTL attribute, GSI (name, hash key))
SAMPLE_SOURCES: dict[str, tuple[str, list[tuple[str, str]], str | None, tuple[str, str] | None]] = {
    "appointments": ("seed-appointments", [("PK", "S"), ("SK", "S")], None, None),
    "sessions": ("seed-sessions", [("email", "S")], "expires_at", None),
    "slots": ("seed-slots", [("id", "S")], None, ("taskDateTime-index", "taskDateTime")),
}


def create_sample_sources(clients: Clients) -> dict[str, str]:
    """The sample tables (created when missing, with a NEW_AND_OLD_IMAGES stream, TTL or GSI as the seed
    has them); their stream ARNs by source name (TASK_SOURCE_STREAMS)."""
    ddb = clients.dynamodb
    streams: dict[str, str] = {}
    for source, (table, keys, ttl, index) in SAMPLE_SOURCES.items():
        try:
            streams[source] = str(ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"])
            continue
        except ddb.exceptions.ResourceNotFoundException:
            pass
        definitions = [{"AttributeName": k, "AttributeType": t} for k, t in keys]
        extra: dict[str, Any] = {}
        if index is not None:
            definitions.append({"AttributeName": index[1], "AttributeType": "S"})
            extra["GlobalSecondaryIndexes"] = [{
                "IndexName": index[0], "Projection": {"ProjectionType": "KEYS_ONLY"},
                "KeySchema": [{"AttributeName": index[1], "KeyType": "HASH"}]}]
        schema: Any = [{"AttributeName": k, "KeyType": kind}
                       for (k, _), kind in zip(keys, ("HASH", "RANGE"), strict=False)]
        request: dict[str, Any] = {"TableName": table, "BillingMode": "PAY_PER_REQUEST", "StreamSpecification": STREAM,
                                   "KeySchema": schema, "AttributeDefinitions": definitions, **extra}
        created = ddb.create_table(**request)
        if ttl is not None:
            ddb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})
        streams[source] = str(created["TableDescription"]["LatestStreamArn"])
    return streams
