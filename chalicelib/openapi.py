"""The API's OpenAPI 3 document (chalicelib/openapi.json), served at GET /openapi.json.

The file is read on the first request, not when app.py is imported (tests/deploy/test_cold_start.py);
tests/functional/test_openapi.py keeps it true to app.routes and to what the routes answer.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DOCUMENT = Path(__file__).resolve().parent / "openapi.json"


@cache
def document() -> dict[str, Any]:
    """The document, read once per container."""
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    return loaded
