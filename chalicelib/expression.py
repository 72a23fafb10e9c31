"""DynamoDB condition and update expressions built as values, rendered once with their names and values. Pure.

A condition is made of attributes (``attr("status")``, ``attr("dead_letter", "sequence")`` for a nested one,
``attr("tables", param("table"), "status")`` for a map key given when rendered), values (``value("PAUSED")``)
and parameters (``param("due")``: given when the expression is rendered), compared (``eq``, ``ne``, ``lt``,
``le``, ``is_in``), tested (``exists``, ``missing``) and combined (``all_of``, ``any_of``).  An update sets,
removes and adds attributes (``Update``), ``if_not_exists`` and ``list_append`` included.  ``suffixed`` names the
parameters of one of several alike apart (one write of several records of an item).  ``render`` writes both with
placeholders it allocates: every attribute name goes through one ``#<name>`` (``#<parameter>`` for a map key
given, ``#n<i>`` for a name that is no token: reserved words never matter), every parameter and value through one
``:<name>`` or ``:v<i>``, and only those the expressions use are returned -- DynamoDB refuses an
ExpressionAttributeNames or ExpressionAttributeValues entry no expression uses, and an empty map of either, which
moto accepts.  No expression is ever edited as text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, TypeVar, cast

from chalicelib import ddb

# --- operands -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Attr:
    """An attribute (``parts``: its path, a map's keys below the top-level name; a ``Param``: a key given when
    rendered)."""

    parts: tuple[str | Param, ...]

    def eq(self, other: Operand) -> Condition:
        return Compare("=", self, other)

    def ne(self, other: Operand) -> Condition:
        return Compare("<>", self, other)

    def lt(self, other: Operand) -> Condition:
        return Compare("<", self, other)

    def le(self, other: Operand) -> Condition:
        return Compare("<=", self, other)

    def is_in(self, *options: Operand) -> Condition:
        return In(self, tuple(options))

    def exists(self) -> Condition:
        return Function("attribute_exists", self)

    def missing(self) -> Condition:
        return Function("attribute_not_exists", self)

    def size(self) -> Size:
        return Size(self)


@dataclass(frozen=True)
class Value:
    """A literal value (serialized as DynamoDB JSON by ``ddb.value``)."""

    value: Any


@dataclass(frozen=True)
class Param:
    """A value given when the expression is rendered (``render``'s ``params``)."""

    name: str


@dataclass(frozen=True)
class Size:
    path: Attr

    def lt(self, other: Operand) -> Condition:
        return Compare("<", self, other)


@dataclass(frozen=True)
class IfNotExists:
    path: Attr
    default: Operand


@dataclass(frozen=True)
class ListAppend:
    first: Operand
    second: Operand


Operand = Attr | Value | Param | Size | IfNotExists | ListAppend


def attr(name: str | Param, *below: str | Param) -> Attr:
    return Attr((name, *below))


def value(v: Any) -> Value:
    return Value(v)


def param(name: str) -> Param:
    return Param(name)


def if_not_exists(path: Attr, default: Operand) -> IfNotExists:
    return IfNotExists(path, default)


def list_append(first: Operand, second: Operand) -> ListAppend:
    return ListAppend(first, second)


# --- conditions ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compare:
    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True)
class In:
    left: Operand
    options: tuple[Operand, ...]


@dataclass(frozen=True)
class Function:
    name: str  # attribute_exists, attribute_not_exists
    path: Attr


@dataclass(frozen=True)
class When:
    """``condition`` where the parameter ``flag`` is given true; left out (of the conjunction or disjunction it is
    part of) where it is false."""

    flag: str
    condition: Condition


@dataclass(frozen=True)
class All:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Any_:
    parts: tuple[Condition, ...]


Condition = Compare | In | Function | When | All | Any_


def when(flag: str, condition: Condition) -> Condition:
    return When(flag, condition)


def all_of(*parts: Condition | None) -> Condition:
    """Every one of ``parts`` (None: left out); one part is itself."""
    kept = tuple(q for p in parts if p is not None for q in (p.parts if isinstance(p, All) else (p,)))
    if not kept:
        raise ValueError("all_of() of no condition")
    return kept[0] if len(kept) == 1 else All(kept)


def any_of(*parts: Condition) -> Condition:
    """One of ``parts`` at least; one part is itself."""
    kept = tuple(q for p in parts for q in (p.parts if isinstance(p, Any_) else (p,)))
    if not kept:
        raise ValueError("any_of() of no condition")
    return kept[0] if len(kept) == 1 else Any_(kept)


