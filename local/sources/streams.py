"""DynamoDB stream event sources (``@app.on_dynamodb_record``): Lambda's poller against moto's streams.

* every shard of the stream (shards that appear later are read from their start);
* the handler's starting position (LATEST or TRIM_HORIZON) for the shards present
  when the runtime starts, its batch size and batching window;
* records shaped as Lambda delivers them (local/events.py), with the TTL
  service identity on the REMOVE records that the TTL emulation produced;
* when the handler raises, the same batch again, in order, after a growing pause,
  until it succeeds (a stream is never skipped); a ``batchItemFailures`` response
  (itemIdentifier = SequenceNumber) retries from the first failed record.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from chalice.app import DynamoDBEventConfig

from local import events
from local.invoker import Invoker, describe_error
from local.sources.ttl import TtlLedger

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient

IDLE_SECONDS = 0.25       # between polls of a shard with nothing new (Lambda polls 4 times a second)
SHARDS_EVERY_SECONDS = 10.0
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0


def retry_pause(attempt: int) -> float:
    """Pause before re-delivering a failed batch for the ``attempt``-th time (1, 2, ...)."""
    return float(min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (attempt - 1)))


def remaining_after_failures(records: list[dict[str, Any]], failed: set[str]) -> list[dict[str, Any]]:
    """The records to deliver again after a partial failure: from the first failed one on, in order.

    An identifier that is not a sequence number of the batch fails the whole batch, as on Lambda.
    """
    numbers = [r["dynamodb"]["SequenceNumber"] for r in records]
    if not failed <= set(numbers):
        return records
    first = min(numbers.index(n) for n in failed)
    return records[first:]


@dataclass
class Shard:
    shard_id: str
    start: str                     # iterator type of the first read: the starting position or TRIM_HORIZON
    iterator: str | None = None
    position: str | None = None    # sequence number of the last record read (delivered or pending)
    closed: bool = False           # a closed shard read to its end
    pending: list[dict[str, Any]] = field(default_factory=list)  # a batch that failed, to deliver again
    attempts: int = 0
    retry_at: float = 0.0


class StreamPoller:
    def __init__(self, config: DynamoDBEventConfig, invoker: Invoker, streams: DynamoDBStreamsClient,
                 ledger: TtlLedger, *, region: str) -> None:
        self.config = config
        self.invoker = invoker
        self.streams = streams
        self.ledger = ledger
        self.region = region
        self.table = events.table_of_stream(config.stream_arn)
        self.consumer = ledger.subscribe(self.table)
        self.shards: dict[str, Shard] = {}
        self._shards_read_at = 0.0

    @property
    def name(self) -> str:
        return self.config.name

    def describe(self) -> str:
        return (f"stream    {self.table} (batch {self.config.batch_size}, "
                f"from {self.config.starting_position})")

    def run(self, stop: threading.Event) -> None:
        first = True
        while not stop.is_set():
            try:
                if time.monotonic() - self._shards_read_at >= SHARDS_EVERY_SECONDS:
                    self.refresh_shards(first)
                    first = False
                busy = any([self.poll(shard, stop) for shard in list(self.shards.values())])
            except (ClientError, BotoCoreError) as exc:
                self.invoker.reporter.line(f"{self.name}: reading {self.config.stream_arn} failed: {exc}")
                self._shards_read_at = 0.0
                busy = False
                stop.wait(2.0)
            if not busy:
                stop.wait(IDLE_SECONDS)

    def refresh_shards(self, at_start: bool) -> None:
        """Open an iterator on every shard not seen yet (the starting position only at start)."""
        self._shards_read_at = time.monotonic()
        description = self.streams.describe_stream(StreamArn=self.config.stream_arn)["StreamDescription"]
        for listed in description.get("Shards", []):
            shard_id = listed["ShardId"]
            if shard_id in self.shards:
                continue
            shard = Shard(shard_id, self.config.starting_position if at_start else "TRIM_HORIZON")
            self._open(shard)
            self.shards[shard_id] = shard

    def _open(self, shard: Shard) -> None:
        """An iterator at the shard's start, or just after the last record read (Lambda's checkpoint)."""
        kwargs: dict[str, Any] = {"StreamArn": self.config.stream_arn, "ShardId": shard.shard_id}
        if shard.position is None:
            kwargs["ShardIteratorType"] = shard.start
        else:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=shard.position)
        shard.iterator = self.streams.get_shard_iterator(**kwargs)["ShardIterator"]

    def _read(self, shard: Shard, limit: int) -> list[dict[str, Any]]:
        if shard.closed:
            return []
        if shard.iterator is None:
            self._open(shard)
        try:
            response = self.streams.get_records(ShardIterator=shard.iterator or "", Limit=limit)
        except (ClientError, BotoCoreError):
            shard.iterator = None  # reopened from the checkpoint on the next read
            raise
        shard.iterator = response.get("NextShardIterator")
        shard.closed = shard.iterator is None
        records = [self._to_lambda(dict(r)) for r in response.get("Records", [])]
        if records:
            shard.position = records[-1]["dynamodb"]["SequenceNumber"]
        return records

    def _to_lambda(self, record: dict[str, Any]) -> dict[str, Any]:
        identity = None
        if record.get("eventName") == "REMOVE" and self.ledger.claim(
                self.consumer, self.table, events.item_key(record["dynamodb"].get("Keys", {}))):
            identity = events.TTL_USER_IDENTITY
        return events.stream_record_from_api(record, self.config.stream_arn, self.region, identity)

    def poll(self, shard: Shard, stop: threading.Event) -> bool:
        """Deliver one batch of ``shard`` (a failed one again when its pause is over); True if it had records."""
        if shard.pending:
            if time.monotonic() < shard.retry_at:
                return False
            batch = shard.pending
        else:
            batch = self._read(shard, self.config.batch_size)
            window = self.config.maximum_batching_window_in_seconds
            closes = time.monotonic() + window
            while batch and window > 0 and len(batch) < self.config.batch_size and not stop.is_set():
                if time.monotonic() >= closes:
                    break
                try:
                    more = self._read(shard, self.config.batch_size - len(batch))
                except (ClientError, BotoCoreError):
                    break  # deliver what is in hand; the next read reopens the shard
                batch += more
                if not more:
                    stop.wait(min(IDLE_SECONDS, max(0.0, closes - time.monotonic())))
        if not batch:
            return False
        self.deliver(shard, batch)
        return True

    def deliver(self, shard: Shard, batch: list[dict[str, Any]]) -> None:
        call = self.invoker.invoke(self.config.name, "stream", events.stream_event(*batch), len(batch))
        again: list[dict[str, Any]] = batch
        outcome = ""
        if call.ok:
            try:
                failed = events.batch_item_failures(call.result)
            except ValueError as exc:
                failed, outcome = None, f"FAILED bad batchItemFailures response: {exc}"
            else:
                again = remaining_after_failures(batch, failed) if failed else []
                if failed:
                    outcome = f"ok, retrying from record {len(batch) - len(again) + 1} of {len(batch)}"
        if not again:
            shard.pending, shard.attempts = [], 0
            self.invoker.reporter.invocation(call)
            return
        shard.pending = again
        shard.attempts += 1
        pause = retry_pause(shard.attempts)
        shard.retry_at = time.monotonic() + pause
        self.invoker.reporter.invocation(
            call, f"{outcome or 'FAILED ' + describe_error(call)}; same batch again in {pause:g}s")
