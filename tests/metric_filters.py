"""CloudWatch Logs metric filters as the tests apply them to the lines the app writes.

The deploy puts a metric filter per line metric on the executor's log group (chalicelib/metrics.py
``LINE_METRICS``, deploy/provision.py); CloudWatch Logs turns each line a filter's pattern matches into one
value of its metric.  This is the subset of CloudWatch's JSON filter patterns the app uses, evaluated as
CloudWatch documents it (Filter and pattern syntax, "Using filter patterns to match terms in JSON log events"):
``{ $.field OP value }`` terms joined by ``&&``, OP one of ``= != > >= < <=``; a numeric value compares with a
numeric field only, a quoted string with a string field by ``=`` or ``!=``; a term on a field the line does not
have is false.  A line that is not a JSON object matches no JSON pattern.  A matched line whose dimension field
is missing publishes nothing (CloudWatch drops the event).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.metrics import LINE_METRICS, LineMetric

_TERM = re.compile(r'^\$\.(\w+)\s*(=|!=|>=|<=|>|<)\s*(-?\d+(?:\.\d+)?|"[^"]*")$')
_NUMERIC = {"=": float.__eq__, "!=": float.__ne__, ">": float.__gt__, ">=": float.__ge__, "<": float.__lt__,
            "<=": float.__le__}


def matches(pattern: str, event: Mapping[str, Any]) -> bool:
    """True when the JSON filter ``pattern`` matches the log event ``event`` (a parsed JSON line)."""
    body = pattern.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"not a JSON filter pattern: {pattern!r}")
    return all(_term(term.strip(), event) for term in body[1:-1].split("&&"))


def _term(term: str, event: Mapping[str, Any]) -> bool:
    found = _TERM.match(term)
    if found is None:
        raise ValueError(f"a term this evaluator does not know: {term!r}")
    name, op, raw = found.groups()
    if name not in event:
        return False
    value = event[name]
    if raw.startswith('"'):
        if op not in ("=", "!="):
            raise ValueError(f"a string compares by = or != only: {term!r}")
        return isinstance(value, str) and (value == raw[1:-1]) == (op == "=")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return bool(_NUMERIC[op](float(value), float(raw)))


def parsed(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The lines that are JSON objects, parsed (the events a JSON pattern can match)."""
    out = []
    for text in lines:
        try:
            event = json.loads(text)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def extract(pattern: str, transformation: Mapping[str, Any],
            events: Iterable[Mapping[str, Any]]) -> list[tuple[float, dict[str, str]]]:
    """The values (with their dimensions) a metric filter of ``pattern`` and ``transformation`` (PutMetricFilter's
    ``metricTransformations`` entry) publishes from ``events``, in order."""
    value_of = str(transformation["metricValue"])
    out = []
    for event in events:
        if not matches(pattern, event):
            continue
        dimensions = {}
        for name, path in dict(transformation.get("dimensions") or {}).items():
            field = str(path).removeprefix("$.")
            if field not in event:
                break
            dimensions[name] = str(event[field])
        else:
            value = event[value_of.removeprefix("$.")] if value_of.startswith("$.") else value_of
            out.append((float(value), dimensions))
    return out


def line_metric(name: str) -> LineMetric:
    [metric] = [metric for metric in LINE_METRICS if metric.name == name]
    return metric


def line_metric_values(name: str, events: Iterable[Mapping[str, Any]]) -> list[tuple[float, dict[str, str]]]:
    """What the declared filter of line metric ``name`` publishes from ``events``."""
    metric = line_metric(name)
    return extract(metric.filter_pattern, metric.transformation(), events)
