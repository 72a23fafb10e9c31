"""Each task source's stream function is found the way Lambda finds a handler.

Chalice writes a function's handler as ``app.<the Python function's __name__>`` (``handler_string``, which
``chalice package`` and ``chalice deploy`` give the Lambda function) and Lambda's Python runtime imports
``app`` and takes ``getattr(app, name)`` (awslambdaric's ``_get_handler``).  app.py binds one function per
declared source, so the names exist only once the stage's settings are read: the module's ``__getattr__``
answers for them.  The check runs in a fresh interpreter with a stage declaring two sources, as Lambda does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/{}/stream/2026-01-01T00:00:00.000"
SOURCES = {"appointments": {"table": "appointments", "strategy": "exact", "due_attribute": "REMINDER_TIMESTAMP"},
           "sessions": {"table": "sessions", "strategy": "lazy", "ttl_attribute": "expires_at", "key": ["email"]}}
# What Lambda's runtime does with each function's handler string, and what Chalice registered under its name.
LAMBDA_LOOKUP = """
import importlib, json
import app
found = {}
for source in app.app.event_sources:
    module, name = source.handler_string.rsplit(".", 1)
    found[source.name] = [source.handler_string, getattr(importlib.import_module(module), name) is app.app.handler_map[source.name]]
try:
    app.source_undeclared
    found["undeclared"] = "found"
except AttributeError as error:
    found["undeclared"] = str(error)
print(json.dumps(found))
"""


def test_lambda_finds_each_sources_stream_function_by_the_handler_chalice_writes() -> None:
    basics = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    environment = {**basics, "AWS_DEFAULT_REGION": "us-east-1", "TASK_SOURCES": json.dumps(SOURCES),
                   "TASK_SOURCE_STREAMS": json.dumps({name: STREAM.format(name) for name in SOURCES})}
    result = subprocess.run([sys.executable, "-c", LAMBDA_LOOKUP], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["source_appointments"] == ["app.source_appointments", True]
    assert found["source_sessions"] == ["app.source_sessions", True]
    assert found["task_stream"] == ["app.task_stream", True]
    assert found["undeclared"] == "module 'app' has no attribute 'source_undeclared'"
