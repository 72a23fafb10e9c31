"""A record's state is read by one function: no module of chalicelib (nor app.py) reads a record's ``status``.

A task's state is ``chalicelib.tasks.lifecycle.state_of``'s (and ``State.recorded`` the status a record in it
holds); a backup run's, table's or restore's is its store's (``chalicelib.backups``' stores, from its declaration
``chalicelib.backups.lifecycle``).  Anywhere else, a ``["status"]``, ``.get("status")`` or ``"status" in`` is
refused, but for the few reads of something other than a record that ``ALLOWED`` lists, each saying what it reads.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The modules that hold the records' state: they read and write the raw attribute.
STORES: dict[str, str] = {
    "chalicelib/tasks/lifecycle.py": "declares a task's states and reads them (state_of)",
    "chalicelib/tasks/store.py": "writes a task's record and builds its Execution (with state_of)",
    "chalicelib/backups/lifecycle.py": "declares a backup run's, table's, verification's and restore's states",
    "chalicelib/backups/store.py": "the backup run's store: reads its run and tables from their items",
    "chalicelib/backups/export_store.py": "the export run's store: reads its run and exports from their items",
    "chalicelib/backups/restore_store.py": "the restore's store: reads its record from its item",
}

# (module, function, what is read): why this read of a "status" is no record's.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("chalicelib/tasks/api.py", "list_tasks", "query"): "the ?status= query parameter of GET /tasks",
    ("chalicelib/backups/catalog.py", "parse_query", "query"): "the ?status= query parameter of GET /backups",
    ("chalicelib/tasks/api.py", "_dead_letter", "view"): "the API's view of a task, its status state_of's",
    ("chalicelib/tasks/stream_dead_letters.py", "shown", "view"): "the API's view of a task, its status state_of's",
    ("chalicelib/tasks/stream_dead_letters.py", "show_in", "view"): "the API's view of a task, its status state_of's",
}


def status_reads(source: str) -> list[tuple[str, str, int]]:
    """(function, what is read, line) of each read of a ``"status"`` in ``source``: ``x["status"]`` (not as a
    target), ``x.get("status")`` (``pop``, ``setdefault``) and ``"status" in x``."""
    found: list[tuple[str, str, int]] = []

    class Reads(ast.NodeVisitor):
        def __init__(self) -> None:
            self.scope: list[str] = []

        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            self.scope.append(node.name)
            self.generic_visit(node)
            self.scope.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def _add(self, subject: ast.expr, node: ast.AST) -> None:
            found.append((".".join(self.scope), ast.unparse(subject), getattr(node, "lineno", 0)))

        def visit_Subscript(self, node: ast.Subscript) -> None:
            if _is_status(node.slice) and isinstance(node.ctx, ast.Load):
                self._add(node.value, node)
            self.generic_visit(node)

        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault") \
                    and node.args and _is_status(node.args[0]):
                self._add(node.func.value, node)
            self.generic_visit(node)

        def visit_Compare(self, node: ast.Compare) -> None:
            if _is_status(node.left):
                for op, right in zip(node.ops, node.comparators, strict=True):
                    if isinstance(op, ast.In | ast.NotIn):
                        self._add(right, node)
            self.generic_visit(node)

    Reads().visit(ast.parse(source))
    return found


def _is_status(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def _sources() -> dict[str, str]:
    """The text of app.py and of each module of chalicelib but the stores, by path, that holds a "status" at all
    (the rest are not parsed: the scan stays cheap)."""
    paths = [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))]
    texts = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in paths}
    return {module: text for module, text in texts.items()
            if module not in STORES and ('"status"' in text or "'status'" in text)}


def test_no_module_but_the_stores_reads_a_records_status() -> None:
    found = [(module, function, subject, line) for module, text in _sources().items()
             for function, subject, line in status_reads(text)]
    unexplained = [f"{module}:{line} {function}: {subject}" for module, function, subject, line in found
                   if (module, function, subject) not in ALLOWED]
    assert not unexplained, ("read a task's state with chalicelib.tasks.lifecycle.state_of (a backup's from its "
                             f"store), or list the read in ALLOWED saying why it is no record's: {unexplained}")
    unused = set(ALLOWED) - {read[:3] for read in found}
    assert not unused, f"ALLOWED lists reads no module makes: {sorted(unused)}"
    assert all((ROOT / module).is_file() for module in STORES)


def test_the_scan_finds_each_form_of_a_read_and_no_write() -> None:
    source = textwrap.dedent('''
        def judge(record, found):
            if record["status"] == "DONE" or record.get("status") == "FAILED" or "status" in found:
                return found.pop("status")
            record["status"] = "PENDING"
            return {"status": "PENDING"}
    ''')
    assert sorted(status_reads(source)) == [("judge", "found", 3), ("judge", "found", 4), ("judge", "record", 3),
                                            ("judge", "record", 3)]
