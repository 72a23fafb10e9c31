"""The lambda, eventbridge and stepfunctions actions' pure rules: their fields (JSON objects within AWS's limits),
their targets (allowed by TASK_ACTION_TARGET_ARNS, never the app's own functions), their templates in a task
source, and the Step Functions execution name that makes a second start of one execution impossible."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.settings import Settings
from chalicelib.sources import SourceError, parse_sources
from chalicelib.tasks.actions import (
    EXECUTION_NAME,
    JSON_FIELD_LIMIT,
    JsonObject,
    execution_name,
    own_targets,
    target_refusal,
)
from chalicelib.tasks.model import InvalidTask, TaskKey, parse_action, task_from_source_item

ACCOUNT = "123456789012"
FUNCTION = f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:billing"
BUS = f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/shop"
MACHINE = f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:fulfil"
SETTINGS = Settings.from_env({"STAGE": "prod", "TASK_ACTION_TARGET_ARNS": (
    f"arn:aws:lambda:*:{ACCOUNT}:function:*,{BUS},{MACHINE}")})
DUE = datetime(2026, 11, 22, 12, 10, tzinfo=UTC)


# --- the execution name -----------------------------------------------------------------------------

def test_an_execution_is_named_by_its_task_and_due_time_and_hashed_when_the_task_id_cannot_be_a_name() -> None:
    assert execution_name("ship", DUE) == "ship-20261122T121000Z"
    assert execution_name("ship", DUE + timedelta(milliseconds=5)) == "ship-20261122T121000005Z"
    hashed = execution_name("orders/{\"id\":{\"S\":\"a b\"}}", DUE)
    assert hashed.startswith("orders__") and "-20261122T121000Z-" in hashed and EXECUTION_NAME.fullmatch(hashed)
    assert execution_name("x" * 90, DUE) != execution_name("x" * 91, DUE)


task_ids = st.text(alphabet=st.sampled_from("ab-_/|{}é 9"), min_size=1, max_size=100)
dues = st.integers(0, 4_000_000_000).map(lambda ms: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms))


@settings(max_examples=60, deadline=None)
@given(first=st.tuples(task_ids, dues), second=st.tuples(task_ids, dues))
def test_every_execution_name_is_valid_and_two_executions_never_share_one(
        first: tuple[str, datetime], second: tuple[str, datetime]) -> None:
    name = execution_name(*first)
    assert EXECUTION_NAME.fullmatch(name), name  # 1-80 of [A-Za-z0-9_-]
    assert name == execution_name(*first)  # a redelivery derives the same one
    if first != second:
        assert name != execution_name(*second)


# --- JSON fields ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value, says", [
    ("{}", "must be a JSON object, got str"),
    ([1], "must be a JSON object, got list"),
    ({"x": "y" * JSON_FIELD_LIMIT}, f"more than {JSON_FIELD_LIMIT}"),
    ({"x": float("nan")}, "must hold JSON values only"),
    ({"x": b"\x00"}, "must hold JSON values only"),
    ({"x": 10 ** 40}, "which DynamoDB cannot hold"),
    ({"x": 1e-200}, "which DynamoDB cannot hold"),
    ({"x": {"": 1}}, "an empty key"),
    (json.loads('{"x":' * 32 + "1" + "}" * 32), "nested more than 32 levels"),
])
def test_a_json_field_is_an_object_aws_and_dynamodb_take(value: Any, says: str) -> None:
    problem = JsonObject()(value)
    assert problem is not None and says in problem
    assert JsonObject()({"x": [1, 2.5, None, True, {"y": "z" * 1000}], "n": 10 ** 37}) is None


@pytest.mark.parametrize("spec, field, says", [
    ({"type": "lambda", "function_arn": FUNCTION}, "action.payload", "is required and must be a JSON object"),
    ({"type": "lambda", "function_arn": FUNCTION, "payload": "{}"}, "action.payload", "must be a JSON object"),
    ({"type": "lambda", "function_arn": BUS, "payload": {}}, "action.function_arn", "not a Lambda function"),
    ({"type": "eventbridge", "event_bus_arn": BUS, "source": "aws.ec2", "detail_type": "d", "detail": {}},
     "action.source", "must not start with 'aws.'"),
    ({"type": "eventbridge", "event_bus_arn": BUS, "source": "s", "detail_type": "d" * 257, "detail": {}},
     "action.detail_type", "at most 256 bytes"),
    ({"type": "eventbridge", "event_bus_arn": BUS, "source": "s", "detail_type": "a\nb", "detail": {}},
     "action.detail_type", "one line"),
    ({"type": "stepfunctions", "state_machine_arn": MACHINE, "input": {}, "name": "mine"}, "action.name",
     "unknown field"),
])
def test_an_action_spec_with_a_bad_field_names_it(spec: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidTask) as refused:
        parse_action(spec)
    assert refused.value.field == field and says in refused.value.message


def test_a_valid_spec_keeps_its_json_object_as_it_is() -> None:
    payload = {"order": 42, "lines": [{"sku": "a", "qty": 1.5}]}
    assert parse_action({"type": "lambda", "function_arn": f"{FUNCTION}:live", "payload": payload}) == {
        "type": "lambda", "function_arn": f"{FUNCTION}:live", "payload": payload}


# --- targets ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, refused", [
    ({"type": "lambda", "function_arn": FUNCTION}, None),
    ({"type": "lambda", "function_arn": f"{FUNCTION}:live"}, None),
    ({"type": "lambda", "function_arn": f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:timekeeper-prod"}, "own"),
    ({"type": "lambda", "function_arn": f"arn:aws:lambda:us-east-1:{ACCOUNT}:function:timekeeper-prod:7"}, "own"),
    ({"type": "lambda", "function_arn": f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:timekeeper-prod-source_x"},
     "own"),
    ({"type": "lambda", "function_arn": "arn:aws:lambda:us-east-1:999999999999:function:billing"}, "allows"),
    ({"type": "eventbridge", "event_bus_arn": BUS}, None),
    ({"type": "eventbridge", "event_bus_arn": f"arn:aws:events:us-east-1:{ACCOUNT}:event-bus/default"}, "allows"),
    ({"type": "stepfunctions", "state_machine_arn": MACHINE}, None),
    ({"type": "stepfunctions", "state_machine_arn": MACHINE + "2"}, "allows"),
])
def test_a_target_is_allowed_by_the_list_and_the_apps_own_functions_never_are(
        spec: dict[str, Any], refused: str | None) -> None:
    found = target_refusal(spec, SETTINGS.task_action_target_arns, SETTINGS.region, own_targets(SETTINGS))
    if refused is None:
        assert found is None
    else:
        assert found is not None and found[0] == next(k for k in spec if k != "type") and refused in found[1]


@pytest.mark.parametrize("arn", [FUNCTION, f"{FUNCTION}:$LATEST", "arn:aws:lambda:*:*:function:*", BUS,
                                 "arn:aws:events:*:*:event-bus/*", MACHINE, "arn:aws:states:*:*:stateMachine:*"])
def test_the_stage_lists_functions_buses_and_state_machines_as_targets(arn: str) -> None:
    assert Settings.from_env({"TASK_ACTION_TARGET_ARNS": arn}).task_action_target_arns == (arn,)


# --- task source templates ----------------------------------------------------------------------------

def test_a_sources_json_field_is_an_object_of_templates_a_lone_placeholder_taking_the_attributes_value() -> None:
    [source] = parse_sources(json.dumps({"orders": {"table": "orders", "due_attribute": "due", "action": {
        "type": "lambda", "function_arn": FUNCTION,
        "payload": {"order": "{id}", "lines": "{lines}", "note": "order {id} is due", "fixed": [1, {"a": True}]}}}}))
    item = {"id": "o-1", "due": "2026-11-22T12:10:00Z", "lines": [{"sku": "a", "qty": 2}]}
    task = task_from_source_item(item, TaskKey.of_source("orders", {"id": {"S": "o-1"}}), source, SETTINGS)
    assert task.action["payload"] == {"order": "o-1", "lines": [{"sku": "a", "qty": 2}], "note": "order o-1 is due",
                                      "fixed": [1, {"a": True}]}
    with pytest.raises(InvalidTask) as missing:
        task_from_source_item({"id": "o-2", "due": "2026-11-22T12:10:00Z"},
                              TaskKey.of_source("orders", {"id": {"S": "o-2"}}), source, SETTINGS)
    assert missing.value.field == "lines"


@pytest.mark.parametrize("action, field", [
    ({"type": "stepfunctions", "state_machine_arn": MACHINE, "input": "{id}"}, "action.input"),
    ({"type": "stepfunctions", "state_machine_arn": MACHINE, "input": {"x": "{bad name}"}}, "action.input"),
    ({"type": "eventbridge", "event_bus_arn": BUS, "source": "aws.x", "detail_type": "d", "detail": {}},
     "action.source"),
])
def test_a_sources_bad_template_of_a_new_action_is_refused_naming_the_field(action: dict[str, Any],
                                                                             field: str) -> None:
    with pytest.raises(SourceError) as refused:
        parse_sources(json.dumps({"orders": {"table": "orders", "due_attribute": "due", "action": action}}))
    assert refused.value.field == field
