"""Bounded memory for what moto keeps forever (see local/moto_speed.py), every few seconds:

* stream records: dropped once every stream poller of the runtime has read them
  (the newest STREAM_KEEP_NEWEST of each shard always stay, for other readers),
  on a stream no poller reads beyond the newest STREAM_KEEP_NEWEST, and any
  older than 24 h (DynamoDB Streams' retention);
* SES: the newest SES_KEEP_EMAILS emails stay (``/moto-api/data.json``'s
  ``ses.Message``);
* SQS: each queue remembers the newest SQS_KEEP_DELETED_RECEIPTS receipt handles
  of deleted messages (deleting one of those again succeeds, as on AWS).

It works on moto's backends in this process; when moto serves elsewhere it does nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from local import moto_speed
from local.invoker import Reporter
from local.sources.streams import StreamPoller

EVERY_SECONDS = 2.0
STREAM_RETENTION_SECONDS = 24 * 3600.0
STREAM_KEEP_NEWEST = 1000
SES_KEEP_EMAILS = 1000
SQS_KEEP_DELETED_RECEIPTS = 10_000


@dataclass
class Trimmed:
    stream_records: int = 0
    emails: int = 0


def read_up_to(pollers: Iterable[StreamPoller], table: str, shard_id: str) -> int | None:
    """The last sequence number every poller of ``table`` has read on ``shard_id``; None when no poller
    reads it; -1 when one has not read it yet."""
    positions: list[int] = []
    for poller in pollers:
        if poller.table != table:
            continue
        shard = poller.shards.get(shard_id)
        positions.append(int(shard.position) if shard is not None and shard.position is not None else -1)
    return min(positions) if positions else None


class MotoRetention:
    def __init__(self, pollers: Iterable[StreamPoller], reporter: Reporter, *, region: str, account: str,
                 wall: Callable[[], float] = time.time, every_seconds: float = EVERY_SECONDS,
                 keep_newest: int = STREAM_KEEP_NEWEST, keep_emails: int = SES_KEEP_EMAILS) -> None:
        self.pollers = list(pollers)
        self.reporter = reporter
        self.region = region
        self.account = account
        self.wall = wall
        self.every_seconds = every_seconds
        self.keep_newest = keep_newest
        self.keep_emails = keep_emails
        self.trimmed = Trimmed()

    @property
    def name(self) -> str:
        return "retention"

    def describe(self) -> str:
        return (f"moto's memory: stream records dropped once read (the newest {self.keep_newest} kept, 24 h at "
                f"most), the newest {self.keep_emails} emails kept")

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_seconds):
            self.trim()

    def trim(self) -> Trimmed:
        """One pass over moto's in-process backends; what it dropped."""
        older_than = self.wall() - STREAM_RETENTION_SECONDS
        for table, shard in moto_speed.stream_shards(self.account, self.region).items():
            read = read_up_to(self.pollers, table, shard.id)
            if read is None:  # nobody here reads it: only the newest stay
                read = shard.starting_sequence_number + len(shard.items)
            self.trimmed.stream_records += moto_speed.trim_shard(shard, read, self.keep_newest, older_than)
        self.trimmed.emails += moto_speed.trim_sent_emails(self.keep_emails)
        moto_speed.bound_deleted_receipts(SQS_KEEP_DELETED_RECEIPTS)
        return self.trimmed
