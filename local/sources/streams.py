"""DynamoDB stream event sources (``@app.on_dynamodb_record``): Lambda's poller against moto's streams.

* every shard of the stream (shards that appear later are read from their start);
* the handler's starting position (LATEST or TRIM_HORIZON) for the shards present
  when the runtime starts, its batch size and batching window;
* records shaped as Lambda delivers them (local/events.py), with the TTL
  service identity on the REMOVE records that the TTL emulation produced;
* when the handler raises, the same batch again, in order, after a growing pause;
  a ``batchItemFailures`` response (itemIdentifier = SequenceNumber) retries from
  the first failed record;
* the mapping's failure settings (``StreamFailurePolicy``; the local stage takes
  deploy/event_sources.py's, as ``make deploy`` sets them on AWS): a failing batch
  is split in two (BisectBatchOnFunctionError), and once it has been retried
  MaximumRetryAttempts times or its oldest record is MaximumRecordAgeInSeconds
  old, its position (a ``DDBStreamBatchInfo`` message, as Lambda sends it) goes to
  the on-failure queue and the shard moves on.  Lambda's defaults: retry until
  it works, never split;
* idle shards are read four times a second, then once a second after a second
  with nothing new;
* moto keeps every shard iterator it hands out (about 1.6 kB each): since moto
  runs in this process, each iterator is dropped from its backend once used.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from chalice.app import DynamoDBEventConfig

from deploy import lambda_events as events
from local.invoker import Clock, Invocation, Invoker, describe_error, utc_now
from local.sources.ttl import TtlLedger

if TYPE_CHECKING:
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient
    from mypy_boto3_sqs import SQSClient

IDLE_SECONDS = 0.25       # between polls of a shard with nothing new (Lambda polls 4 times a second) ...
IDLE_POLLS_BEFORE_BACKOFF = 4
IDLE_BACKOFF_SECONDS = 1.0  # ... and once a second after a second with nothing new
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


@dataclass(frozen=True)
class StreamFailurePolicy:
    """What the event-source mapping does with a batch that keeps failing (deploy/event_sources.py's
    settings; these defaults are Lambda's, except that batchItemFailures responses are honoured)."""

    report_batch_item_failures: bool = True   # FunctionResponseTypes: ReportBatchItemFailures
    bisect_on_error: bool = False             # BisectBatchOnFunctionError
    max_retry_attempts: int = -1              # MaximumRetryAttempts (-1: no limit)
    max_record_age_seconds: int = -1          # MaximumRecordAgeInSeconds (-1: no limit)
    on_failure_queue: str = ""                # DestinationConfig.OnFailure (queue name or ARN; "": discard)

    def describe(self) -> str:
        parts = []
        if self.bisect_on_error:
            parts.append("bisect")
        if self.max_retry_attempts >= 0:
            parts.append(f"{self.max_retry_attempts} retries")
        if self.max_record_age_seconds >= 0:
            parts.append(f"max age {self.max_record_age_seconds}s")
        if parts and self.on_failure_queue:
            parts.append(f"then {self.on_failure_queue.rsplit(':', 1)[-1]}")
        return ", ".join(parts) or "retried until it works"


_forget_lock = threading.Lock()


def forget_moto_iterator(stream_arn: str, iterator: str) -> None:
    """Drop a used shard iterator from moto's in-process backend, which keeps every one it hands out
    (in the backend's ``shard_iterators`` and in the model's ``instances_tracked``: about 1.6 kB each).
    Best effort: nothing happens when moto is not serving in this process."""
    try:
        from moto.dynamodbstreams.models import dynamodbstreams_backends

        region, account = stream_arn.split(":")[3:5]
        used = dynamodbstreams_backends[account][region].shard_iterators.pop(iterator, None)
        tracked = getattr(type(used), "instances_tracked", None) if used is not None else None
        if isinstance(tracked, list):
            with _forget_lock:  # moto only appends: our own removals are the only shifts
                for index in range(len(tracked) - 1, -1, -1):
                    if tracked[index] is used:
                        del tracked[index]
                        break
    except Exception:  # moto's internals changed, or it runs elsewhere: the iterator stays
        pass


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def batch_info(records: list[dict[str, Any]], shard_id: str, stream_arn: str, function_arn: str,
               condition: str, invokes: int, function_error: bool, now: datetime) -> dict[str, Any]:
    """The message Lambda sends a stream mapping's on-failure destination: the batch's position only."""
    created = [float(r["dynamodb"].get("ApproximateCreationDateTime", 0.0)) for r in records]
    return {
        "requestContext": {"requestId": str(uuid.uuid4()), "functionArn": function_arn, "condition": condition,
                           "approximateInvokeCount": invokes},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST",
                            "functionError": "Unhandled" if function_error else ""},
        "version": "1.0",
        "timestamp": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
        "DDBStreamBatchInfo": {
            "shardId": shard_id, "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": _iso(created[0]), "approximateArrivalOfLastRecord": _iso(created[-1]),
            "batchSize": len(records), "streamArn": stream_arn,
        },
    }


