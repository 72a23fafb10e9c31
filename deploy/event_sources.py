"""Event-source mapping settings Chalice cannot set, applied with boto3 after each deploy.

Chalice creates the SQS and DynamoDB-stream mappings but has no way to ask
for partial batch responses, bisecting, retry limits, an on-failure
destination or filters. ``apply`` reads the mappings' UUIDs from
.chalice/deployed/<stage>.json, compares each with what these settings ask
and updates only what differs, so a second run changes nothing. The same
values go into the merge template (deploy/template.py) for ``chalice package``.

The executor's SQS mapping also takes ``MaximumConcurrency`` (``ScalingConfig``)
from the stage's EXECUTOR_MAX_CONCURRENCY (chalicelib/settings.py; 0: none).

Deploy-time settings (read from the environment of ``make deploy``; not
Lambda settings, so not in chalicelib/settings.py):

==================================  ===========  ===============================================
variable                            default      meaning
==================================  ===========  ===============================================
SQS_REPORT_BATCH_ITEM_FAILURES      true         SQS mappings: only the messages the handler
                                                 lists in batchItemFailures are retried.
STREAM_REPORT_BATCH_ITEM_FAILURES   true         Stream mapping: retry from the first failed
                                                 record the handler reports, not the batch.
STREAM_BISECT_ON_ERROR              true         Stream mapping: split a failing batch in two
                                                 and retry the halves, to isolate a bad record.
STREAM_MAX_RETRY_ATTEMPTS           -1           Stream mapping: retries of a failing batch
                                                 (-1: no count limit, only the age below;
                                                 0-10000).
STREAM_MAX_RECORD_AGE_SECONDS       43200        Stream mapping: a failing record older than
                                                 this (12 h) goes to the on-failure queue;
                                                 60-86399, below the stream's 24 h retention,
                                                 so ``python -m deploy.cli
                                                 replay-stream-failures`` can still read it.
STREAM_ON_FAILURE_QUEUE             TASK_DLQ     Queue (name) receiving the metadata of stream
                                                 batches that exhausted their retries.
STREAM_FILTER_PATTERNS              (none)       JSON list of Lambda filter patterns; a stream
                                                 record matching none is dropped before an
                                                 invocation (never retried, never
                                                 dead-lettered). Empty: every record.
==================================  ===========  ===============================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chalice.app import Chalice, DynamoDBEventConfig, SQSEventConfig
from chalice.utils import to_cfn_resource_name

# DynamoDB Streams keeps records 24 h; the on-failure queue gets only their position, so a record
# must be set aside younger than that to be replayable (deploy/replay.py).
STREAM_RETENTION_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Option:
    name: str
    default: str
    meaning: str


OPTIONS: tuple[Option, ...] = (
    Option("SQS_REPORT_BATCH_ITEM_FAILURES", "true", "SQS mappings report partial batch failures."),
    Option("STREAM_REPORT_BATCH_ITEM_FAILURES", "true", "The stream mapping reports partial batch failures."),
    Option("STREAM_BISECT_ON_ERROR", "true", "Split a failing stream batch to isolate a bad record."),
    Option("STREAM_MAX_RETRY_ATTEMPTS", "-1", "Retries of a failing stream batch (-1: bounded by age only)."),
    Option("STREAM_MAX_RECORD_AGE_SECONDS", str(12 * 3600),
           "Failing stream records older than this go to the on-failure queue (60-86399)."),
    Option("STREAM_ON_FAILURE_QUEUE", "", "Queue name of failed stream batches (empty: TASK_DLQ)."),
    Option("STREAM_FILTER_PATTERNS", "", "JSON list of Lambda filter patterns for the stream mapping."),
)
_DEFAULTS = {o.name: o.default for o in OPTIONS}


class OptionError(ValueError):
    pass


@dataclass(frozen=True)
class EventSourceOptions:
    sqs_report_batch_item_failures: bool
    stream_report_batch_item_failures: bool
    stream_bisect_on_error: bool
    stream_max_retry_attempts: int
    stream_max_record_age_seconds: int
    stream_on_failure_queue: str
    stream_filter_patterns: tuple[str, ...]

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> EventSourceOptions:
        def text(name: str) -> str:
            return environ.get(name, _DEFAULTS[name]).strip()

        def flag(name: str) -> bool:
            value = text(name).lower()
            if value not in ("true", "false"):
                raise OptionError(f"{name}={value!r} is invalid: expected true or false")
            return value == "true"

        def integer(name: str, allowed: range, also: tuple[int, ...] = ()) -> int:
            value = text(name)
            try:
                number: int | None = int(value)
            except ValueError:
                number = None
            if number is None or (number not in allowed and number not in also):
                raise OptionError(f"{name}={value!r} is invalid: expected a whole number from "
                                  f"{allowed.start} to {allowed.stop - 1}" + (f" or {also}" if also else ""))
            return number

        raw_filters = text("STREAM_FILTER_PATTERNS")
        try:
            filters = json.loads(raw_filters) if raw_filters else []
        except json.JSONDecodeError as exc:
            raise OptionError(f"STREAM_FILTER_PATTERNS is not JSON: {exc}") from exc
        if not isinstance(filters, list) or not all(isinstance(f, dict) for f in filters) or len(filters) > 5:
            raise OptionError("STREAM_FILTER_PATTERNS must be a JSON list of at most 5 filter pattern objects")
        return cls(
            sqs_report_batch_item_failures=flag("SQS_REPORT_BATCH_ITEM_FAILURES"),
            stream_report_batch_item_failures=flag("STREAM_REPORT_BATCH_ITEM_FAILURES"),
            stream_bisect_on_error=flag("STREAM_BISECT_ON_ERROR"),
            stream_max_retry_attempts=integer("STREAM_MAX_RETRY_ATTEMPTS", range(0, 10001), (-1,)),
            # AWS also takes -1 and up to 604800, but a record older than the stream's retention is
            # trimmed before it reaches the on-failure queue: it would be lost, not set aside.
            stream_max_record_age_seconds=integer("STREAM_MAX_RECORD_AGE_SECONDS",
                                                  range(60, STREAM_RETENTION_SECONDS)),
            stream_on_failure_queue=text("STREAM_ON_FAILURE_QUEUE"),
            stream_filter_patterns=tuple(json.dumps(f, sort_keys=True) for f in filters),
        )


EXECUTOR_FUNCTION = "task_executor"  # app.py's function on the due queue: its mapping takes MaximumConcurrency


def sqs_settings(options: EventSourceOptions, max_concurrency: int | None = None) -> dict[str, Any]:
    """update_event_source_mapping arguments of an SQS mapping; ``max_concurrency``: the executor's
    (EXECUTOR_MAX_CONCURRENCY; 0 removes it, None leaves the mapping's scaling alone)."""
    settings: dict[str, Any] = {
        "FunctionResponseTypes": ["ReportBatchItemFailures"] if options.sqs_report_batch_item_failures else []}
    if max_concurrency is not None:
        settings["ScalingConfig"] = {"MaximumConcurrency": max_concurrency} if max_concurrency else {}
    return settings


def stream_settings(options: EventSourceOptions, on_failure_arn: str) -> dict[str, Any]:
    """update_event_source_mapping arguments of the DynamoDB stream mapping."""
    return {
        "FunctionResponseTypes": ["ReportBatchItemFailures"] if options.stream_report_batch_item_failures else [],
        "BisectBatchOnFunctionError": options.stream_bisect_on_error,
        "MaximumRetryAttempts": options.stream_max_retry_attempts,
        "MaximumRecordAgeInSeconds": options.stream_max_record_age_seconds,
        "DestinationConfig": {"OnFailure": {"Destination": on_failure_arn}},
        "FilterCriteria": {"Filters": [{"Pattern": p} for p in options.stream_filter_patterns]},
    }


@dataclass(frozen=True)
class DeployedMapping:
    kind: str      # "sqs" | "dynamodb"
    uuid: str
    source_arn: str
    name: str      # Chalice's resource name, e.g. backup_monitor-sqs-event-source


def deployed_mappings(deployed_file: Path) -> list[DeployedMapping]:
    """The SQS and DynamoDB-stream mappings recorded in .chalice/deployed/<stage>.json."""
    data = json.loads(deployed_file.read_text())
    out: list[DeployedMapping] = []
    for resource in data.get("resources", []):
        kind = {"sqs_event": "sqs", "dynamodb_event": "dynamodb"}.get(resource.get("resource_type", ""))
        if kind:
            source = resource.get("queue_arn") or resource.get("stream_arn") or ""
            out.append(DeployedMapping(kind, resource["event_uuid"], source, resource.get("name", "")))
    return out


def _differs(key: str, want: Any, have: Any) -> bool:
    if key == "FilterCriteria":
        want_set = sorted(json.dumps(json.loads(f["Pattern"]), sort_keys=True) for f in want.get("Filters", []))
        have_set = sorted(json.dumps(json.loads(f["Pattern"]), sort_keys=True)
                          for f in (have or {}).get("Filters", []))
        return want_set != have_set
    if key == "FunctionResponseTypes":
        return sorted(want) != sorted(have or [])
    if key == "ScalingConfig":
        return bool(want.get("MaximumConcurrency") != (have or {}).get("MaximumConcurrency"))
    if key == "DestinationConfig":
        return bool(want["OnFailure"].get("Destination")) and \
            (have or {}).get("OnFailure", {}).get("Destination") != want["OnFailure"]["Destination"]
    return bool(want != have)


def apply(lambda_client: Any, mappings: Sequence[DeployedMapping], options: EventSourceOptions,
          on_failure_arn: str, executor_max_concurrency: int = 0) -> list[str]:
    """Bring each mapping to the settings; returns what changed (empty when nothing had to)."""
    changes: list[str] = []
    for mapping in mappings:
        executor = mapping.name.startswith(f"{EXECUTOR_FUNCTION}-")
        want = (sqs_settings(options, executor_max_concurrency if executor else None) if mapping.kind == "sqs"
                else stream_settings(options, on_failure_arn))
        have = lambda_client.get_event_source_mapping(UUID=mapping.uuid)
        drift = {k: v for k, v in want.items() if _differs(k, v, have.get(k))}
        if drift:
            lambda_client.update_event_source_mapping(UUID=mapping.uuid, **drift)
            changes.append(f"event source {mapping.name or mapping.uuid}: set {', '.join(sorted(drift))}")
    return changes


TASKS_STREAM_FUNCTION = "task_stream"  # app.py's function on the tasks table's stream


def sam_event_overrides(app: Chalice, options: EventSourceOptions, on_failure_arn: Any,
                        stream_table: str, executor_max_concurrency: int = 0) -> dict[str, Any]:
    """The same settings as SAM event properties, keyed by the function's CloudFormation resource;
    a stream event reads the stream of the template's ``stream_table`` resource."""
    resources: dict[str, Any] = {}
    for source in app.event_sources:
        if isinstance(source, SQSEventConfig):
            props = sqs_settings(options, executor_max_concurrency if source.name == EXECUTOR_FUNCTION else None)
            if not props.get("ScalingConfig", True):
                del props["ScalingConfig"]
            suffix = "sqs-event-source"
        elif isinstance(source, DynamoDBEventConfig):
            props = stream_settings(options, "")
            # The tasks table is the template's own resource; a task source's table is the user's (its ARN).
            props["Stream"] = ({"Fn::GetAtt": [stream_table, "StreamArn"]} if source.name == TASKS_STREAM_FUNCTION
                               else source.stream_arn)
            props["DestinationConfig"] = {"OnFailure": {"Type": "SQS", "Destination": on_failure_arn}}
            if not props["FilterCriteria"]["Filters"]:
                del props["FilterCriteria"]
            suffix = "dynamodb-event-source"
        else:
            continue
        if not props.get("FunctionResponseTypes"):
            props.pop("FunctionResponseTypes", None)
        function = to_cfn_resource_name(source.name)
        event = to_cfn_resource_name(f"{source.name}-{suffix}")
        resources[function] = {"Properties": {"Events": {event: {"Properties": props}}}}
    return resources
