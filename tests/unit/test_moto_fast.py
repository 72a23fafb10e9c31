"""tests/moto_fast.py's shortcuts give what they bypass: moto's serialized answer to the byte, botocore's validation
report to the letter; and they are taken (fewer generic steps), and taken off after the block."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
from botocore.validate import ParamValidator
from moto.core.serialize import BaseJSONSerializer, JSONSerializer, XFormedAttributePicker
from moto.core.utils import get_service_model

from tests.moto_fast import attribute_values_fast

MODEL = botocore.session.get_session().get_service_model("dynamodb")  # botocore's, as a client validates
MOTO_MODEL = get_service_model("dynamodb")  # moto's, as its handler serializes
PUT_ITEM: Any = MODEL.operation_model("PutItem").input_shape
QUERY_OUTPUT: Any = MODEL.operation_model("Query").output_shape

PLAIN: list[dict[str, Any]] = [
    {"S": "text"}, {"S": ""}, {"N": "12.5"}, {"SS": ["a", "b"]}, {"NS": ["1", "2"]}, {"NULL": True},
    {"BOOL": False}, {"BOOL": True}, {"L": []}, {"M": {}},
    {"M": {"a": {"S": "x"}, "b": {"L": [{"N": "1"}, {"M": {"c": {"BOOL": True}, "d.e": {"S": "é"}}}]}}},
    {"L": [{"SS": ["x"]}, {"NULL": True}, {"L": [{"L": []}]}]},
]
ODD: list[Any] = [  # not plain: the generic path's answer or report, whatever it is
    {"B": b"\x00\xff"}, {"B": "aGk="}, {"BS": [b"a"]}, {"S": None}, {"S": 5}, {"N": 1}, {}, {"S": "a", "N": "1"},
    {"X": "unknown"}, {"SS": ["a", 1]}, {"SS": ("a",)}, {"L": ({"S": "t"},)}, {"L": [None]}, {"M": []},
    {"M": {"k": {"S": 1}}}, {"M": {1: {"S": "x"}}}, {"NULL": "yes"}, {"BOOL": 1}, "S", None, [{"S": "x"}],
    {"M": {"k": {"B": b"x"}, "j": {"S": "fine"}}}, {"L": [{"S": "ok"}, {"Q": "bad"}]}, {"M": {"": {"S": "x"}}},
]


class _CountingPicker(XFormedAttributePicker):
    calls = 0

    def __call__(self, context: Any) -> Any:
        _CountingPicker.calls += 1
        return super().__call__(context)


def _query_answer(items: list[Any]) -> tuple[str, int]:
    """moto's serialized Query answer with these items (or the error it raised), and how many members its
    picker looked up."""
    _CountingPicker.calls = 0
    serializer = JSONSerializer(operation_model=MOTO_MODEL.operation_model("Query"), value_picker=_CountingPicker())
    try:
        body = str(serializer.serialize({"Items": items, "Count": len(items), "ScannedCount": len(items)})["body"])
    except Exception as exc:
        body = repr(exc)
    return body, _CountingPicker.calls


def _report(value: Any) -> str:
    """botocore's validation report of a PutItem with ``value`` as an attribute and in a map."""
    params = {"TableName": "t", "Item": {"PK": {"S": "k"}, "v": value, "m": {"M": {"v": value}}}}
    return str(ParamValidator().validate(params, PUT_ITEM).generate_report())


def test_moto_serializes_every_value_as_without_the_shortcut_and_skips_its_picker_for_plain_ones() -> None:
    items = [[{"PK": {"S": "k"}, "v": value}] for value in PLAIN + ODD] + [[{"PK": {"S": "k"}, "v": v} for v in PLAIN]]
    generic = [_query_answer(answer) for answer in items]
    with attribute_values_fast():
        fast = [_query_answer(answer) for answer in items]

    assert [body for body, _ in fast] == [body for body, _ in generic]
    assert fast[-1][1] < generic[-1][1] / 10  # the plain values: moto's picker skipped
    assert [_query_answer(answer) for answer in items] == generic  # taken off after the block


def test_botocore_reports_every_value_as_without_the_shortcut() -> None:
    generic = [_report(value) for value in PLAIN + ODD]
    with attribute_values_fast():
        fast = [_report(value) for value in PLAIN + ODD]

    assert fast == generic
    assert generic[:len(PLAIN) + 3] == [""] * (len(PLAIN) + 3)  # the plain values and the binary ones pass
    assert sum(1 for r in generic if r) >= len(ODD) // 2  # most other odd values are refused


def test_botocore_checks_fewer_values_with_the_shortcut_and_all_of_them_after_it() -> None:
    checked: list[str] = []

    def strings_checked() -> int:
        checked.clear()
        validator: Any = ParamValidator()
        check_string = validator._validate_string

        def counted(param: Any, shape: Any, errors: Any, name: str) -> None:
            checked.append(name)
            check_string(param, shape, errors, name)
        validator._validate_string = counted
        validator.validate({"TableName": "t", "Item": {f"a{i}": value for i, value in enumerate(PLAIN)}}, PUT_ITEM)
        return len(checked)

    before = strings_checked()
    with attribute_values_fast():
        during = strings_checked()
    assert during == 1 + len(PLAIN) < before  # the table's name and the attributes' names: no value in them
    assert strings_checked() == before
    validator: Any = ParamValidator
    assert BaseJSONSerializer._serialize.__qualname__ == "ResponseSerializer._serialize"
    assert validator._validate.__qualname__ == "ParamValidator._validate"


def _walks(value: Any) -> tuple[str, str, str]:
    """What botocore sends for a PutItem with ``value`` (as an attribute and in a map), what moto parses from that
    body, and what botocore parses from a Query answer holding such an item: each, or the error it raised."""
    from botocore.parsers import create_parser
    from botocore.serialize import create_serializer
    from moto.core.parse import JSONParser

    item = {"PK": {"S": "k"}, "v": value, "m": {"M": {"v": value}}, "l": {"L": [value]}}
    out: list[str] = []
    for walk in (
            lambda: create_serializer("json").serialize_to_request(
                {"TableName": "t", "Item": item}, MODEL.operation_model("PutItem"))["body"],
            lambda: JSONParser(MOTO_MODEL.operation_model("PutItem")).parse({  # type: ignore[typeddict-item]
                "body": json.dumps({"TableName": "t", "Item": item}).encode(), "headers": {}}),
            lambda: create_parser("json").parse(
                {"body": json.dumps({"Items": [item], "Count": 1}).encode(), "headers": {}, "status_code": 200},
                QUERY_OUTPUT)):
        try:
            result = walk()
        except Exception as exc:
            result = exc
        out.append(f"{type(result).__name__} {result!r}")
    return out[0], out[1], out[2]


def test_botocore_and_moto_send_and_parse_every_value_as_without_the_shortcut() -> None:
    values = PLAIN + ODD
    generic = [_walks(value) for value in values]
    with attribute_values_fast():
        fast = [_walks(value) for value in values]

    assert fast == generic
    assert [_walks(value) for value in values] == generic
    assert all("Error" not in walk for walks in generic[:len(PLAIN)] for walk in walks)
