"""Speed-only shortcuts for the tests' in-process AWS: the same answers, the same errors, in less time.

Nothing here changes what a request answers or which request is refused (tests/unit/test_moto_fast.py compares
each shortcut with the machinery it bypasses); local/moto_corrections.py holds the patches that change moto's
answers, and local/moto_speed.py the offline runtime's own speed-ups, which the tests never install.

A state item of a large backup run holds tens of thousands of DynamoDB attribute values, each walked member by
member through generic, shape-driven code five times a request: botocore validates and serializes the request,
moto parses it, moto serializes the answer (six alias lookups a member, a method found by name a value) and
botocore parses it. At 10,000 tables, reading a run back spent most of its time there. Within
``attribute_values_fast()``, a DynamoDB ``AttributeValue`` that holds only plain values (one member of S, N, SS,
NS, M, L, NULL, BOOL; strings, lists and dicts of them, booleans; names that are non-empty strings) is
converted in one step into what each generic walk makes of it (``encode``), and botocore's validation skips one
its checks would pass (``passes``: every member known, each value of the type its shape allows, the shapes
constrained by nothing but types). Anything else (a binary, a None, a value of another type, a response
transformer, another protocol's parser or serializer) goes the generic way, errors included.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_MEMBERS = (("S", "string"), ("N", "string"), ("B", "blob"), ("SS", "list"), ("NS", "list"), ("BS", "list"),
            ("M", "map"), ("L", "list"), ("NULL", "boolean"), ("BOOL", "boolean"))


class _NotPlain(Exception):
    """A value the shortcut does not handle: the generic path takes it."""


_NOT_PLAIN = object()


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
    from botocore import parsers, serialize, validate
    from moto.core import parse
    from moto.core import serialize as moto_serialize

    known: dict[int, tuple[Any, bool]] = {}  # AttributeValue or not, by shape object
    response_serializer: Any = moto_serialize.BaseJSONSerializer
    request_parser: Any = parse.JSONParser
    validator: Any = validate.ParamValidator
    request_serializer: Any = serialize.JSONSerializer
    response_parser: Any = parsers.JSONParser
    serialize_response, parse_request, validate_request, serialize_request, parse_response = (
        response_serializer._serialize, request_parser._parse_shape, validator._validate,
        request_serializer._serialize, response_parser._parse_shape)

    def encoded(value: Any) -> Any:
        try:
            return encode(value)
        except _NotPlain:
            return _NOT_PLAIN

    def moto_serializes(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if type(key) is str and key and self.MAP_TYPE is dict and _is_attribute_value(shape, known) \
                and self.service_model.service_name == "dynamodb" \
                and not getattr(self._value_picker, "response_transformers", None) \
                and (out := encoded(value)) is not _NOT_PLAIN:
            serialized[self.get_serialized_name(shape, key)] = out
            return
        serialize_response(self, serialized, value, shape, key)

    def moto_parses(self: Any, shape: Any, node: Any) -> Any:
        if type(self) is request_parser and self.MAP_TYPE is dict and _is_attribute_value(shape, known) \
                and self.operation_model.service_model.service_name == "dynamodb" \
                and (out := encoded(node)) is not _NOT_PLAIN:
            return out
        return parse_request(self, shape, node)

    def botocore_validates(self: Any, params: Any, shape: Any, errors: Any, name: str) -> None:
        if _is_attribute_value(shape, known) and passes(params):
            return
        validate_request(self, params, shape, errors, name)

    def botocore_serializes(self: Any, serialized: Any, value: Any, shape: Any, key: Any = None) -> None:
        if type(self) is request_serializer and key is not None and self.MAP_TYPE is dict \
                and _is_attribute_value(shape, known) and (out := encoded(value)) is not _NOT_PLAIN:
            serialized[key] = out
            return
        serialize_request(self, serialized, value, shape, key)

    def botocore_parses(self: Any, shape: Any, node: Any) -> Any:
        if type(self) is response_parser and _is_attribute_value(shape, known) \
                and (out := encoded(node)) is not _NOT_PLAIN:
            return out
        return parse_response(self, shape, node)

    replaced = [(response_serializer, "_serialize", moto_serializes), (request_parser, "_parse_shape", moto_parses),
                (validator, "_validate", botocore_validates), (request_serializer, "_serialize", botocore_serializes),
                (response_parser, "_parse_shape", botocore_parses)]
    own = [vars(owner).get(name, _NOT_PLAIN) for owner, name, _ in replaced]  # an inherited method: none of its own
    for owner, name, method in replaced:
        setattr(owner, name, method)
    try:
        yield
    finally:
        for (owner, name, _), method in zip(replaced, own, strict=True):
            if method is _NOT_PLAIN:
                delattr(owner, name)
            else:
                setattr(owner, name, method)
