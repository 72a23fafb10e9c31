"""Task sources under moto: the seeds' own tables, the app bound to them, and Lambda's delivery of their streams.

``source_app`` imports app.py again with the stage's TASK_SOURCES (as Lambda would import it on a stage that
declares them), so its per-source stream functions are bound by app.py itself; ``SourceSim`` is LambdaSim
(tests/functional/lambda_sim.py) plus each source table's stream, in order, and DynamoDB's TTL on the source
tables whose TTL attribute is declared.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chalicelib.aws import Deps
from chalicelib.sources import TaskSource
from tests import events
from tests.fixtures import use_settings
from tests.functional.lambda_sim import LambdaSim, stored_items

ROOT = Path(__file__).resolve().parents[2]

# The seeds' own tables, exactly: key schema, attribute types, TTL and index.
APPOINTMENTS_TABLE = "appointments"  # PK/SK, REMINDER_TIMESTAMP (epoch seconds), email
SESSIONS_TABLE = "sessions"          # keyed by email, expires_at (TTL)
SLOTS_TABLE = "slots"                # id, taskDateTime "YYYY-MM-DD#HH:MM" with its own GSI

# DynamoDB's TTL deletes no item whose TTL is more than five years in the past (or not a number).
TTL_IGNORED_AFTER = 5 * 365 * 86400

SEED_SOURCES: dict[str, dict[str, Any]] = {
    "appointments": {"table": APPOINTMENTS_TABLE, "strategy": "exact", "due_attribute": "REMINDER_TIMESTAMP",
                     "action": {"type": "email", "to": "{email}", "subject": "Reminder",
                                "body": "Your reminder {SK} is due."}},
    "sessions": {"table": SESSIONS_TABLE, "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]},
    "slots": {"table": SLOTS_TABLE, "strategy": "interval", "bucket_index": "taskDateTime-index",
              "bucket_attribute": "taskDateTime", "bucket_format": "%Y-%m-%d#%H:%M", "key": ["id"],
              "action": {"type": "email", "to": "{email}", "subject": "Slot {taskDateTime}", "body": "It is time."}},
}


def create_table(deps: Deps, name: str, keys: list[tuple[str, str]], ttl: str | None = None,
                 index: tuple[str, str] | None = None) -> str:
    """A user's table (keys: (name, S|N|B), hash first) with a NEW_AND_OLD_IMAGES stream; its stream ARN."""
    ddb = deps.clients.dynamodb
    schema = [{"AttributeName": k, "KeyType": kind} for (k, _), kind in zip(keys, ("HASH", "RANGE"), strict=False)]
    definitions = [{"AttributeName": k, "AttributeType": t} for k, t in keys]
    extra: dict[str, Any] = {}
    if index is not None:
        index_name, attribute = index
        definitions.append({"AttributeName": attribute, "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [{"IndexName": index_name, "Projection": {"ProjectionType": "KEYS_ONLY"},
                                            "KeySchema": [{"AttributeName": attribute, "KeyType": "HASH"}]}]
    created = ddb.create_table(TableName=name, KeySchema=schema, AttributeDefinitions=definitions,  # type: ignore[arg-type]
                               BillingMode="PAY_PER_REQUEST",
                               StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
                               **extra)
    if ttl is not None:
        ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})
    return str(created["TableDescription"]["LatestStreamArn"])


def create_seed_tables(deps: Deps) -> dict[str, str]:
    """The three seeds' tables; stream ARN by source name."""
    return {
        "appointments": create_table(deps, APPOINTMENTS_TABLE, [("PK", "S"), ("SK", "S")]),
        "sessions": create_table(deps, SESSIONS_TABLE, [("email", "S")], ttl="expires_at"),
        "slots": create_table(deps, SLOTS_TABLE, [("id", "S")], index=("taskDateTime-index", "taskDateTime")),
    }


