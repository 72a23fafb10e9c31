"""Flow control: a rate and a concurrency per action target, shared by every executor invocation.

A limit (``Limit``: ``rate`` a second, ``concurrency`` at once; either may be left out) is set by the stage for a
target (TASK_TARGET_LIMITS: ``email`` for SES, a webhook's origin, a function's, topic's, queue's, bus's or state
machine's ARN) and by a task source for its own tasks (its declaration's ``limit``).  A task whose target or
source has a limit passes its gate before its claim (``admit``):

* **rate**: one item per limited key in the state table (``FLOW#<key>``, ``RATE``) holds ``next_ms``, the next
  free start.  One conditional UpdateItem reserves the task's start (``next_ms`` moves on by ``1/rate``): at once
  when the target is free, else a later second; a target idle more than ``BURST_SECONDS`` is reset first (a
  second write).  A task given a later start goes back to the due queue until then, carrying its start
  (``DueMessage.slot``), and is let through without another write when it comes back;
* **concurrency**: one item per limited key (``FLOW#<key>``, ``LEASES``) counts the leases held (``held``) and
  keeps each one's expiry; a lease is taken with one conditional UpdateItem (``held < concurrency``) and given
  back after the task's settle (``release``).  A worker that dies holding one leaves it to expire (the
  invocation's time left, else TASK_CLAIM_LEASE_SECONDS): the next taker that finds the count full removes the
  expired ones (``expired``).  A task that finds it full goes back to the due queue for 1 to 5 s.

A task that waits is never failed for it and spends no attempt: it has not been claimed.  A second copy of a
message reserves its own start (the claim still runs it once); a crash after a reservation wastes that start.
The decisions (``rate_start``, ``expired``, ``concurrency_wait``, ``limits_of``) are pure; ``Flow`` does the
writes, on the injected clock.  A target without a limit costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.log import logger
from chalicelib.tasks.flow_limits import EMAIL_TARGET, Limit

if TYPE_CHECKING:
    from chalicelib.aws import Deps
    from chalicelib.settings import Settings

PK_PREFIX = "FLOW#"
RATE_SK = "RATE"
LEASES_SK = "LEASES"
LEASE_PREFIX = "L_"
BURST_SECONDS = 1.0          # an idle target takes up to ``rate * BURST_SECONDS`` tasks at once
WAIT_MIN_SECONDS, WAIT_MAX_SECONDS = 1, 5   # a task finding its target's concurrency full comes back within this

def target_of(spec: Mapping[str, Any], region: str) -> str:
    """The target a validated action calls, as TASK_TARGET_LIMITS names it: ``email``, a webhook's origin, the
    ARN of a queue (from its URL), topic, function (without its version or alias), bus or state machine. Pure."""
    from chalicelib.tasks import actions, webhook

    kind = str(spec.get("type"))
    if kind == actions.EmailAction.type:
        return EMAIL_TARGET
    if kind == actions.WebhookAction.type:
        try:
            return webhook.target_of(str(spec.get("url", ""))).origin
        except ValueError:
            return ""
    name = actions.TARGET_FIELDS.get(kind)
    if name is None:
        return ""
    target = str(spec.get(name, ""))
    if name == "queue_url":
        return actions.queue_arn_of(target, region)
    if name == "function_arn":
        return ":".join(target.split(":")[:7])
    return target


def limits_of(action: Mapping[str, Any], source: str, settings: Settings) -> list[tuple[str, Limit]]:
    """The limits a task's start passes, each with its key: its target's (the stage's), its source's. Pure."""
    found: list[tuple[str, Limit]] = []
    if settings.task_target_limits:
        target = target_of(action, settings.region)
        found += [(key, limit) for key, limit in settings.task_target_limits if key == target]
    declared = settings.source(source) if source else None
    if declared is not None and declared.limit is not None:
        found.append((f"source:{source}", declared.limit))
    return found


# --- pure decisions ---------------------------------------------------------------------------------------


def rate_start(next_ms: int, interval_ms: int, now_ms: int) -> int:
    """The start a reservation that moved ``next_ms`` on by ``interval_ms`` was given: the old ``next_ms``, no
    earlier than now (an idle target's is in the past, within its burst). Pure."""
    return max(now_ms, next_ms - interval_ms)


def interval_ms(rate: float) -> int:
    """Milliseconds between two starts at ``rate`` a second (at least 1). Pure."""
    return max(1, round(1000 / rate))


def expired(leases: Mapping[str, Any], now_ms: int) -> list[tuple[str, int]]:
    """The leases of a LEASES item (``L_<owner>`` -> expiry, epoch ms) that ran out by ``now_ms``. Pure."""
    return sorted((name, int(value)) for name, value in leases.items()
                  if name.startswith(LEASE_PREFIX) and int(value) <= now_ms)


def concurrency_wait(draw: float) -> int:
    """Seconds a task finding its target's concurrency full waits in the due queue: 1 to 5, by ``draw`` (uniform
    in [0, 1)), so tasks that found it full together do not come back together. Pure."""
    return WAIT_MIN_SECONDS + min(WAIT_MAX_SECONDS - WAIT_MIN_SECONDS, int(draw * (WAIT_MAX_SECONDS - WAIT_MIN_SECONDS + 1)))


def slot_valid(slot: datetime | None, runs_at_without_slot: datetime) -> bool:
    """A start a message carries still stands: it was reserved for this run, not an earlier one (a retry's
    ``not_before`` is later than the start its first run had). Pure."""
    return slot is not None and slot >= runs_at_without_slot


@dataclass(frozen=True)
class Gate:
    """What the gate decided: run now (holding ``leases``), or wait ``seconds`` (``slot``: the start reserved)."""

    wait: int | None = None
    slot: datetime | None = None
    reason: str = ""
    leases: tuple[str, ...] = field(default=())
    owner: str = ""


def _ms(at: datetime) -> int:
    return math.floor(at.timestamp() * 1000)


class Flow:
    """The gate's writes on the state table (``Deps``'s DynamoDB client and clock)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.table = deps.settings.state_table
        self.found: dict[str, Any] = {}  # the item as a failed condition found it

    def _update(self, key: str, sk: str, expression: str, condition: str, names: dict[str, str],
                values: dict[str, Any], returns: Literal["NONE", "UPDATED_NEW"] = "NONE") -> dict[str, Any] | None:
        """One conditional UpdateItem; the item's new attributes (``returns``), or None when the condition failed
        (with the item as it was in ``self.found``)."""
        request: dict[str, Any] = {
            "TableName": self.table, "Key": {"PK": {"S": PK_PREFIX + key}, "SK": {"S": sk}},
            "UpdateExpression": expression, "ConditionExpression": condition, "ExpressionAttributeValues": values,
            "ReturnValues": returns, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        if names:  # DynamoDB refuses an empty ExpressionAttributeNames
            request["ExpressionAttributeNames"] = names
        try:
            answer = self.deps.clients.dynamodb.update_item(**request)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            found: Any = exc.response.get("Item") or {}  # ReturnValuesOnConditionCheckFailure
            self.found = dict(found)
            return None
        return dict(answer.get("Attributes") or {})

    def reserve(self, key: str, rate: float) -> int:
        """A start (epoch ms) for one task at ``rate`` a second on ``key``: now, or the next free one."""
        step = interval_ms(rate)
        for _ in range(3):
            now = _ms(self.deps.clock())
            floor = now - round(BURST_SECONDS * 1000)
            moved = self._update(key, RATE_SK, "SET next_ms = if_not_exists(next_ms, :now) + :step",
                                 "attribute_not_exists(next_ms) OR next_ms >= :floor", {},
                                 {":now": {"N": str(now)}, ":step": {"N": str(step)}, ":floor": {"N": str(floor)}},
                                 "UPDATED_NEW")
            if moved is not None:
                return rate_start(int(moved["next_ms"]["N"]), step, now)
            # idle beyond its burst: start anew from now, unless another worker just did
            if self._update(key, RATE_SK, "SET next_ms = :next", "next_ms < :floor", {},
                            {":next": {"N": str(now + step)}, ":floor": {"N": str(floor)}}) is not None:
                return now
        raise RuntimeError(f"could not reserve a start on target {key!r}")  # redelivered: nothing was taken

    def acquire(self, key: str, concurrency: int, owner: str, expires_ms: int) -> bool:
        """Take one of ``key``'s ``concurrency`` leases for ``owner`` until ``expires_ms``; False when all are
        held (after removing those that expired)."""
        names = {"#o": LEASE_PREFIX + owner}
        values = {":e": {"N": str(expires_ms)}, ":one": {"N": "1"}, ":c": {"N": str(concurrency)}}
        for _ in range(2):
            if self._update(key, LEASES_SK, "SET #o = :e ADD held :one",
                            "(attribute_not_exists(held) OR held < :c) AND attribute_not_exists(#o)",
                            names, values) is not None:
                return True
            leases = {k: v["N"] for k, v in self.found.items() if "N" in v}
            if LEASE_PREFIX + owner in leases:
                return True  # our own earlier attempt took it
            gone = expired(leases, _ms(self.deps.clock()))
            if not gone:
                return False
            for name, expiry in gone:  # a dead worker's: given back once, by whoever sees it first
                self._update(key, LEASES_SK, "REMOVE #x ADD held :minus", "#x = :e", {"#x": name},
                             {":e": {"N": str(expiry)}, ":minus": {"N": "-1"}})
        return False

    def release(self, key: str, owner: str) -> None:
        """Give ``owner``'s lease on ``key`` back (a second release, or one after expiry took it, changes nothing)."""
        self._update(key, LEASES_SK, "REMOVE #o ADD held :minus", "attribute_exists(#o)",
                     {"#o": LEASE_PREFIX + owner}, {":minus": {"N": "-1"}})


def admit(deps: Deps, action: Mapping[str, Any], source: str, slot: datetime | None, owner: str,
          lease_seconds: float) -> Gate:
    """The gate of one task's start: ``slot`` is the start its message carries (a valid one, or None)."""
    limits = limits_of(action, source, deps.settings)
    if not limits:
        return Gate()
    flow = Flow(deps)
    now = deps.clock()
    if slot is None and any(limit.rate for _, limit in limits):
        start = max(flow.reserve(key, limit.rate) for key, limit in limits if limit.rate)
        reserved = datetime.fromtimestamp(start / 1000, UTC)
        if reserved > now:
            return Gate(wait=math.ceil((reserved - now).total_seconds()), slot=reserved, reason="over its rate")
        slot = reserved
    held: list[str] = []
    owner = owner[:12]
    for key, limit in limits:
        if limit.concurrency and not flow.acquire(key, limit.concurrency, owner,
                                                  _ms(now) + math.ceil(lease_seconds * 1000)):
            for taken in held:
                flow.release(taken, owner)
            return Gate(wait=concurrency_wait(deps.random()), slot=slot, reason="over its concurrency")
        if limit.concurrency:
            held.append(key)
    return Gate(slot=slot, leases=tuple(held), owner=owner)


@contextmanager
def holding(deps: Deps, gate: Gate) -> Iterator[None]:
    """Run with the gate's leases, given back at the end (a crash leaves them to expire)."""
    try:
        yield
    finally:
        for key in gate.leases:
            try:
                Flow(deps).release(key, gate.owner)
            except (ClientError, BotoCoreError) as exc:  # it expires: the task's outcome stands
                logger.warning("could not give a target's lease back; it expires",
                               extra={"target": key, "error": repr(exc)})
