"""A webhook receiver on a loopback port: what `make run` and `make demo` send webhook tasks to (docs/tasks.md).

It does what the docs ask of a receiver: it verifies the Standard Webhooks
signature with the ``standardwebhooks`` library (401 when it does not match),
and drops a duplicate by its ``webhook-id`` (answers 200 and does nothing
more).  Everything it got is recorded (``received``, with the moment it was read)
and served as JSON on ``GET /received``.  For the tests it answers scripted replies first (a status
and headers, a request held past the sender's timeout, a connection dropped
after the request was taken: a lost response), then 200.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

from chalicelib.tasks.webhook import IDEMPOTENCY_HEADER, SECRET_PREFIX, SIGNATURE_HEADER, TIMESTAMP_HEADER

LOCAL_HOST = "127.0.0.1"
POLL_SECONDS = 0.05  # how soon stop() is noticed
LISTEN_BACKLOG = 1024  # connections the kernel holds before the server accepts them
TOLERANCE_SECONDS = 300  # the library's window around the receiver's clock


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class ClockedWebhook(Webhook):
    """standardwebhooks' ``Webhook``, its timestamp window read on ``clock``: the library reads the wall clock,
    the tests' receivers their FakeClock.  Everything else (headers, secret, signatures) is the library's."""

    def __init__(self, secret: str, clock: Callable[[], float]) -> None:
        super().__init__(secret)
        self._clock = clock

    def _Webhook__verify_timestamp(self, timestamp_header: str) -> datetime:  # the library's private check
        try:
            timestamp = float(timestamp_header)
        except ValueError:
            raise WebhookVerificationError("Invalid Signature Headers") from None
        if abs(self._clock() - timestamp) > TOLERANCE_SECONDS:
            raise WebhookVerificationError("Message timestamp too old or too new")
        return datetime.fromtimestamp(timestamp, tz=UTC)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: ``status`` with ``headers``; ``hang``: no answer until the receiver stops (past the
    sender's timeout); ``drop``: the request is taken (recorded) and the connection closed without an answer."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    drop: bool = False


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it."""

    path: str
    key: str  # webhook-id
    timestamp: str
    signature: str
    body: str
    verified: bool
    duplicate: bool
    status: int
    host: str
    received_at: float  # the receiver's clock (epoch seconds) when the request was read: what P3 measures
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)


class WebhookReceiver:
    """A threaded HTTP server on ``host``:``port`` (0: a free one) verifying with ``secret`` (``whsec_<base64>``)."""

    def __init__(self, secret: str, port: int = 0, host: str = LOCAL_HOST,
                 clock: Callable[[], float] = time.time, replies: list[Reply] | None = None) -> None:
        self.secret, self.clock = secret, clock
        self.webhook = ClockedWebhook(secret, clock)
        self.replies = list(replies or [])
        self.received: list[Received] = []
        self.taken: set[str] = set()  # idempotency keys already acted on
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server = _Server((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL_SECONDS,),
                                        name="webhook-receiver", daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def taken_bodies(self) -> list[str]:
        """The bodies of the requests acted on: verified, first of their key."""
        return [r.body for r in self.received if r.verified and not r.duplicate]

    def handle(self, path: str, headers: Any, body: bytes, method: str = "POST") -> Reply:
        """Record one request (a POST, PUT, PATCH, DELETE or a GET of another path than /received) and decide its
        answer."""
        now = self.clock()
        key, timestamp = headers.get(IDEMPOTENCY_HEADER, ""), headers.get(TIMESTAMP_HEADER, "")
        signature = headers.get(SIGNATURE_HEADER, "")
        try:
            self.webhook.verify(body, dict(headers.items()), json_parse=False)
            verified = True
        except (WebhookVerificationError, ValueError):  # ValueError: a malformed signature list or body
            verified = False
        with self._lock:
            reply = self.replies.pop(0) if self.replies else Reply()
            if not verified:
                reply = Reply(401)
            ok = reply.drop or 200 <= reply.status < 300
            duplicate = verified and ok and key in self.taken
            if verified and ok:
                self.taken.add(key)
            self.received.append(Received(path, key, timestamp, signature, body.decode("utf-8", "replace"), verified,
                                          duplicate, reply.status, headers.get("Host", ""), now, method,
                                          dict(headers.items())))
        if reply.hang:
            self._released.wait()
        return reply


class _Server(ThreadingHTTPServer):
    # socketserver's listen backlog is 5: POSTs arriving together past it have their SYN dropped and retried by
    # the sender's kernel 1 s, then 3 s later, which P3's webhook row measured as lateness
    request_queue_size = LISTEN_BACKLOG


def _handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            reply = receiver.handle(self.path, self.headers, body, self.command)
            if reply.drop or reply.hang:
                self.close_connection = True
                return
            payload = json.dumps({"ok": 200 <= reply.status < 300}).encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_PUT = do_PATCH = do_DELETE = do_POST

        def do_GET(self) -> None:
            if self.path != "/received":
                self.do_POST()
                return
            with receiver._lock:
                found = [asdict(r) for r in receiver.received]
            payload = json.dumps(found).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: the runtime's own lines say what ran

    return Handler