# --- updates ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Update:
    """SET, REMOVE and ADD clauses of one UpdateExpression, in the order given."""

    sets: tuple[tuple[Attr, Operand], ...] = ()
    removes: tuple[Attr, ...] = ()
    adds: tuple[tuple[Attr, Operand], ...] = ()

    def set(self, name: str | Attr, operand: Operand) -> Update:
        return Update((*self.sets, (_path(name), operand)), self.removes, self.adds)

    def set_values(self, attributes: Mapping[str, Any], absent: object = None) -> Update:
        """Each attribute set to its value -- removed when its value is ``absent`` (a marker, not None)."""
        update = self
        for name, v in attributes.items():
            update = update.remove(name) if absent is not None and v is absent else update.set(name, Value(v))
        return update

    def remove(self, *names: str | Attr) -> Update:
        return Update(self.sets, (*self.removes, *(_path(n) for n in names)), self.adds)

    def add(self, name: str | Attr, operand: Operand) -> Update:
        """``ADD``: DynamoDB takes it on a top-level attribute only (a nested path is a ValidationException)."""
        path = _path(name)
        if len(path.parts) != 1:
            raise ValueError(f"ADD takes a top-level attribute, not {path.parts}")
        return Update(self.sets, self.removes, (*self.adds, (path, operand)))

    def then(self, other: Update) -> Update:
        """This update's clauses, then ``other``'s."""
        return Update((*self.sets, *other.sets), (*self.removes, *other.removes), (*self.adds, *other.adds))

    def paths(self) -> list[Attr]:
        return [p for p, _ in self.sets] + list(self.removes) + [p for p, _ in self.adds]


def _path(name: str | Attr) -> Attr:
    return name if isinstance(name, Attr) else Attr((name,))


# --- rendering -------------------------------------------------------------------------------------------------

