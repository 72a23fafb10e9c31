"""Speed-only shortcuts for the tests' in-process AWS: the same answers, the same errors, in less time.

Nothing here changes what a request answers or which request is refused (tests/unit/test_moto_fast.py compares
each shortcut with the machinery it bypasses); local/moto_corrections.py holds the patches that change moto's
answers, and local/moto_speed.py the offline runtime's own speed-ups, which the tests never install.

A state item of a large backup run holds tens of thousands of DynamoDB attribute values, each walked member by
member through generic, shape-driven code: botocore's parameter validation of a request, and moto's response
serializer (six alias lookups a member, a method found by name a value). At 10,000 tables, reading a run back
spent most of its time there. Within ``attribute_values_fast()``:

* **moto's JSON serializer** encodes a DynamoDB ``AttributeValue`` that holds only plain values (one member of
  S, N, SS, NS, M, L, NULL, BOOL; strings, lists and dicts of them, booleans; names that are non-empty
  strings) straight into what its generic path produces; anything else (a binary, a None, a value of another
  type, a response transformer) goes through moto's own path, errors included.
* **botocore's parameter validation** skips an ``AttributeValue`` that its checks would pass (every member known,
  each value of the type its shape allows, and no constraint on those shapes beyond types); any other value
  goes through botocore's checks, which report what they always reported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_MEMBERS = (("S", "string"), ("N", "string"), ("B", "blob"), ("SS", "list"), ("NS", "list"), ("BS", "list"),
            ("M", "map"), ("L", "list"), ("NULL", "boolean"), ("BOOL", "boolean"))


class _NotPlain(Exception):
    """A value the shortcut does not handle: the generic path takes it."""


def _is_attribute_value(shape: Any, known: dict[int, tuple[Any, bool]]) -> bool:
    """Whether ``shape`` is DynamoDB's AttributeValue, as this module knows it (checked once a shape object)."""
    if getattr(shape, "name", None) != "AttributeValue":
        return False
    found = known.get(id(shape))
    if found is None or found[0] is not shape:
        members = getattr(shape, "members", None) or {}
        fits = shape.type_name == "structure" and tuple(
            (name, member.type_name) for name, member in members.items()) == _MEMBERS
        if fits:  # no constraint botocore validates beyond types, no serialized name, no special case
            nested = [members["M"].key, *(members[n] for n, _ in _MEMBERS),
                      members["SS"].member, members["NS"].member, members["L"].member]
            fits = members["M"].value is not None and members["M"].value.name == "AttributeValue" and \
                members["L"].member.name == "AttributeValue" and not shape.metadata and all(
                    not {"min", "required", "document", "union", "jsonvalue"} & set(s.metadata)
                    and not s.serialization for s in nested if s.name != "AttributeValue") and \
                not getattr(shape, "is_document_type", False) and not getattr(shape, "is_tagged_union", False)
        found = known[id(shape)] = (shape, fits)
    return found[1]


def encode(value: Any) -> Any:
    """An AttributeValue as moto's JSON serializer writes it, if plain (else _NotPlain)."""
    if type(value) is not dict or len(value) != 1:
        raise _NotPlain
    ((kind, inner),) = value.items()
    if kind in ("S", "N"):
        if type(inner) is not str:
            raise _NotPlain
        return {kind: inner}
    if kind in ("SS", "NS"):
        if type(inner) is not list or any(type(s) is not str for s in inner):
            raise _NotPlain
        return {kind: list(inner)}
    if kind == "M":
        if type(inner) is not dict or any(type(k) is not str or not k for k in inner):
            raise _NotPlain  # moto writes an empty name's value into the map itself
        return {"M": {k: encode(v) for k, v in inner.items()}}
    if kind == "L":
        if type(inner) is not list:
            raise _NotPlain
        return {"L": [encode(v) for v in inner]}
    if kind in ("NULL", "BOOL"):
        if type(inner) is not bool:
            raise _NotPlain
        return {kind: inner}
    raise _NotPlain  # B, BS, or not a member


def passes(value: Any) -> bool:
    """Whether botocore's validation finds nothing wrong with this AttributeValue (False: it may, ask it)."""
    if not isinstance(value, dict):
        return False
    for kind, inner in value.items():
        if kind in ("S", "N"):
            if not isinstance(inner, str):
                return False
        elif kind in ("SS", "NS"):
            if not isinstance(inner, list | tuple) or not all(isinstance(s, str) for s in inner):
                return False
        elif kind == "M":
            if not isinstance(inner, dict) or not all(isinstance(k, str) and passes(v) for k, v in inner.items()):
                return False
        elif kind == "L":
            if not isinstance(inner, list | tuple) or not all(passes(v) for v in inner):
                return False
        elif kind in ("NULL", "BOOL"):
            if not isinstance(inner, bool):
                return False
        else:  # B, BS (checked by botocore), or an unknown member (reported)
            return False
    return True


@contextlib.contextmanager
def attribute_values_fast() -> Iterator[None]:
    """The shortcuts (see the module's docstring) installed for the block, then taken off."""
    from botocore.validate import ParamValidator
    from moto.core.serialize import BaseJSONSerializer

    serializer: Any = BaseJSONSerializer
    validator: Any = ParamValidator
    original_serialize = serializer._serialize
    original_validate = validator._validate
    serialized_shapes: dict[int, tuple[Any, bool]] = {}
    validated_shapes: dict[int, tuple[Any, bool]] = {}

    def _serialize(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if type(key) is str and key and _is_attribute_value(shape, serialized_shapes) \
                and self.service_model.service_name == "dynamodb" \
                and not getattr(self._value_picker, "response_transformers", None):
            try:
                encoded = encode(value)
            except _NotPlain:
                pass
            else:
                serialized[self.get_serialized_name(shape, key)] = encoded
                return
        original_serialize(self, serialized, value, shape, key)

    def _validate(self: Any, params: Any, shape: Any, errors: Any, name: str) -> None:
        if _is_attribute_value(shape, validated_shapes) and passes(params):
            return
        original_validate(self, params, shape, errors, name)

    serializer._serialize, validator._validate = _serialize, _validate
    try:
        yield
    finally:
        serializer._serialize, validator._validate = original_serialize, original_validate