def load_app(monkeypatch: pytest.MonkeyPatch, deps: Deps, sources: dict[str, Any],
             streams: dict[str, str]) -> ModuleType:
    """app.py imported afresh on a stage declaring ``sources`` (as Lambda imports it), given ``deps``."""
    monkeypatch.setenv("TASK_SOURCES", json.dumps(sources))
    monkeypatch.setenv("TASK_SOURCE_STREAMS", json.dumps(streams))
    spec = importlib.util.spec_from_file_location("app_with_sources", ROOT / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    use_settings(deps, task_sources=module.settings.task_sources)
    module.container.use(deps)
    return module


@dataclass
class _SourceStream:
    source: TaskSource
    after: str | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)
    ttl_keys: set[str] = field(default_factory=set)
    key_names: list[str] = field(default_factory=list)


@dataclass
class SourceSim(LambdaSim):
    """LambdaSim plus every task source's stream (its own function) and TTL."""

    _sources: list[_SourceStream] = field(default_factory=list)
    source_ttl_deletes: int = 0
    max_failures: int = 50  # a test that keeps failing invocations stops with the last error, not a hang
    last_error: str = ""

    def _invoke(self, function: str, event: dict[str, Any]) -> dict[str, Any] | None:
        try:
            payload = self.client.lambda_.invoke(function, event).payload
        except Exception as exc:
            self.last_error = f"{function}: {exc!r}"
            payload = {"errorMessage": str(exc)}
        if isinstance(payload, dict) and "errorMessage" in payload:
            self.failed_invocations += 1
            self.last_error = self.last_error or f"{function}: {payload}"
            if self.failed_invocations > self.max_failures:
                raise AssertionError(f"{self.failed_invocations} failed invocations; last: {self.last_error}")
            return None
        return payload if isinstance(payload, dict) else {}

    def __post_init__(self) -> None:
        super().__post_init__()
        self._sources = [_SourceStream(s) for s in self.deps.settings.task_sources]

    def step(self) -> bool:
        busy = super().step()
        for stream in self._sources:
            busy |= self._expire_source_ttl(stream)
            busy |= self._deliver_source(stream)
        return busy

    def _expire_source_ttl(self, stream: _SourceStream) -> bool:
        attribute = stream.source.ttl_attribute
        if attribute is None:
            return False
        now = self.clock.now.timestamp()
        if not stream.key_names:  # a table's key schema never changes: read once
            stream.key_names = [k["AttributeName"] for k in
                                self.ddb.describe_table(TableName=stream.source.table)["Table"]["KeySchema"]]
        key_names = stream.key_names
        expired = False
        for item in stored_items(self.deps.settings.region, stream.source.table, having=attribute):
            ttl = item.get(attribute, {}).get("N")
            if ttl is not None and now - TTL_IGNORED_AFTER < float(ttl) <= now:
                key = {k: item[k] for k in key_names}
                self.ddb.delete_item(TableName=stream.source.table, Key=key)
                stream.ttl_keys.add(events.item_key(key))
                self.source_ttl_deletes += 1
                expired = True
        return expired

    def _deliver_source(self, stream: _SourceStream) -> bool:
        arn = stream.source.stream_arn
        for record in self.stream_page(arn, stream.after):
            key = events.item_key(record["dynamodb"]["Keys"])
            by_ttl = record["eventName"] == "REMOVE" and key in stream.ttl_keys
            stream.ttl_keys.discard(key)
            stream.pending.append(events.stream_record_from_api(
                record, arn, self.deps.settings.region, events.TTL_USER_IDENTITY if by_ttl else None))
            stream.after = record["dynamodb"]["SequenceNumber"]
        if not stream.pending:
            return False
        batch = stream.pending[:100]
        response = self._invoke(stream.source.function_name, events.stream_event(*batch))
        if response is None:
            return True
        failed = [f["itemIdentifier"] for f in response.get("batchItemFailures", [])]
        if failed:
            self.failed_invocations += 1  # Lambda retries the batch from the failed record
            if self.failed_invocations > self.max_failures:
                raise AssertionError(f"{stream.source.name}: batch items keep failing: {failed}")
        sequences = [r["dynamodb"]["SequenceNumber"] for r in batch]
        done = min((sequences.index(s) for s in failed if s in sequences), default=len(batch))
        del stream.pending[:done]
        return True


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)