@dataclass
class Shard:
    shard_id: str
    start: str                     # iterator type of the first read: the starting position or TRIM_HORIZON
    iterator: str | None = None
    position: str | None = None    # sequence number of the last record read (delivered or pending)
    closed: bool = False           # a closed shard read to its end
    pending: list[dict[str, Any]] = field(default_factory=list)  # a batch that failed, to deliver again
    behind: list[dict[str, Any]] = field(default_factory=list)   # read, waiting behind ``pending`` (bisect)
    attempts: int = 0
    invokes: int = 0
    retry_at: float = 0.0
    idle_polls: int = 0


class StreamPoller:
    def __init__(self, config: DynamoDBEventConfig, invoker: Invoker, streams: DynamoDBStreamsClient,
                 ledger: TtlLedger, *, region: str, clock: Clock = utc_now,
                 policy: StreamFailurePolicy | None = None, sqs: SQSClient | None = None,
                 forget_iterator: Callable[[str, str], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.invoker = invoker
        self.streams = streams
        self.ledger = ledger
        self.region = region
        self.clock = clock
        self.policy = policy or StreamFailurePolicy()
        self.sqs = sqs
        self.forget_iterator = forget_iterator
        self.monotonic = monotonic
        self.table = events.table_of_stream(config.stream_arn)
        self.account = config.stream_arn.split(":")[4]
        self.consumer = ledger.subscribe(self.table)
        self.shards: dict[str, Shard] = {}
        self._shards_read_at = -SHARDS_EVERY_SECONDS
        self._on_failure_url = ""

    @property
    def name(self) -> str:
        return self.config.name

    def describe(self) -> str:
        return (f"stream    {self.table} (batch {self.config.batch_size}, "
                f"from {self.config.starting_position}; failing batches: {self.policy.describe()})")

    def run(self, stop: threading.Event) -> None:
        first = not self.shards
        while not stop.is_set():
            try:
                if self.monotonic() - self._shards_read_at >= SHARDS_EVERY_SECONDS:
                    self.refresh_shards(first)
                    first = False
                busy = any([self.poll(shard, stop) for shard in list(self.shards.values())])
            except (ClientError, BotoCoreError) as exc:
                self.invoker.reporter.line(f"{self.name}: reading {self.config.stream_arn} failed: {exc}")
                self._shards_read_at = -SHARDS_EVERY_SECONDS
                busy = False
                stop.wait(2.0)
            if not busy:
                stop.wait(self.idle_pause())

    def idle_pause(self) -> float:
        """Four reads a second, then one a second once every shard has had nothing new for a second."""
        idle = min((s.idle_polls for s in self.shards.values() if not s.closed), default=0)
        return IDLE_BACKOFF_SECONDS if idle >= IDLE_POLLS_BEFORE_BACKOFF else IDLE_SECONDS

    def refresh_shards(self, at_start: bool) -> None:
        """Open an iterator on every shard not seen yet (the starting position only at start)."""
        self._shards_read_at = self.monotonic()
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
        used = shard.iterator or ""
        try:
            response = self.streams.get_records(ShardIterator=used, Limit=limit)
        except (ClientError, BotoCoreError):
            shard.iterator = None  # reopened from the checkpoint on the next read
            raise
        if self.forget_iterator is not None:
            self.forget_iterator(self.config.stream_arn, used)
        shard.iterator = response.get("NextShardIterator")
        shard.closed = shard.iterator is None
        records = [self._to_lambda(dict(r)) for r in response.get("Records", [])]
        if records:
            shard.position = records[-1]["dynamodb"]["SequenceNumber"]
        return records

    def _to_lambda(self, record: dict[str, Any]) -> dict[str, Any]:
        identity = None
        data = record["dynamodb"]
        if record.get("eventName") == "REMOVE" and self.ledger.claim(
                self.consumer, self.table, events.item_key(data.get("Keys", {})),
                old_image=data.get("OldImage"), created=_epoch(data.get("ApproximateCreationDateTime"))):
            identity = events.TTL_USER_IDENTITY
        return events.stream_record_from_api(record, self.config.stream_arn, self.region, identity)

    def poll(self, shard: Shard, stop: threading.Event) -> bool:
        """Deliver one batch of ``shard`` (a failed one again when its pause is over); True if it had records."""
        size = self.config.batch_size
        if shard.pending:
            if self.monotonic() < shard.retry_at:
                return False
            batch = shard.pending
        elif shard.behind:
            batch, shard.behind = shard.behind[:size], shard.behind[size:]
        else:
            batch = self._read(shard, size)
            window = self.config.maximum_batching_window_in_seconds
            closes = self.monotonic() + window
            while batch and window > 0 and len(batch) < size and not stop.is_set():
                if self.monotonic() >= closes:
                    break
                try:
                    more = self._read(shard, size - len(batch))
                except (ClientError, BotoCoreError):
                    break  # deliver what is in hand; the next read reopens the shard
                batch += more
                if not more:
                    stop.wait(min(IDLE_SECONDS, max(0.0, closes - self.monotonic())))
        if not batch:
            shard.idle_polls += 1
            return False
        shard.idle_polls = 0
        self.deliver(shard, batch)
        return True

    def deliver(self, shard: Shard, batch: list[dict[str, Any]]) -> None:
        call = self.invoker.invoke(self.config.name, "stream", events.stream_event(*batch), len(batch))
        shard.invokes += 1
        again: list[dict[str, Any]] = batch
        outcome = ""
        function_error = not call.ok
        if call.ok and self.policy.report_batch_item_failures:
            try:
                failed = events.batch_item_failures(call.result)
            except ValueError as exc:
                failed, outcome = None, f"FAILED bad batchItemFailures response: {exc}"
            else:
                again = remaining_after_failures(batch, failed) if failed else []
                if failed:
                    outcome = f"ok, retrying from record {len(batch) - len(again) + 1} of {len(batch)}"
        elif call.ok:
            again = []
        if not again:
            shard.pending, shard.attempts, shard.invokes = [], 0, 0
            self.invoker.reporter.invocation(call)
            return
        failure = outcome or "FAILED " + describe_error(call)
        if function_error and self.policy.bisect_on_error and len(again) > 1:
            # Lambda splits the batch and retries each half; a split is not a retry attempt
            half = len(again) // 2
            shard.pending, shard.behind = again[:half], again[half:] + shard.behind
            shard.retry_at = self.monotonic()
            self.invoker.reporter.invocation(call, f"{failure}; split in two, retrying the first {half}")
            return
        shard.attempts += 1
        condition = self._exhausted(shard, again)
        if condition and self._set_aside(shard, again, condition, call, function_error):
            destination = self.policy.on_failure_queue.rsplit(":", 1)[-1] or "nowhere (no on-failure queue)"
            shard.pending, shard.attempts, shard.invokes = [], 0, 0
            self.invoker.reporter.invocation(
                call, f"{failure}; gave up ({condition}): {len(again)} records' position sent to {destination}")
            return
        shard.pending = again
        pause = retry_pause(shard.attempts)
        shard.retry_at = self.monotonic() + pause
        self.invoker.reporter.invocation(call, f"{failure}; same batch again in {pause:g}s")

    def _exhausted(self, shard: Shard, records: list[dict[str, Any]]) -> str:
        """Why the mapping gives up on ``records`` now ("" while it retries)."""
        policy = self.policy
        if policy.max_record_age_seconds >= 0:
            oldest = min(float(r["dynamodb"].get("ApproximateCreationDateTime", 0.0)) for r in records)
            if self.clock().timestamp() - oldest >= policy.max_record_age_seconds:
                return "RecordAgeExceeded"
        if 0 <= policy.max_retry_attempts < shard.attempts:
            return "RetryAttemptsExhausted"
        return ""

    def _set_aside(self, shard: Shard, records: list[dict[str, Any]], condition: str, call: Invocation,
                   function_error: bool) -> bool:
        """Send the batch's position to the on-failure queue; False when it could not (retried later)."""
        queue = self.policy.on_failure_queue
        if not queue or self.sqs is None:
            return True  # no destination: Lambda discards the batch
        function_arn = (f"arn:aws:lambda:{self.region}:{self.account}:function:"
                        f"{self.invoker.function_name(self.config.name)}")
        body = batch_info(records, shard.shard_id, self.config.stream_arn, function_arn, condition,
                          shard.invokes, function_error, self.clock())
        try:
            if not self._on_failure_url:
                name, owner = queue.rsplit(":", 1)[-1], queue.split(":")[4] if queue.startswith("arn:") else ""
                kwargs: dict[str, Any] = {"QueueName": name, **({"QueueOwnerAWSAccountId": owner} if owner else {})}
                self._on_failure_url = self.sqs.get_queue_url(**kwargs)["QueueUrl"]
            self.sqs.send_message(QueueUrl=self._on_failure_url, MessageBody=json.dumps(body))
        except (ClientError, BotoCoreError) as exc:
            self.invoker.reporter.line(f"{self.name}: on-failure queue {queue} unreachable ({exc}); "
                                       "the batch is retried meanwhile")
            return False
        return True


def _epoch(moment: Any) -> float | None:
    if moment is None:
        return None
    if isinstance(moment, datetime):
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return float(moment)
