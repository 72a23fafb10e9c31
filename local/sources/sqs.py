"""SQS event sources (``@app.on_sqs_message``): Lambda's poller against moto's SQS.

* long polling (a second at a time, so a stop is noticed at once);
* up to the handler's batch size, gathering for up to its batching window;
* per-message delays and the queue's visibility timeout are SQS's own (moto's);
* a message is deleted only after the handler succeeded; when it raises, nothing
  is deleted and every message comes back after the visibility timeout (and to the
  queue's dead-letter queue after maxReceiveCount receives, as SQS does);
* a ``{"batchItemFailures": [{"itemIdentifier": <messageId>}]}`` response deletes
  all but those, which come back (ReportBatchItemFailures);
* an AWS error (receiving or deleting) is reported and polling goes on: a
  message whose delete failed comes back after the visibility timeout and is
  handled again (at least once, as on Lambda);
* concurrent invocations follow the backlog, as Lambda's pollers do ("if messages
  are still available, Lambda increases the number of processes reading batches"):
  one poller while the queue is quiet; each poller that receives messages starts
  another (up to ``max_concurrency``, LOCAL_SQS_MAX_CONCURRENCY, per source), and
  one that receives nothing stops (the last one stays).  Each poller receives, invokes and
  deletes its own batch, so a batch is still deleted only after its own
  invocation succeeded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from chalice.app import SQSEventConfig

from deploy import lambda_events as events
from local.invoker import Invoker

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

LONG_POLL_SECONDS = 1
DEFAULT_MAX_CONCURRENCY = 8  # pollers (concurrent invocations) per source, at most
SQS_MAX_BATCH = 10  # ReceiveMessage returns at most 10 messages per call
RETRY_SECONDS = 2.0
SHORT_POLL_PAUSE_SECONDS = 0.2  # between short polls in the batching window's last second


def to_delete(messages: list[dict[str, Any]], failed_ids: set[str] | None) -> list[dict[str, Any]]:
    """The messages to delete after a successful invocation that reported ``failed_ids`` (None: none failed).

    An identifier that is not a message of the batch fails the whole batch, as on Lambda.
    """
    if failed_ids is None:
        return list(messages)
    if not failed_ids <= {m["MessageId"] for m in messages}:
        return []
    return [m for m in messages if m["MessageId"] not in failed_ids]


class QueuePoller:
    def __init__(self, config: SQSEventConfig, invoker: Invoker, sqs: SQSClient, *, region: str,
                 account: str, monotonic: Callable[[], float] = time.monotonic,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> None:
        self.config = config
        self.max_concurrency = max(1, max_concurrency)
        self.pollers = 0        # running now
        self.peak_pollers = 0   # the most that ran at once
        self._lock = threading.Lock()
        self.monotonic = monotonic
        self.invoker = invoker
        self.sqs = sqs
        self.region = region
        self.account = account
        self.queue_name = config.queue or (config.queue_arn or "").rsplit(":", 1)[-1]
        self.queue_url = ""
        self.queue_arn = config.queue_arn or events.queue_arn(self.queue_name, region, account)

    @property
    def name(self) -> str:
        return self.config.name

    def describe(self) -> str:
        return (f"sqs       {self.queue_name} (batch {self.config.batch_size}, "
                f"window {self.config.maximum_batching_window_in_seconds}s, "
                f"up to {self.max_concurrency} at once)")

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self._resolve(stop):
            pass
        if stop.is_set():
            return
        self._start_poller(stop)
        # Pollers are daemon threads that end on ``stop`` (a long poll is a second at most); a handler still
        # running is abandoned as any invocation is.  One poller always runs: start one if a bug ended them all.
        while not stop.wait(RETRY_SECONDS):
            with self._lock:
                idle = self.pollers == 0
            if idle:
                self._start_poller(stop)

    def _start_poller(self, stop: threading.Event) -> bool:
        """One more poller, unless ``max_concurrency`` run already."""
        with self._lock:
            if self.pollers >= self.max_concurrency:
                return False
            self.pollers += 1
            self.peak_pollers = max(self.peak_pollers, self.pollers)
            number = self.pollers
        threading.Thread(target=self._poll, args=(stop,), name=f"{self.name}-poller-{number}", daemon=True).start()
        return True

    def _poll(self, stop: threading.Event) -> None:
        """One poller: batch after batch; a batch (messages are available) starts another, and an empty
        receive ends this one while others run."""
        retired = False
        try:
            while not stop.is_set() and not retired:
                try:
                    received = self.poll_once(stop, scale=True)
                except Exception as exc:  # a bug, not AWS: said, and the poller goes on after a pause
                    self.invoker.reporter.line(f"{self.name}: poller failed: {type(exc).__name__}: {exc}")
                    stop.wait(RETRY_SECONDS)
                    continue
                if received == 0:
                    retired = self._retire()
        finally:
            if not retired:
                with self._lock:
                    self.pollers -= 1

    def _retire(self) -> bool:
        """Whether this poller stops: it does unless it is the last one."""
        with self._lock:
            if self.pollers <= 1:
                return False
            self.pollers -= 1
            return True

    def poll_once(self, stop: threading.Event, *, scale: bool = False) -> int:
        """Receive one batch and hand it to the handler; an AWS error is reported, never raised.
        With ``scale``, a batch (messages are available) starts another poller before the handler runs.
        Returns how many messages were received."""
        try:
            batch = self.gather(stop)
        except (ClientError, BotoCoreError) as exc:
            self.invoker.reporter.line(f"{self.name}: receiving from {self.queue_name} failed: {exc}")
            stop.wait(RETRY_SECONDS)
            return 0
        if not batch:
            return 0
        if scale:
            self._start_poller(stop)
        try:
            self.deliver(batch)
        except (ClientError, BotoCoreError) as exc:
            self.invoker.reporter.line(f"{self.name}: handling a batch from {self.queue_name} failed: {exc}; "
                                       "its messages come back after the visibility timeout")
        return len(batch)

    def _resolve(self, stop: threading.Event) -> bool:
        try:
            self.queue_url = self.sqs.get_queue_url(QueueName=self.queue_name)["QueueUrl"]
            self.queue_arn = self.sqs.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            return True
        except (ClientError, BotoCoreError) as exc:
            self.invoker.reporter.line(f"{self.name}: queue {self.queue_name} not found ({exc}); retrying")
            stop.wait(RETRY_SECONDS * 2)
            return False

    def _receive(self, count: int, wait_seconds: int) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=max(1, min(SQS_MAX_BATCH, count)),
            WaitTimeSeconds=wait_seconds, AttributeNames=["All"], MessageAttributeNames=["All"])
        return [dict(m) for m in response.get("Messages", [])]

    def gather(self, stop: threading.Event) -> list[dict[str, Any]]:
        """One batch: what a long poll returns, topped up until the batch size or the window closes."""
        size = self.config.batch_size
        batch = self._receive(size, LONG_POLL_SECONDS)
        window = self.config.maximum_batching_window_in_seconds
        if not batch or window <= 0:
            return batch
        closes = self.monotonic() + window
        while len(batch) < size and not stop.is_set():
            left = closes - self.monotonic()
            if left <= 0:
                break
            wait_seconds = min(LONG_POLL_SECONDS, int(left))
            more = self._receive(size - len(batch), wait_seconds)
            batch += more
            if not more and wait_seconds == 0:  # the window's last second: short polls, not a spin
                stop.wait(min(left, SHORT_POLL_PAUSE_SECONDS))
        return batch

    def deliver(self, batch: list[dict[str, Any]]) -> None:
        records = [events.sqs_record_from_message(m, self.queue_arn, self.region) for m in batch]
        call = self.invoker.invoke(self.config.name, "sqs", events.sqs_event(*records), len(records))
        if not call.ok:
            self.invoker.reporter.invocation(call)  # nothing deleted: all come back after the visibility timeout
            return
        try:
            failed = events.batch_item_failures(call.result)
        except ValueError as exc:
            self.invoker.reporter.invocation(call, f"FAILED bad batchItemFailures response: {exc}")
            return
        done = to_delete(batch, failed)
        kept = len(batch) - len(done)
        outcome = "ok" if not kept else f"ok, {kept} of {len(batch)} reported failed (will come back)"
        self.invoker.reporter.invocation(call, outcome)
        self.delete(done)

    def delete(self, messages: list[dict[str, Any]]) -> int:
        """Delete handled messages; one that cannot be deleted is reported and comes back (at least once).
        Returns how many were deleted."""
        deleted = 0
        for start in range(0, len(messages), SQS_MAX_BATCH):
            chunk = messages[start:start + SQS_MAX_BATCH]
            try:
                response = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)])
            except (ClientError, BotoCoreError) as exc:
                self.invoker.reporter.line(f"{self.name}: deleting {len(chunk)} handled messages failed ({exc}); "
                                           "they come back after the visibility timeout")
                continue
            failed = list(response.get("Failed", []))
            ids = {str(i): m["MessageId"] for i, m in enumerate(chunk)}
            for entry in failed:
                message = ids.get(str(entry.get("Id", "")), "?")
                self.invoker.reporter.line(
                    f"{self.name}: message {message} not deleted ({entry.get('Code')}: {entry.get('Message', '')}); "
                    "it comes back after the visibility timeout")
            deleted += len(chunk) - len(failed)
        return deleted
