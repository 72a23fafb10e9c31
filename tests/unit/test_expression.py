"""The expression builder (chalicelib/expression.py): what it renders, and that it never emits a name or a value
no expression uses (AWS refuses those; moto takes them)."""

from __future__ import annotations

from typing import Any

import pytest
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.models.dynamo_type import DynamoType, Item

from chalicelib import ddb
from chalicelib.expression import Update, all_of, any_of, attr, if_not_exists, list_append, param, referenced, render, suffixed, value, when
from tests.aws_limits import LimitExceeded, check_placeholders


def holds(rendered: Any, record: dict[str, Any]) -> bool:
    """DynamoDB's verdict (moto's evaluator) on ``record`` for the rendered condition."""
    args = rendered.arguments()
    expression = get_filter_expression(args["ConditionExpression"], args.get("ExpressionAttributeNames"),
                                       args.get("ExpressionAttributeValues"))
    item = Item(DynamoType({"S": "k"}), None, {**ddb.serialize(record), "PK": {"S": "k"}})
    return bool(expression.expr(item))


def test_a_condition_renders_every_name_and_value_through_one_placeholder_each() -> None:
    status = attr("status")
    condition = all_of(any_of(status.missing(), status.ne(value("PAUSED"))),
                       any_of(attr("exec_due").missing(), attr("exec_due_ms").lt(param("due_ms"))),
                       attr("note", "sequence").le(param("due_ms")), status.is_in(value("A"), value("PAUSED")))
    rendered = render(condition=condition, params={"due_ms": 5, "unused": 1})
    assert rendered.condition == ("(attribute_not_exists(#status) OR #status <> :PAUSED) AND (attribute_not_exists("
                                  "#exec_due) OR #exec_due_ms < :due_ms) AND #note.#sequence <= :due_ms AND "
                                  "#status IN (:A, :PAUSED)")
    assert rendered.names == {f"#{n}": n for n in ("status", "exec_due", "exec_due_ms", "note", "sequence")}
    assert rendered.values == {":PAUSED": "PAUSED", ":due_ms": 5, ":A": "A"}
    assert holds(rendered, {"status": "A", "exec_due_ms": 4, "note": {"sequence": 5}})
    assert not holds(rendered, {"status": "PAUSED"})
    assert not holds(rendered, {"status": "A", "exec_due": "x", "exec_due_ms": 5, "note": {"sequence": 5}})


def test_an_update_sets_removes_and_adds_in_that_order_and_a_marked_value_is_removed() -> None:
    absent = object()
    update = (Update().set("id", if_not_exists(attr("id"), param("id")))
              .set_values({"status": "PENDING", "status_key": absent, "attempts": 0}, absent)
              .set("h", list_append(if_not_exists(attr("h"), value([])), value([{"a": 1}])))
              .remove("dead_letter").add("hn", value(1)))
    rendered = render(update, attr("status").exists(), {"id": "t"})
    assert rendered.update == ("SET #id = if_not_exists(#id, :id), #status = :PENDING, #attempts = :v0, "
                               "#h = list_append(if_not_exists(#h, :v1), :v2) REMOVE #status_key, #dead_letter "
                               "ADD #hn :v3")
    args = rendered.arguments()
    assert args["ExpressionAttributeValues"][":v0"] == {"N": "0"}
    assert args["ConditionExpression"] == "attribute_exists(#status)"
    check_placeholders(args, "built")  # every name and value used


def test_a_name_that_is_no_placeholder_token_gets_a_numbered_one_never_taken_twice() -> None:
    rendered = render(Update().set("n0", value(1)).set("a-b", value(2)).set("c d", value(3)))
    assert rendered.update == "SET #n0 = :v0, #n1 = :v1, #n2 = :v2"
    assert rendered.names == {"#n0": "n0", "#n1": "a-b", "#n2": "c d"}


def test_a_switched_part_is_left_out_unless_its_flag_is_given_true_and_nested_parts_are_flattened() -> None:
    condition = any_of(attr("a").missing(), any_of(attr("b").exists(), when("stuck", attr("c").eq(value(1)))))
    assert render(condition=condition).condition == "attribute_not_exists(#a) OR attribute_exists(#b)"
    assert render(condition=condition, params={"stuck": True}).condition == \
        "attribute_not_exists(#a) OR attribute_exists(#b) OR #c = :v0"
    assert render(condition=when("stuck", attr("c").exists())).condition is None


