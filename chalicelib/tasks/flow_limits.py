"""Flow control's limits as declared (TASK_TARGET_LIMITS, a task source's ``limit``): parsed here, below the
settings, so that the settings and the sources read them without importing the domain (chalicelib/tasks/flow.py
applies them). Pure."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

MAX_RATE = 1_000.0           # a second, per target: one item takes 1,000 write units a second (docs/scale.md)
MAX_CONCURRENCY = 200        # leases on one item (about 15 bytes each: 3 KB at most)
EMAIL_TARGET = "email"
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?")
_TARGET_ARN = re.compile(
    r"arn:aws[a-zA-Z-]{0,20}:(?:sqs|sns|lambda|events|states):[a-z0-9-]{1,30}:[0-9]{12}:[A-Za-z0-9_./:$-]{1,300}")
_FIELDS = ("rate", "concurrency")



class LimitError(ValueError):
    """A limit the app cannot use: ``field`` names its field (``rate``, ``concurrency``), ``target`` its target
    (TASK_TARGET_LIMITS)."""

    def __init__(self, field_name: str, problem: str, target: str = "") -> None:
        where = ", ".join(part for part in (f"target {target!r}" if target else "",
                                            f"field {field_name!r}" if field_name else "") if part)
        super().__init__(f"{where}: {problem}" if where else problem)
        self.field = field_name
        self.problem = problem
        self.target = target


@dataclass(frozen=True)
class Limit:
    """At most ``rate`` task starts a second and ``concurrency`` actions at once (None: no such limit)."""

    rate: float | None = None
    concurrency: int | None = None


def parse_limit(spec: Any) -> Limit:
    """A limit's declaration (``{"rate": 14, "concurrency": 10}``); LimitError names the field. Pure."""
    if not isinstance(spec, dict) or not spec:
        raise LimitError("limit", 'must be a JSON object with "rate" (a second) and/or "concurrency" (at once)')
    for name in spec:
        if name not in _FIELDS:
            raise LimitError(str(name), "is not a field of a limit (rate, concurrency)")
    rate, concurrency = spec.get("rate"), spec.get("concurrency")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not 0 < rate <= MAX_RATE or not math.isfinite(rate)):
        raise LimitError("rate", f"must be a number of tasks a second above 0 and at most {MAX_RATE:g}, got {rate!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or not 1 <= concurrency <= MAX_CONCURRENCY):
        raise LimitError("concurrency", f"must be a whole number from 1 to {MAX_CONCURRENCY}, got {concurrency!r}")
    return Limit(float(rate) if rate is not None else None, concurrency)


def parse_target_limits(value: Any) -> dict[str, Limit]:
    """TASK_TARGET_LIMITS's object: target -> limit; LimitError names the target and the field. Pure."""
    if not isinstance(value, dict):
        raise LimitError("", "must be a JSON object of target -> limit")
    limits: dict[str, Limit] = {}
    for target, spec in value.items():
        if not (target == EMAIL_TARGET or _ORIGIN.fullmatch(target) or _TARGET_ARN.fullmatch(target)):
            raise LimitError("", f'is not a target: "{EMAIL_TARGET}" (SES), a webhook origin '
                                     "(https://host[:port]) or an SQS queue, SNS topic, Lambda function, "
                                     "EventBridge bus or Step Functions state machine ARN", str(target))
        try:
            limits[target] = parse_limit(spec)
        except LimitError as exc:
            raise LimitError(exc.field, exc.problem, target) from exc
    return limits
