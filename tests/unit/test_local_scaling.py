"""The offline runtime keeps up with load: SQS pollers follow the backlog, TTL and Scheduler find what is
due without reading everything each tick.  No moto, no real time (threads wait on events only)."""

from __future__ import annotations

import threading
from typing import Any

from chalice.app import Chalice, SQSEventConfig

from local.invoker import Invoker, Reporter
from local.sources.sqs import QueuePoller
from tests.fixtures import FakeClock

WAIT_SECONDS = 30.0  # for events other threads cause (xdist on 2 cores: generous, returns when they happen)


def wait_for(condition: Any, timeout: float = WAIT_SECONDS) -> bool:
    pause = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return bool(condition())


# --- SQS: concurrent invocations follow the backlog ---------------------------------------

class BacklogSqs:
    """A thread-safe SQS queue of ``count`` messages; an empty receive is a (short) long poll that a stop ends."""

    def __init__(self, count: int, stop: threading.Event) -> None:
        self.messages = [{"MessageId": f"m{n}", "ReceiptHandle": f"h{n}", "Body": str(n),
                          "Attributes": {"ApproximateReceiveCount": "1"}} for n in range(count)]
        self.count = count
        self.stop = stop
        self.lock = threading.Lock()
        self.deleted: list[str] = []
        self.drained = threading.Event()

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            size = kwargs["MaxNumberOfMessages"]
            taken, self.messages = self.messages[:size], self.messages[size:]
        if not taken:
            self.stop.wait(kwargs["WaitTimeSeconds"] / 20)
        return {"Messages": taken}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        with self.lock:
            self.deleted += [e["ReceiptHandle"] for e in Entries]
            if len(self.deleted) >= self.count:
                self.drained.set()
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}


def _backlog_poller(sqs: BacklogSqs, handler: Any, limit: int) -> QueuePoller:
    app = Chalice(app_name="tiny")
    app.on_sqs_message(queue="work", batch_size=10, name="work")(handler)
    config = app.event_sources[0]
    assert isinstance(config, SQSEventConfig)
    poller = QueuePoller(config, Invoker(app, Reporter(lambda line: None, FakeClock())), sqs,  # type: ignore[arg-type]
                         region="us-east-1", account="123456789012", max_concurrency=limit)
    poller._resolve = lambda stop: True  # type: ignore[method-assign]
    poller.queue_url = "http://sqs/work"
    return poller


def test_sqs_pollers_scale_with_the_backlog_up_to_the_limit_and_back_to_one() -> None:
    stop = threading.Event()
    sqs = BacklogSqs(60, stop)
    lock = threading.Lock()
    running, peak = [0], [0]
    crowd = threading.Event()   # set once ``limit`` batches run at once

    def work(event: Any) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] >= 4:
                crowd.set()
        crowd.wait(2.0)          # a batch is held until four run at once (a single poller never gets there)
        with lock:
            running[0] -= 1

    poller = _backlog_poller(sqs, work, limit=4)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert sqs.drained.wait(WAIT_SECONDS)
        assert crowd.is_set() and peak[0] == 4 and poller.peak_pollers == 4   # never more than the limit
        assert sorted(sqs.deleted) == sorted(f"h{n}" for n in range(60))    # each batch deleted once
        assert wait_for(lambda: poller.pollers == 1)                         # the queue is quiet: one poller
    finally:
        stop.set()
        thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    assert wait_for(lambda: poller.pollers == 0)                             # every poller ended on the stop


def test_a_quiet_queue_has_one_poller() -> None:
    stop = threading.Event()
    sqs = BacklogSqs(5, stop)
    poller = _backlog_poller(sqs, lambda event: None, limit=8)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert sqs.drained.wait(WAIT_SECONDS)
        assert poller.peak_pollers == 1          # a batch short of the batch size is no backlog
    finally:
        stop.set()
        thread.join(WAIT_SECONDS)
