"""The deployment package ships compiled bytecode, so that a cold start loads code instead of compiling it.

Chalice zips app.py, chalicelib and the requirements' wheels as sources only (app.py's
``__pycache__`` is never added, and wheels carry no bytecode), and Lambda's /var/task is
read-only: without bytecode in the zip, every cold start compiles every module it imports
(app.py, chalicelib, boto3, botocore, aws-lambda-powertools) and throws the result away.

``compile_package`` adds ``__pycache__/<module>.<cache tag>.pyc`` next to each source of a
zip, compiled from the zip's own bytes as *unchecked-hash* pycs: the import system loads them
without looking at the source's mtime (which unzipping need not keep) or hashing the source.
The zip is read-only once deployed, so the pycs cannot go stale; any bytecode the zip had is
replaced.  They are valid only for the interpreter that compiles them, which is the one chalice
takes the Lambda runtime's version from (``python3.11`` from Python 3.11, ...).

``python -m deploy.bytecode ARGS`` runs the ``chalice`` command line (``deploy``, ``package``)
with every deployment package it builds or reuses passed through ``compile_package`` before
it is uploaded or copied out; ``deploy.cli`` runs chalice this way.
"""

from __future__ import annotations

import functools
import py_compile
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

# The zip comment of a package compile_package has compiled (chalice rebuilds a zip, without
# comment, whenever the app's files change).
MARK = f"timekeeper: unchecked-hash bytecode, {sys.implementation.cache_tag}".encode()


def runtime_version() -> str:
    """The Lambda runtime chalice picks for this interpreter, whose bytecode compile_package writes."""
    return f"python{sys.version_info.major}.{sys.version_info.minor}"


def _is_bytecode(name: str) -> bool:
    return name.endswith((".pyc", ".pyo")) or "__pycache__" in PurePosixPath(name).parts


def cached_name(source: str) -> str:
    """Where the import system looks for a source's bytecode, as a zip entry name."""
    path = PurePosixPath(source)
    return str(path.parent / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.pyc").removeprefix("./")


def compile_package(package: Path) -> int:
    """Give every ``.py`` of the zip its unchecked-hash pyc (replacing any bytecode it had); the number compiled.

    A source this interpreter cannot compile (a Python 2 file inside some wheel) stays source-only, as
    it would fail to import anyway.  A zip already compiled by this interpreter is left as it is.
    """
    staged = package.with_name(package.name + ".compiling")
    compiled = 0
    with zipfile.ZipFile(package) as zipped, tempfile.TemporaryDirectory() as tmp:
        if zipped.comment == MARK:
            return 0
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as out:
            for info in zipped.infolist():
                if _is_bytecode(info.filename):
                    continue
                data = zipped.read(info)
                out.writestr(info, data)
                if info.filename.endswith(".py") and not info.is_dir():
                    pyc = _compile(data, info.filename, Path(tmp))
                    if pyc is not None:
                        entry = zipfile.ZipInfo(cached_name(info.filename), info.date_time)
                        entry.external_attr = 0o644 << 16
                        out.writestr(entry, pyc, zipfile.ZIP_DEFLATED)
                        compiled += 1
            out.comment = MARK
    staged.replace(package)
    return compiled


def _compile(source: bytes, name: str, tmp: Path) -> bytes | None:
    src, pyc = tmp / "source.py", tmp / "source.pyc"
    src.write_bytes(source)
    try:
        py_compile.compile(str(src), cfile=str(pyc), dfile=name, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        return None
    return pyc.read_bytes()


def _compiling(create: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(create)
    def create_deployment_package(self: Any, project_dir: str, python_version: str) -> str:
        package = create(self, project_dir, python_version)
        if python_version != runtime_version():
            print(f"note: the Lambda runtime is {python_version}, this is Python {runtime_version()}: "
                  f"the package ships without bytecode", file=sys.stderr)
            return package
        compiled = compile_package(Path(package))
        if compiled:
            print(f"Compiled {compiled} module(s) of {Path(package).name} to bytecode.", file=sys.stderr)
        return package
    return create_deployment_package


def compile_chalice_packages() -> None:
    """Make every chalice packager of this process compile what it builds (idempotent)."""
    from chalice.deploy import packager

    for cls in (packager.LambdaDeploymentPackager, packager.AppOnlyDeploymentPackager,
                packager.LayerDeploymentPackager):
        if "create_deployment_package" in vars(cls) and not getattr(cls.create_deployment_package, "compiles", False):
            wrapped = _compiling(cls.create_deployment_package)
            wrapped.compiles = True  # type: ignore[attr-defined]
            cls.create_deployment_package = wrapped  # type: ignore[method-assign]


def main() -> int:
    import os

    from chalice.cli import main as chalice_main

    from chalicelib.settings import DEPLOY_TOOL_VARIABLE

    compile_chalice_packages()
    os.environ[DEPLOY_TOOL_VARIABLE] = "1"  # app.py lets this chalice build a stage (make deploy provisions it first)
    sys.argv[0] = "chalice"
    return chalice_main()


if __name__ == "__main__":
    sys.exit(main())
