"""The console's files (chalicelib/console) are safe by construction: no script sink that parses markup or
code, no URL that ignores where the page is served (API Gateway's stage prefix), and the page answers with
its security headers. The browser test (tests/e2e/test_console_browser.py) checks the same in Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from chalice.test import Client

import app as app_module
from chalicelib import console
from chalicelib.aws import Deps
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import Strategy

# What turns text into markup or code in a browser: none of it may appear in the console's files.
SINKS = re.compile(r"\b(innerHTML|outerHTML|insertAdjacentHTML|document\s*\.\s*write(?:ln)?|eval|execScript)\b"
                   r"|\bnew\s+Function\b|\bsetTimeout\s*\(\s*['\"`]|\bsetInterval\s*\(\s*['\"`]|javascript:")
# A URL that names a host or starts at the origin's root: it would miss the stage prefix (/api/console).
ABSOLUTE = re.compile(r"""(?:\b(?:href|src|action)\s*=\s*["']|\burl\(\s*["']?|\bfetch\(\s*["'`]|\bimport\s*\(\s*["'`])"""
                      r"""(?:/|[a-z][a-z0-9+.-]*:)""", re.IGNORECASE)


def sinks(text: str) -> list[str]:
    return [m.group(0) for m in SINKS.finditer(text)]


def absolute_urls(text: str) -> list[str]:
    return [m.group(0) for m in ABSOLUTE.finditer(text)]


def test_the_console_files_use_no_markup_or_code_sink() -> None:
    for name, text in console.FILES.items():
        assert sinks(text) == [], name


@pytest.mark.parametrize("line", [
    "node.innerHTML = task.id;", "el.outerHTML = x", "el.insertAdjacentHTML('beforeend', x)", "document.write(x)",
    "eval(body)", "new Function('return 1')", "setTimeout('run()', 5)", "a.href = 'javascript:alert(1)'",
])
def test_a_sink_in_a_console_file_would_be_seen(line: str) -> None:
    assert sinks(f"const safe = 1;\n{line}\n")


def test_every_url_in_the_console_files_is_relative_to_where_the_page_is_served() -> None:
    for name, text in console.FILES.items():
        assert absolute_urls(text) == [], name
    page = console.FILES[console.PAGE]
    assert 'href="console/app.css"' in page and 'src="console/app.js"' in page


@pytest.mark.parametrize("line", ['<script src="/console/app.js">', "fetch('/tasks')", "fetch(`https://x/tasks`)",
                                  '<link href="https://cdn.example/x.css">', "background: url(/a.png)"])
def test_an_absolute_url_in_a_console_file_would_be_seen(line: str) -> None:
    assert absolute_urls(line)


def test_the_page_and_its_files_are_served_with_their_types_and_a_strict_content_security_policy() -> None:
    with Client(app_module.app) as client:
        for path, kind in [("/console", "text/html"), ("/console/app.js", "text/javascript"), ("/console/app.css", "text/css"),
                           ("/console/icon.svg", "image/svg+xml")]:
            response = client.http.get(path)
            assert response.status_code == 200, path
            assert response.headers["Content-Type"].startswith(kind), path
            policy = dict(part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";"))
            assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'", path
            assert policy["connect-src"] == "'self'" and policy["frame-ancestors"] == "'none'", path
            assert policy["require-trusted-types-for"] == "'script'" and policy["base-uri"] == "'none'", path
            assert "unsafe" not in response.headers["Content-Security-Policy"], path
            assert response.headers["X-Content-Type-Options"] == "nosniff", path
            assert response.headers["Referrer-Policy"] == "no-referrer", path
        assert client.http.get("/console").body.decode() == Path(console.HERE / "index.html").read_text()


def test_an_unknown_console_file_is_a_404_naming_the_files_there_are() -> None:
    with Client(app_module.app) as client:
        response = client.http.get("/console/secrets.txt")
    assert response.status_code == 404
    assert response.json_body == {"error": "no console file 'secrets.txt'; there are: app.css, app.js, icon.svg, index.html",
                                  "field": "asset"}


def test_the_console_needs_no_library_and_fits_the_first_views_budget() -> None:
    """The first view is these three files and a few small API answers: the files stay well under 100 KB."""
    assert sum(len(text.encode()) for text in console.FILES.values()) < 70_000


def served_filters(client: Client) -> dict[str, list[str]]:
    script = client.http.get("/console/app.js").body.decode()
    found = re.search(r"^  const FILTERS = (\{.*\});$", script, re.MULTILINE)
    assert found is not None, "app.js holds no FILTERS"
    assert "const STATUSES = [''].concat(FILTERS.statuses);" in script  # the status select is built from it
    filters: dict[str, list[str]] = json.loads(found.group(1))
    return filters


def test_the_task_lists_filters_offer_every_status_and_strategy_the_api_takes(deps: Deps) -> None:
    with Client(app_module.app) as client:
        filters = served_filters(client)
        taken = [status.value for status in State
                 if client.http.get(f"/tasks?status={status.value}&limit=1").status_code == 200]
    assert filters["statuses"] == taken and "PAUSED" in taken
    assert filters["strategies"] == [strategy.value for strategy in Strategy]


def test_a_tasks_page_offers_the_operations_the_api_allows_in_its_status_from_the_lifecycles_declaration() -> None:
    from chalicelib.tasks.lifecycle import OPERATIONS, TRANSITIONS, allowed_from

    with Client(app_module.app) as client:
        script = client.http.get("/console/app.js").body.decode()
    found = re.search(r"^  const OPERATIONS = (\{.*\});$", script, re.MULTILINE)
    assert found is not None, "app.js holds no OPERATIONS"
    served = json.loads(found.group(1))["operations"]
    assert served == {name: sorted(allowed_from(name)) for name in OPERATIONS}
    for name, transition in OPERATIONS.items():  # each the sources of the transition the API's route makes
        [declared] = [t for t in TRANSITIONS if t.name == transition]
        assert set(served[name]) == {"PENDING" if s is State.NONE else s.value for s in declared.sources}
    assert served == {"cancel": ["DEAD_LETTERED", "PAUSED", "PENDING"], "reschedule": ["DEAD_LETTERED", "PENDING"],
                      "retry": ["DEAD_LETTERED", "FAILED"], "pause": ["PENDING"], "resume": ["PAUSED"]}
