"""The sweeper's entries and plan: which tasks it keeps, the slice and shard of each, the slices a tick sweeps
(chalicelib/tasks/sweeper.py sweeps them). Pure, but for ``put_entry``."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib.aws import Deps
from chalicelib.settings import STATE_TTL_ATTRIBUTE
from chalicelib.tasks.buckets import bucket_label
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.throttle import with_backoff

SLICE_SECONDS = 60             # one slice: a minute of runs_at
LOOKAHEAD_SECONDS = 600        # a slice is swept once its start is at most this far ahead
MARGIN_SECONDS = 60            # clock skew and a stream write's wait for visibility, with room to spare
# Tasks due at most this far ahead go to the due queue directly, whatever DIRECT_QUEUE_HORIZON_SECONDS says.
SWEEP_FROM_SECONDS = LOOKAHEAD_SECONDS + SLICE_SECONDS + MARGIN_SECONDS
FIRST_RUN_LOOKBACK_SECONDS = 3600
MAX_SLICES_PER_RUN = 120
STOP_SECONDS_LEFT = 10.0       # a tick stops starting pages with less than this left
ENTRY_KEEP_SECONDS = 2 * 86400
PROGRESS_KEY = {"PK": {"S": "PROCESSOR"}, "SK": {"S": "sweeper"}}
ENTRY_PREFIX = "SWEEP#"
PAGE_LIMIT = 1000              # entries a query page (a few hundred KB)


class SweepFailed(RuntimeError):
    """Some due messages of a slice could not be sent; the progress stays before the slice."""


# --- pure ---------------------------------------------------------------------------------------------

def sweeps(runs_at: datetime, now: datetime, horizon_seconds: int) -> bool:
    """True when a task running at ``runs_at`` waits for the sweeper; False: it goes to the due queue now."""
    return (runs_at - now).total_seconds() > max(horizon_seconds, SWEEP_FROM_SECONDS)


def slice_of(at: datetime | float) -> int:
    """The start (epoch seconds) of the slice ``at`` falls in."""
    epoch = math.floor(at.timestamp() if isinstance(at, datetime) else at)
    return epoch - epoch % SLICE_SECONDS


def may_be_swept(runs_at: datetime, now: datetime) -> bool:
    """True when a sweeper tick at ``now`` (give or take MARGIN_SECONDS) may have swept ``runs_at``'s slice."""
    return slice_of(runs_at) - LOOKAHEAD_SECONDS - MARGIN_SECONDS <= now.timestamp()


def plan_slices(progress: int | None, now: datetime, lookahead: int = LOOKAHEAD_SECONDS,
                lookback: int = FIRST_RUN_LOOKBACK_SECONDS, limit: int = MAX_SLICES_PER_RUN) -> list[int]:
    """The slices (starts, oldest first) a tick at ``now`` sweeps: from the one after the progress (the last
    second swept) through the last one starting at most ``lookahead`` from now, at most ``limit``."""
    first = slice_of(progress + 1) if progress is not None else slice_of(now.timestamp() - lookback)
    last = slice_of(now.timestamp() + lookahead)
    return list(range(first, last + 1, SLICE_SECONDS))[:limit]


def shard_of(key: TaskKey, shards: int) -> int:
    digest = hashlib.sha256(f"{key.source}\x00{key.pk}\x00{key.sk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def partition(start: int, shard: int) -> str:
    return f"{ENTRY_PREFIX}{bucket_label(datetime.fromtimestamp(start, UTC))}#{shard}"


def entry_item(message: DueMessage, runs_at: datetime, shards: int) -> dict[str, Any]:
    """The entry of a task due at ``runs_at`` (DynamoDB JSON): the same for the same task and time."""
    key = message.key
    digest = hashlib.sha256(f"{key.source}\x00{key.pk}\x00{key.sk}".encode()).hexdigest()[:32]
    millis = round(runs_at.timestamp() * 1000)
    return {"PK": {"S": partition(slice_of(runs_at), shard_of(key, shards))}, "SK": {"S": f"{millis:015d}#{digest}"},
            "body": {"S": message.to_json()}, "runs_at": {"N": f"{millis / 1000:.3f}"},
            STATE_TTL_ATTRIBUTE: {"N": str(slice_of(runs_at) + ENTRY_KEEP_SECONDS)}}


@dataclass(frozen=True)
class Found:
    """One entry read back: its body and when it runs."""

    body: str
    runs_at: float


def read_entry(item: dict[str, Any]) -> Found | None:
    try:
        return Found(str(item["body"]["S"]), float(item["runs_at"]["N"]))
    except (KeyError, TypeError, ValueError):
        return None


def cursor_of(progress_item: dict[str, Any] | None, start: int, shard: int) -> str | None:
    """The sort key a shard of slice ``start`` was sent through, from the progress item (None: from the start)."""
    value = ((progress_item or {}).get(f"cursor_{shard}") or {}).get("S", "")
    slice_text, _, sort_key = str(value).partition("|")
    return sort_key if slice_text == str(start) and sort_key else None


# --- I/O -------------------------------------------------------------------------------------------------

def put_entry(deps: Deps, message: DueMessage, runs_at: datetime) -> bool:
    """Write the task's entry; True when the sweeper may have passed its slice meanwhile (send it directly)."""
    item = entry_item(message, runs_at, deps.settings.sweep_shards)
    with_backoff(lambda: deps.clients.dynamodb.put_item(TableName=deps.settings.state_table, Item=item), deps.sleep)
    return may_be_swept(runs_at, deps.clock())


