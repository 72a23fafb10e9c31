"""deploy/bytecode.py: a deployment zip gets a fresh unchecked-hash pyc for each source, and keeps no stale one."""

from __future__ import annotations

import importlib.util
import marshal
import zipfile
from pathlib import Path

from deploy import bytecode


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in files.items():
            zipped.writestr(name, data)
    return path


def test_stale_bytecode_in_the_zip_is_replaced_by_bytecode_of_the_zips_own_sources(tmp_path: Path) -> None:
    stale = bytecode.cached_name("chalicelib/settings.py")
    package = make_zip(tmp_path / "package.zip", {
        "app.py": b"VALUE = 1\n", "chalicelib/__init__.py": b"", "chalicelib/settings.py": b"NAME = 'new'\n",
        stale: b"stale bytes", "chalicelib/__pycache__/settings.cpython-39.pyc": b"old interpreter's"})

    assert bytecode.compile_package(package) == 3
    with zipfile.ZipFile(package) as zipped:
        assert sorted(n for n in zipped.namelist() if n.endswith(".pyc")) == sorted(
            bytecode.cached_name(n) for n in ("app.py", "chalicelib/__init__.py", "chalicelib/settings.py"))
        data = zipped.read(stale)
    assert data[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(data[4:8], "little") == 0b01
    namespace: dict[str, object] = {}
    exec(marshal.loads(data[16:]), namespace)
    assert namespace["NAME"] == "new"


def test_a_compiled_zip_is_left_alone_and_one_rebuilt_without_the_mark_is_compiled_again(tmp_path: Path) -> None:
    package = make_zip(tmp_path / "package.zip", {"app.py": b"VALUE = 1\n", "broken.py": b"print 'python 2'\n"})
    assert bytecode.compile_package(package) == 1  # broken.py stays source-only
    assert bytecode.compile_package(package) == 0
    with zipfile.ZipFile(package) as zipped:  # as chalice's inject_latest_app rebuilds a cached zip
        entries = {info.filename: zipped.read(info) for info in zipped.infolist()}
    make_zip(package, entries)
    assert bytecode.compile_package(package) == 1
