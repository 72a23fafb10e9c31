"""The app as the offline runtime loads it: app.py imported as Lambda would, its per-container clients built.

Shared by the stage (local/stage.py) and its handler processes (local/handler_processes.py), which import
nothing of each other's.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
_copies = itertools.count(1)


def load_app(project_dir: Path) -> ModuleType:
    """Import app.py as Lambda would; a fresh copy if this process imported it already (tests)."""
    if "app" not in sys.modules:
        if str(project_dir) not in sys.path:
            sys.path.insert(0, str(project_dir))
        return importlib.import_module("app")
    name = f"app_local_{next(_copies)}"
    spec = importlib.util.spec_from_file_location(name, project_dir / "app.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {project_dir / 'app.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def warm(app_module: ModuleType, attach: Callable[[Any], Any] | None = None) -> None:
    """Build the app's per-container clients now, in one thread: boto3 sessions are not thread-safe,
    and offline, unlike on Lambda, one container serves every handler at once.  ``attach`` is given
    each client (moto's server is in this process: its calls skip the socket, local/in_process.py)."""
    deps = getattr(app_module, "deps", None)
    clients = getattr(deps(), "clients", None) if callable(deps) else None
    if clients is None:
        return
    for name, attribute in vars(type(clients)).items():
        if isinstance(attribute, cached_property):
            client = getattr(clients, name)
            if attach is not None:
                attach(client)
