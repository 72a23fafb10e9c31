"""The import arrows between the project's packages: chalicelib (packaged into Lambda) imports none of the
others; deploy (run on an operator's machine) imports chalicelib only; local (the offline runtime) may import
deploy (provisioning, event shapes), never bench or tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chalicelib", "deploy", "local", "bench", "tests")
MAY_IMPORT = {
    "chalicelib": {"chalicelib"},
    "deploy": {"chalicelib", "deploy"},
    "local": {"chalicelib", "deploy", "local"},
}


def imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_packages_below_it(package: str) -> None:
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) - MAY_IMPORT[package])
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: packages for path, packages in wrong.items() if packages} == {}


def test_app_py_imports_chalicelib_only() -> None:
    assert imported_packages(ROOT / "app.py") == {"chalicelib"}


def test_the_check_sees_an_import_against_the_arrows(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("import os\nfrom local import events\nimport deploy.stage\nfrom . import sibling\n")
    assert imported_packages(module) == {"local", "deploy"}
