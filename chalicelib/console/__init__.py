"""The console: one web page for an operator, served by the app itself (docs/console.md).

``GET /console`` answers the page and ``GET /console/{asset}`` its script and style sheet: plain files
shipped beside this module, read when it is first imported (by the console's route, never by app.py's
import: tests/deploy/test_cold_start.py).  The page needs no credentials; every data call it makes goes
through the API with the token the operator types (chalicelib/console/app.js).

Every answer carries a strict Content-Security-Policy: scripts, styles and data only from the app's own
origin, no inline script, no eval, no framing, and Trusted Types required for script sinks, so an
``innerHTML`` of a string throws in the browsers that enforce them.  The URLs inside the files are
relative, so the console works the same offline and under a deployed stage's prefix (``/api/console``).
"""

from __future__ import annotations

import json
from pathlib import Path

from chalice.app import Response

HERE = Path(__file__).resolve().parent
PAGE = "index.html"
# name -> Content-Type: the only files served (API Gateway passes these text types through as text;
# none of them is one of Chalice's binary types).
ASSETS = {
    PAGE: "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
])
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",  # a deploy's new console is seen at once; the files are small
}
# app.js's filters of the task list, written into it from the declarations the API enforces (filters()).
FILTERS_SLOT = '{"statuses": [], "strategies": []}'
# app.js's map operation -> the statuses it is offered in, from the declaration the API enforces (operations()).
OPERATIONS_SLOT = '{"operations": {}}'


def filters() -> dict[str, list[str]]:
    """The statuses GET /tasks lists (``?status=``) and the task strategies."""
    from chalicelib.tasks.items import LISTED_STATUSES
    from chalicelib.tasks.model import Strategy
    return {"statuses": [status.value for status in LISTED_STATUSES],
            "strategies": [strategy.value for strategy in Strategy]}


def operations() -> dict[str, dict[str, list[str]]]:
    """Each operation on a task (cancel, reschedule, retry, pause, resume) and the statuses the API allows it in."""
    from chalicelib.tasks.lifecycle import OPERATIONS, allowed_from
    return {"operations": {name: sorted(allowed_from(name)) for name in OPERATIONS}}


def rendered(name: str, text: str) -> str:
    """The console file ``name`` as served: its text, app.js with the filters and operations written in."""
    if name == "app.js":
        for slot, value in ((FILTERS_SLOT, filters()), (OPERATIONS_SLOT, operations())):
            if text.count(slot) != 1:
                raise RuntimeError(f"chalicelib/console/app.js must hold {slot} once")
            text = text.replace(slot, json.dumps(value))
    return text


FILES = {name: rendered(name, (HERE / name).read_text(encoding="utf-8")) for name in ASSETS}


def headers_for(name: str) -> dict[str, str | list[str]]:
    """The response headers of the console file ``name``: its type and the security headers."""
    return {"Content-Type": ASSETS[name], **SECURITY_HEADERS}


def response(name: str) -> Response:
    """The console file ``name`` (the page when ``name`` is PAGE), or a JSON 404 naming the asset."""
    if name not in FILES:
        return Response(body={"error": f"no console file {name[:100]!r}; there are: {', '.join(sorted(ASSETS))}",
                              "field": "asset"},
                        status_code=404, headers={"Content-Type": "application/json", **SECURITY_HEADERS})
    return Response(body=FILES[name], status_code=200, headers=headers_for(name))
