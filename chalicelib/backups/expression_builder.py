"""DynamoDB update and condition expressions built from declared parts (run_lifecycle.py declares them). Pure.

A path is dotted text: ``claimed_at``, ``tables.{table}.status``. A segment in braces is a parameter of the
caller's (a map key, such as a table's name) and becomes a name placeholder (``#table``); a word DynamoDB
reserves becomes its own (``ALIASES``). A value is a constant with its placeholder (``const``) or a parameter of
the caller's (``param``: ``:name``). Only what an expression uses is in its names and values: DynamoDB refuses
an unused one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ALIASES = {"status": "#s", "error": "#e"}  # the reserved words the state table's items use
_KEY = re.compile(r"^[a-z_]+$")  # a map key written as a plain path segment (``Each``)


@dataclass(frozen=True)
class Value:
    """A value placeholder: a constant's (``const``) or a caller's parameter (``param``)."""

    placeholder: str
    constant: bool = False
    value: Any = None


def const(placeholder: str, value: Any) -> Value:
    return Value(placeholder, True, value)


def param(name: str) -> Value:
    return Value(":" + name)


@dataclass(frozen=True)
class Added:
    """``path = if_not_exists(path, :zero) + by``: a count that starts at zero."""

    by: Value
    zero: Value


@dataclass(frozen=True)
class Each:
    """``path.<key> = :<key>`` for each key of the caller's map ``name``."""

    name: str


Operand = Value | Added | Each


@dataclass(frozen=True)
class Compare:
    path: str
    op: str  # =, <, <=
    value: Value


@dataclass(frozen=True)
class In:
    path: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Exists:
    path: str
    present: bool = True


@dataclass(frozen=True)
class All:
    parts: tuple[Cond, ...]


@dataclass(frozen=True)
class Either:
    parts: tuple[Cond, ...]


Cond = Compare | In | Exists | All | Either


def both(*parts: Cond | None) -> Cond | None:
    """The conjunction of the parts given (None: no condition)."""
    found = tuple(q for p in parts if p is not None for q in (p.parts if isinstance(p, All) else (p,)))
    return None if not found else found[0] if len(found) == 1 else All(found)


@dataclass(frozen=True)
class Update:
    """One UpdateItem's expressions: ``sets`` and ``removes`` (rendered paths) under ``condition``."""

    sets: tuple[tuple[str, str], ...]  # (path, operand), rendered
    removes: tuple[str, ...]
    condition: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def expression(self) -> str:
        clauses = ["SET " + ", ".join(f"{path} = {operand}" for path, operand in self.sets)] if self.sets else []
        return " ".join(clauses + (["REMOVE " + ", ".join(self.removes)] if self.removes else []))

    def stamped(self, attribute: str, value: Any) -> Update:
        """The same write also setting ``attribute`` (a plain name) to ``value``."""
        return merge([self, Update(((attribute, ":" + attribute),), (), "", {}, {":" + attribute: value})])


class _Render:
    def __init__(self, params: Mapping[str, Any], suffix: str) -> None:
        self.params, self.suffix = params, suffix
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def path(self, path: str) -> str:
        out = []
        for segment in path.split("."):
            if segment.startswith("{"):
                name = segment.strip("{}")
                out.append(self._name(f"#{name}{self.suffix}", str(self.params[name])))
            elif segment in ALIASES:
                out.append(self._name(ALIASES[segment], segment))
            else:
                out.append(segment)
        return ".".join(out)

    def _name(self, placeholder: str, name: str) -> str:
        _add(self.names, placeholder, name)
        return placeholder

    def value(self, value: Value) -> str:
        if value.constant:
            _add(self.values, value.placeholder, value.value)
            return value.placeholder
        placeholder = value.placeholder + self.suffix
        _add(self.values, placeholder, self.params[value.placeholder[1:]])
        return placeholder

    def assignments(self, path: str, operand: Operand) -> list[tuple[str, str]]:
        target = self.path(path)
        if isinstance(operand, Value):
            return [(target, self.value(operand))]
        if isinstance(operand, Added):
            return [(target, f"if_not_exists({target}, {self.value(operand.zero)}) + {self.value(operand.by)}")]
        out = []
        for key, value in self.params[operand.name].items():
            if not _KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not a plain attribute name")
            out.append((f"{target}.{key}", self.value(const(":" + key, value))))
        return out

    def condition(self, cond: Cond, nested: bool = False) -> str:
        if isinstance(cond, Compare):
            return f"{self.path(cond.path)} {cond.op} {self.value(cond.value)}"
        if isinstance(cond, In):
            return f"{self.path(cond.path)} IN ({', '.join(self.value(v) for v in cond.values)})"
        if isinstance(cond, Exists):
            return f"attribute_{'' if cond.present else 'not_'}exists({self.path(cond.path)})"
        joined = (" AND " if isinstance(cond, All) else " OR ").join(self.condition(p, True) for p in cond.parts)
        return f"({joined})" if nested else joined


def _add(table: dict[str, Any], placeholder: str, value: Any) -> None:
    if placeholder in table and table[placeholder] != value:
        raise ValueError(f"{placeholder} stands for both {table[placeholder]!r} and {value!r}")
    table[placeholder] = value


def build(sets: Sequence[tuple[str, Operand]], removes: Sequence[str], condition: Cond | None,
          params: Mapping[str, Any], suffix: str = "") -> Update:
    """The expressions of one write: ``sets`` in their order, then ``removes``, if ``condition`` holds, the
    parameters' placeholders ending in ``suffix`` (one write of several alike: ``merge``)."""
    render = _Render(params, suffix)
    assigned = tuple(a for path, operand in sets for a in render.assignments(path, operand))
    removed = tuple(render.path(p) for p in removes)
    return Update(assigned, removed, render.condition(condition) if condition else "", render.names, render.values)


def merge(updates: Sequence[Update]) -> Update:
    """Several writes of one item as one: their sets and removes, all their conditions."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    for update in updates:
        for k, v in update.names.items():
            _add(names, k, v)
        for k, v in update.values.items():
            _add(values, k, v)
    sets = tuple(s for u in updates for s in u.sets)
    targets = [path for path, _ in sets] + [r for u in updates for r in u.removes]
    if len(set(targets)) != len(targets):
        raise ValueError(f"one write sets a path twice: {targets}")
    conditions = [u.condition for u in updates if u.condition]
    condition = conditions[0] if len(conditions) == 1 else " AND ".join(f"({c})" for c in conditions)
    return Update(sets, tuple(r for u in updates for r in u.removes), condition, names, values)
