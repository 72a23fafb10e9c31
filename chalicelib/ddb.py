"""DynamoDB plumbing: plain Python values <-> DynamoDB JSON, shared by the stores.

DynamoDB JSON comes in two spellings of binary values: boto3's (``{"B": b"..."}``,
what the client takes and returns) and the wire's (``{"B": "<base64>"}``, what
Lambda's stream events and our own JSON messages carry).  ``binary_as_text``
and ``binary_as_bytes`` convert an item between them; everything else is kept
exactly (numbers as their strings, sets as sets, nested maps and lists).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import DYNAMODB_CONTEXT, TypeDeserializer, TypeSerializer

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def is_number(text: str) -> bool:
    """True when ``text`` is a number DynamoDB holds (finite, at most 38 significant digits, within DynamoDB's
    range): what boto3's deserializer reads without error."""
    try:
        number = DYNAMODB_CONTEXT.create_decimal(text)
    except (ArithmeticError, ValueError, TypeError):
        return False
    return number.is_finite()


def canonical_number(text: str) -> str:
    """One spelling per number, as DynamoDB gives numbers back: no exponent, no leading zeros, no trailing zeros
    after the point ("42.0", "4.2E1" and "042" are "42").  ``text`` must be one (``is_number``)."""
    number = DYNAMODB_CONTEXT.create_decimal(text)
    return "0" if number.is_zero() else format(number.normalize(DYNAMODB_CONTEXT), "f")


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        if not value.is_finite():  # no DynamoDB number: a forged record's NaN or Infinity
            raise ValueError(f"{value} is not a DynamoDB number")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, set):  # in one order whatever the process's hash seed: an item reads the same everywhere
        return [_from_dynamo(v) for v in sorted(value, key=repr)]
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    """A plain dict (ints, floats, strs, bools, None, lists, dicts) as DynamoDB JSON."""
    return {k: _serializer.serialize(_to_dynamo(v)) for k, v in item.items()}


def value(v: Any) -> Any:
    return _serializer.serialize(_to_dynamo(v))


def deserialize(item: Mapping[str, Any]) -> dict[str, Any]:
    """DynamoDB JSON (as from GetItem or a stream image) as a plain dict; whole numbers as int."""
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in item.items()}


def _convert_binary(value: Any, convert: Any) -> Any:
    """One attribute value (DynamoDB JSON) with its binary parts passed through ``convert``."""
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(f"not a DynamoDB JSON attribute value: {value!r}"[:200])
    [(kind, inner)] = value.items()
    if kind == "B":
        return {"B": convert(inner)}
    if kind == "BS":
        return {"BS": [convert(v) for v in inner]}
    if kind == "M":
        return {"M": {k: _convert_binary(v, convert) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_convert_binary(v, convert) for v in inner]}
    return {kind: inner}


def _to_text(raw: Any) -> str:
    return raw if isinstance(raw, str) else base64.b64encode(bytes(raw)).decode()


def _to_bytes(raw: Any) -> bytes:
    if isinstance(raw, str):
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"a binary value is not base64: {raw[:40]!r}") from exc
    return bytes(raw.value if hasattr(raw, "value") else raw)


def binary_as_text(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item in DynamoDB JSON with binary values as base64 text (JSON-safe, as Lambda delivers it)."""
    return {k: _convert_binary(v, _to_text) for k, v in item.items()}


def binary_as_bytes(item: Mapping[str, Any]) -> dict[str, Any]:
    """An item in DynamoDB JSON with binary values as bytes (what boto3's client takes); ValueError if malformed."""
    return {k: _convert_binary(v, _to_bytes) for k, v in item.items()}