@dataclass
class Rendered:
    """The expressions as DynamoDB takes them, with the names and values (plain Python) they use, no other."""

    update: str | None
    condition: str | None
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        """UpdateExpression, ConditionExpression, ExpressionAttributeNames and ExpressionAttributeValues (DynamoDB
        JSON), each only when there is one: the keyword arguments of an UpdateItem, a PutItem or a transaction's
        item."""
        args: dict[str, Any] = {}
        if self.update is not None:
            args["UpdateExpression"] = self.update
        if self.condition is not None:
            args["ConditionExpression"] = self.condition
        if self.names:
            args["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            args["ExpressionAttributeValues"] = {k: ddb.value(v) for k, v in self.values.items()}
        return args


class _Writer:
    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self._by_name: dict[str, str] = {}
        self._by_value: dict[tuple[str, str], str] = {}

    def name(self, name: str, named: str | None = None) -> str:
        """``#<parameter>`` for a map key given as a parameter, ``#<name>`` for a name that is a token, ``#n<i>``
        for another; one per attribute name."""
        if name not in self._by_name:
            token = named if named is not None else name
            self._by_name[name] = _free(f"#{token}" if _TOKEN.fullmatch(token) else "#n0", self.names)
            self.names[self._by_name[name]] = name
        return self._by_name[name]

    def literal(self, v: Any, named: str | None = None) -> str:
        """``:<parameter>`` for a parameter's value, ``:<value>`` for a literal string that is a token, ``:v<i>``
        for another literal; one per distinct value."""
        key = ("param", named) if named is not None else (type(v).__name__, repr(v))
        if key not in self._by_value:
            token = named if named is not None else v if isinstance(v, str) and len(v) <= 32 else ""
            self._by_value[key] = _free(f":{token}" if _TOKEN.fullmatch(token) else ":v0", self.values)
            self.values[self._by_value[key]] = v
        return self._by_value[key]

    def given(self, name: str) -> Any:
        if name not in self.params:
            raise KeyError(f"the expression's parameter {name!r} was not given")
        return self.params[name]

    def path(self, path: Attr) -> tuple[str, ...]:
        """The attribute's path, its keys given as parameters filled in."""
        return tuple(p if isinstance(p, str) else str(self.given(p.name)) for p in path.parts)

    def operand(self, operand: Operand) -> str:
        if isinstance(operand, Attr):
            return ".".join(self.name(part) if isinstance(part, str) else self.name(str(self.given(part.name)),
                                                                                     part.name)
                            for part in operand.parts)
        if isinstance(operand, Value):
            return self.literal(operand.value)
        if isinstance(operand, Param):
            return self.literal(self.given(operand.name), operand.name)
        if isinstance(operand, Size):
            return f"size({self.operand(operand.path)})"
        if isinstance(operand, IfNotExists):
            return f"if_not_exists({self.operand(operand.path)}, {self.operand(operand.default)})"
        return f"list_append({self.operand(operand.first)}, {self.operand(operand.second)})"

    def condition(self, condition: Condition, nested: bool = False) -> str:
        """The condition's text ("" for a ``When`` whose flag is false)."""
        if isinstance(condition, When):
            return self.condition(condition.condition, nested) if self.params.get(condition.flag) else ""
        if isinstance(condition, Compare):
            return f"{self.operand(condition.left)} {condition.op} {self.operand(condition.right)}"
        if isinstance(condition, In):
            return f"{self.operand(condition.left)} IN ({', '.join(self.operand(o) for o in condition.options)})"
        if isinstance(condition, Function):
            return f"{condition.name}({self.operand(condition.path)})"
        joiner = " AND " if isinstance(condition, All) else " OR "
        texts = [text for text in (self.condition(part, nested=True) for part in condition.parts) if text]
        if len(texts) == 1:
            return texts[0]
        return f"({joiner.join(texts)})" if nested and texts else joiner.join(texts)

    def update(self, update: Update) -> str:
        paths = [self.path(p) for p in update.paths()]
        for i, path in enumerate(paths):
            for other in paths[i + 1:]:
                if path[:len(other)] == other or other[:len(path)] == path:
                    raise ValueError(f"an update writes {'.'.join(path)} and {'.'.join(other)}: DynamoDB refuses "
                                     "overlapping paths")
        clauses: list[str] = []
        if update.sets:
            clauses.append("SET " + ", ".join(f"{self.operand(p)} = {self.operand(o)}" for p, o in update.sets))
        if update.removes:
            clauses.append("REMOVE " + ", ".join(self.operand(p) for p in update.removes))
        if update.adds:
            clauses.append("ADD " + ", ".join(f"{self.operand(p)} {self.operand(o)}" for p, o in update.adds))
        if not clauses:
            raise ValueError("an update of nothing")
        return " ".join(clauses)


_Node = TypeVar("_Node")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _free(wanted: str, taken: Mapping[str, Any]) -> str:
    """``wanted``, or the first of ``<wanted's stem><i>`` not taken."""
    if wanted not in taken:
        return wanted
    stem = wanted.rstrip("0123456789")
    return next(f"{stem}{i}" for i in range(len(taken) + 2) if f"{stem}{i}" not in taken)


def suffixed(node: _Node, suffix: str) -> _Node:
    """``node`` (an update, a condition or an operand) with each of its parameters' names ending in ``suffix``:
    one of several alike in one write, each rendered with its own parameters. Pure."""
    return cast(_Node, _suffixed(node, suffix))


def _suffixed(node: Any, suffix: str) -> Any:
    if isinstance(node, Param):
        return Param(node.name + suffix)
    if isinstance(node, tuple):
        return tuple(_suffixed(n, suffix) for n in node)
    if isinstance(node, Value) or not is_dataclass(node) or isinstance(node, type):
        return node
    return replace(node, **{f.name: _suffixed(getattr(node, f.name), suffix) for f in fields(node)})


def render(update: Update | None = None, condition: Condition | None = None,
           params: Mapping[str, Any] | None = None) -> Rendered:
    """The expressions of ``update`` and ``condition``, their parameters taken from ``params`` (a parameter not
    given raises KeyError; one given and not used is left out)."""
    writer = _Writer(params or {})
    condition_text = (writer.condition(condition) or None) if condition is not None else None
    update_text = writer.update(update) if update is not None else None
    return Rendered(update_text, condition_text, writer.names, writer.values)


def referenced(expression: str) -> set[str]:
    """The placeholders (``#name``, ``:value``) an expression's text uses. Pure."""
    found: set[str] = set()
    token = ""
    for ch in expression + " ":
        if token and (ch.isalnum() or ch == "_"):
            token += ch
            continue
        if len(token) > 1:
            found.add(token)
        token = ch if ch in "#:" else ""
    return found


def conditions(parts: Iterable[Condition | None]) -> Condition | None:
    """All of ``parts`` that are given, or None when none is."""
    kept = [p for p in parts if p is not None]
    return all_of(*kept) if kept else None


__all__ = ["Attr", "Condition", "Operand", "Param", "Rendered", "Update", "Value", "all_of", "any_of", "attr",
           "conditions", "if_not_exists", "list_append", "param", "referenced", "render", "suffixed", "value", "when"]
