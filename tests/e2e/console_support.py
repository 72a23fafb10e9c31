"""The console's browser test's tools: Debian's Chromium driven by Selenium, and a proxy that serves the
local API under a stage prefix (``/api/``) as API Gateway serves a deployed stage.

Chromium runs headless with a fresh profile and without the background traffic (updates, sync, QUIC) a
closed network would make it wait on.  Without /usr/bin/chromium and /usr/bin/chromedriver the browser
tests are skipped, unless CONSOLE_BROWSER_REQUIRED=1 (CI, .ci/run) makes that a failure.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = Path(os.environ.get("CONSOLE_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("CONSOLE_CHROMEDRIVER", "/usr/bin/chromedriver"))
REQUIRED = "CONSOLE_BROWSER_REQUIRED"
SCREENSHOTS = "CONSOLE_SCREENSHOTS"  # set (make console-screenshots): the test writes docs/console/*.png
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1")


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (None when they can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"no {path} (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (requirements-dev.txt)"
    return None


@contextmanager
def chromium(width: int = 1200, height: int = 900) -> Iterator[Any]:
    """A Selenium driver of a headless Chromium with a fresh profile, quit (and its profile removed) after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class PrefixProxy:
    """``http://127.0.0.1:<port>/<prefix>/...`` forwarded to ``upstream/...``, as API Gateway serves a stage under
    ``/<stage>/``; a request outside the prefix is answered 404 and remembered in ``strays``."""

    def __init__(self, upstream: str, prefix: str = "/api") -> None:
        self.prefix = prefix
        self.strays: list[str] = []
        self.seen: list[str] = []
        self.credentials: dict[str, dict[str, str]] = {}  # request -> its Authorization and x-api-key headers
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def forward(self) -> None:
                if not self.path.startswith(proxy.prefix + "/"):
                    proxy.strays.append(f"{self.command} {self.path}")
                    self.send_error(404, "outside the stage prefix")
                    return
                proxy.seen.append(f"{self.command} {self.path}")
                proxy.credentials[f"{self.command} {self.path}"] = {
                    k.lower(): v for k, v in self.headers.items() if k.lower() in ("authorization", "x-api-key")}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=30)
                try:
                    connection.request(self.command, self.path[len(proxy.prefix):], body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                finally:
                    connection.close()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def __enter__(self) -> PrefixProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
