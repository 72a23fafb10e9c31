"""Chalice's deployment-package cache, shared by the tests that run ``chalice package`` or ``make deploy`` in a
copy of the project.

Chalice keeps each package it builds in ``.chalice/deployments/<hash>-<python>-<arch>.zip``, the hash over
requirements.txt, app.py, chalicelib and chalice's own files, and reuses it while they are unchanged ("Reusing
existing deployment package."): building it (pip fetching and installing boto3, botocore, powertools) is most of
a first ``chalice package``.  Every copy of the project in one test run has the same files, so one built package
serves them all: ``shared_deployments`` seeds a copy's ``.chalice/deployments`` with what an earlier test of the
run built (on any xdist worker) and afterwards offers what this one built.  Nothing outlives the run.

The hash covers every file under chalicelib, so also the ``__pycache__`` an import of app.py writes there (chalice
imports it before hashing; which modules, and so which files, depends on the command): the commands run with
``NO_BYTECODE_WRITES`` in their environment, so that every copy hashes its sources alone.  What ships is the
same: deploy/bytecode.py replaces any bytecode of a package with its own."""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deploy import bytecode

NO_BYTECODE_WRITES = {"PYTHONDONTWRITEBYTECODE": "1"}


def _shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per test run, seen by every xdist worker of it (their base temp folders share a parent)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    shared = root / "chalice-deployments"
    shared.mkdir(exist_ok=True)
    return shared


def _compiled(package: Path) -> bool:
    with zipfile.ZipFile(package) as zipped:
        return zipped.comment == bytecode.MARK


@contextmanager
def shared_deployments(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Inside: ``project/.chalice/deployments`` holds the packages built earlier in this run.  After: a package
    this one built is offered to the later ones (and one compiled to bytecode replaces one that is not)."""
    shared = _shared(tmp_path_factory)
    deployments = project / ".chalice" / "deployments"
    deployments.mkdir(parents=True, exist_ok=True)
    for package in shared.glob("*.zip"):
        if not (deployments / package.name).exists():
            shutil.copy2(package, deployments / package.name)
    yield
    for package in deployments.glob("*.zip"):
        offered = shared / package.name
        if not offered.exists() or (_compiled(package) and not _compiled(offered)):
            staged = shared / f".{package.name}.{os.getpid()}"
            shutil.copy2(package, staged)
            staged.replace(offered)  # atomic: another worker never reads half a zip