def test_overlapping_paths_a_missing_parameter_and_an_empty_update_are_refused() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        render(Update().set("a", value(1)).remove("a"))
    with pytest.raises(ValueError, match="overlapping"):
        render(Update().set("a", value(1)).set(attr("a", "b"), value(2)))
    with pytest.raises(KeyError, match="due"):
        render(condition=attr("a").eq(param("due")))
    with pytest.raises(ValueError):
        render(Update())
    with pytest.raises(ValueError, match="top-level"):  # AWS: ADD takes top-level attributes only
        Update().add(attr("summary", "count"), value(1))


def test_a_condition_without_values_carries_no_values_map() -> None:
    assert render(condition=all_of(None, attr("PK").missing())).arguments() == {
        "ConditionExpression": "attribute_not_exists(#PK)", "ExpressionAttributeNames": {"#PK": "PK"}}
    assert render(Update().remove("x")).arguments() == {  # an update of only the clauses it has
        "UpdateExpression": "REMOVE #x", "ExpressionAttributeNames": {"#x": "x"}}


def test_a_map_key_given_as_a_parameter_is_named_after_it_and_suffixed_parts_take_their_own() -> None:
    status = attr("tables", param("table"), "status")
    one = (Update().set(status, value("AVAILABLE")), status.eq(param("from")))
    assert render(*one, params={"table": "a-b", "from": "PENDING"}).arguments() == {
        "UpdateExpression": "SET #tables.#table.#status = :AVAILABLE",
        "ConditionExpression": "#tables.#table.#status = :from",
        "ExpressionAttributeNames": {"#tables": "tables", "#table": "a-b", "#status": "status"},
        "ExpressionAttributeValues": {":AVAILABLE": {"S": "AVAILABLE"}, ":from": {"S": "PENDING"}}}
    both = render(suffixed(one[0], "0").then(suffixed(one[0], "1")),
                  all_of(suffixed(one[1], "0"), suffixed(one[1], "1")),
                  {"table0": "a", "table1": "b", "from0": "PENDING", "from1": "PENDING"})
    assert both.update == "SET #tables.#table0.#status = :AVAILABLE, #tables.#table1.#status = :AVAILABLE"
    assert both.condition == "#tables.#table0.#status = :from0 AND #tables.#table1.#status = :from1"
    assert both.names == {"#tables": "tables", "#table0": "a", "#table1": "b", "#status": "status"}
    with pytest.raises(ValueError, match="overlapping"):  # one key given twice: one path written twice
        render(suffixed(one[0], "0").then(suffixed(one[0], "1")), params={"table0": "a", "table1": "a"})


def test_the_limits_refuse_an_unused_name_or_value_and_an_empty_map_as_aws_does() -> None:
    assert referenced("SET #a = :b, #c.#d = list_append(:e_1, #f) REMOVE g") == {"#a", ":b", "#c", "#d", ":e_1", "#f"}
    check_placeholders({"UpdateExpression": "SET #a = :b", "ExpressionAttributeNames": {"#a": "a"},
                        "ExpressionAttributeValues": {":b": {"N": "1"}}}, "ok")
    with pytest.raises(LimitExceeded, match="unused"):
        check_placeholders({"UpdateExpression": "SET a = :b", "ExpressionAttributeNames": {"#a": "a"},
                            "ExpressionAttributeValues": {":b": {"N": "1"}}}, "names")
    with pytest.raises(LimitExceeded, match="unused"):
        check_placeholders({"ConditionExpression": "#a = :b", "ExpressionAttributeNames": {"#a": "a"},
                            "ExpressionAttributeValues": {":b": {"N": "1"}, ":c": {"N": "2"}}}, "values")
    with pytest.raises(LimitExceeded, match="empty"):
        check_placeholders({"ConditionExpression": "a = b", "ExpressionAttributeNames": {}}, "empty")
