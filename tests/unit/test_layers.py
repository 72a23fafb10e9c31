"""The import arrows between the project's modules: declared once, as layers, lowest first (``LAYERS``).

A module imports only modules of its own layer or of the layers below it, with no circle, whether the import is
at module level, inside a function or under ``TYPE_CHECKING``.  chalicelib (packaged into Lambda) lies below
app.py, which lies below deploy (run on an operator's machine), then local (the offline runtime), the tests'
support modules, bench, and the test files: chalicelib imports none of them, deploy never imports local.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("app.py", "chalicelib", "deploy", "local", "bench", "tests")

# Lowest first: each a name and its modules (``package.*``: every module under it; the longest match wins).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pure helpers", (
        "chalicelib", "chalicelib.names", "chalicelib.log", "chalicelib.ddb", "chalicelib.expression", "chalicelib.events",
        "chalicelib.web",
        "chalicelib.openapi", "chalicelib.chalice_local", "chalicelib.metrics", "chalicelib.schedule_expr",
        "chalicelib.schedule_fire", "chalicelib.tasks", "chalicelib.tasks.lifecycle", "chalicelib.tasks.task_fields",
        "chalicelib.tasks.action_deps", "chalicelib.backups", "chalicelib.backups.rules",
        "chalicelib.backups.lifecycle")),
    # What the settings parse at import: the task sources, with the actions and webhooks they name (typed by
    # chalicelib.tasks.action_deps' protocols, not by the settings and clients above them).
    ("settings parsers", ("chalicelib.tasks.webhook", "chalicelib.tasks.actions", "chalicelib.tasks.actions.*",
                          "chalicelib.sources", "chalicelib.tasks.flow_limits")),
    ("settings", ("chalicelib.settings",)),
    ("aws clients", (
        "chalicelib.aws", "chalicelib.container", "chalicelib.invocation", "chalicelib.throttle", "chalicelib.alerts",
        "chalicelib.deadletter")),
    ("domain models", (
        "chalicelib.tasks.model", "chalicelib.tasks.buckets", "chalicelib.tasks.timing",
        "chalicelib.backups.verify_rules", "chalicelib.backups.restore_rules")),
    ("domain logic", (  # and any chalicelib module not named in another layer
        "chalicelib.*", "chalicelib.tasks.items", "chalicelib.tasks.store", "chalicelib.tasks.schedules",
        "chalicelib.tasks.stream_dead_letters", "chalicelib.backups.store", "chalicelib.backups.conditional",
        "chalicelib.backups.retry", "chalicelib.backups.quotas", "chalicelib.backups.messages",
        "chalicelib.backups.verify", "chalicelib.backups.restore_store")),
    ("api and handlers", (
        "chalicelib.auth", "chalicelib.console", "chalicelib.tasks.api", "chalicelib.tasks.source_api",
        "chalicelib.tasks.operations", "chalicelib.tasks.executor", "chalicelib.tasks.stream", "chalicelib.tasks.sweeper",
        "chalicelib.tasks.interval", "chalicelib.tasks.dead_letters", "chalicelib.backups.api",
        "chalicelib.backups.catalog", "chalicelib.backups.monitor", "chalicelib.backups.exports", "chalicelib.backups.trigger",
        "chalicelib.backups.restore")),
    ("app", ("app",)),
    ("deploy", ("deploy", "deploy.*")),
    ("local", ("local", "local.*")),
    ("test support", ("tests", "tests.*")),
    ("bench", ("bench", "bench.*")),
    ("test files", ("tests.*.test_*", "tests.*conftest")),
)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the trees under ``root``, by its dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for tree in TREES:
        path = root / tree
        for file in ([path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []):
            parts = list(file.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


IMPORT_LINE = re.compile(r"^[ \t]*(?:from|import)[ \t]", re.MULTILINE)


def import_statements(text: str) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of a module's text, at any level (inside a function, under TYPE_CHECKING), each
    parsed alone with its own line number: faster than parsing the whole module (the suite runs on 2 cores).
    A line of prose that only looks like one does not parse and is left out; code in a string that a test runs in
    a subprocess (``import app``) counts as an import."""
    lines = text.splitlines()
    for match in IMPORT_LINE.finditer(text):
        first = text.count("\n", 0, match.start())
        last = first
        while last + 1 < len(lines) and (lines[last].rstrip().endswith("\\")
                                         or ("(" in "".join(lines[first:last + 1])
                                         and ")" not in "".join(lines[first:last + 1]))):
            last += 1
        try:
            [node] = ast.parse("\n" * first + textwrap.dedent("\n".join(lines[first:last + 1]))).body
        except (SyntaxError, ValueError):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(module imported, line) of every import in the module ``name``, at any level of it; ``from x import y``
    is ``x.y`` when that is a module; an import of something outside ``known`` (the standard library, a
    dependency) is left out."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in import_statements(path.read_text()):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = ".".join([*package[:len(package) - node.level + 1], *([node.module] if node.module else [])]) \
                if node.level else node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


@cache
def graph(root: Path) -> dict[str, dict[str, int]]:
    """Module -> the modules it imports, each with the line of its first import."""
    found = modules(root)
    arrows: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        arrows[name] = {}
        for target, line in imports(name, path, set(found)):
            arrows[name].setdefault(target, line)
    return arrows


def layer_of(name: str) -> int | None:
    """The index in LAYERS of the longest pattern matching ``name``; None when none does."""
    matches = [(len(pattern), index) for index, (_, patterns) in enumerate(LAYERS) for pattern in patterns
               if fnmatchcase(name, pattern)]
    return max(matches)[1] if matches else None


def upward_imports(arrows: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for name, targets in sorted(arrows.items()):
        for target, line in sorted(targets.items()):
            here, there = layer_of(name), layer_of(target)
            if here is not None and there is not None and there > here:
                wrong.append(f"{name} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]}) at line {line}")
    return wrong


def circles(arrows: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(arrows.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_module_is_in_one_declared_layer_and_every_named_module_exists() -> None:
    found = modules(ROOT)
    assert sorted(name for name in found if layer_of(name) is None) == []
    named = {pattern for _, patterns in LAYERS for pattern in patterns if "*" not in pattern}
    assert sorted(named - set(found)) == []


def test_no_module_imports_one_of_a_higher_layer() -> None:
    assert upward_imports(graph(ROOT)) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles(graph(ROOT)) == []


def test_the_checks_see_a_circle_and_an_import_against_the_layers_at_any_level(tmp_path: Path) -> None:
    (tmp_path / "chalicelib" / "tasks").mkdir(parents=True)
    (tmp_path / "chalicelib" / "__init__.py").write_text("")
    (tmp_path / "chalicelib" / "tasks" / "__init__.py").write_text("")
    (tmp_path / "chalicelib" / "settings.py").write_text("import os\n\n\ndef parse():\n    from .tasks import model\n")
    (tmp_path / "chalicelib" / "tasks" / "model.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from chalicelib import settings\n")
    arrows = graph(tmp_path)
    assert arrows["chalicelib.settings"] == {"chalicelib.tasks.model": 5}
    assert circles(arrows) == [["chalicelib.settings", "chalicelib.tasks.model"]]
    assert upward_imports(arrows) == [
        "chalicelib.settings (settings) imports chalicelib.tasks.model (domain models) at line 5"]
