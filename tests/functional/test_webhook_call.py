"""A webhook's call on the wire: its one deadline, and its connection to the address that was checked.

The receivers here are thread-served sockets on 127.0.0.1 (loopback is allowed through these tests' settings, as
on the local stage): one that answers a byte at a time, and one that speaks TLS with a certificate made for the
test's name.  A name is resolved by an injected resolver (``webhook.Network``), never by DNS.  No test waits for
real time but the socket exchange's, which a deadline of a fraction of a second ends.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chalice.local import LambdaContext
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import app as app_module
from chalicelib.aws import Deps
from chalicelib.tasks import timing, webhook
from chalicelib.tasks.model import RetryPolicy, TaskKey, parse_due
from tests import events
from tests.fixtures import Aws, FakeClock, moto_aws, use_settings
from tests.functional.task_support import due_body, post_task, signed_webhooks, state_of
from tests.functional.task_support import webhook_action as action

RUN_AT = "2026-11-22T12:10:00Z"  # ten minutes after the FakeClock's now
DUE = parse_due(RUN_AT)
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
BYTE_EVERY = 0.1  # seconds between two bytes of the dribbling answer: under any per-read timeout below
SHORT = 0.3       # the deadline the tests give a call (seconds)
NAME = "hooks.example.test"


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    with moto_aws() as world:
        yield world


@pytest.fixture
def signing(deps: Deps) -> Deps:
    return signed_webhooks(deps, timeout_seconds=10.0)  # each test allows its receiver's origin


def read_request(conn: Any) -> str:
    """A request's head and body, read whole (a socket closed with unread data would reset the caller's read)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data.decode("latin-1")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head.decode("latin-1") + "\r\n\r\n"


class Dribbler:
    """A receiver on 127.0.0.1 that reads a request, then answers 200 one byte every BYTE_EVERY seconds (each
    read of its answer comes well within any timeout), until the answer is sent or the caller hangs up."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self.requests = 0
        self.sent = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                read_request(conn)
                self.requests += 1
                try:
                    for byte in ANSWER:
                        if self._stop.wait(BYTE_EVERY):
                            return
                        conn.sendall(bytes([byte]))
                        self.sent += 1
                except OSError:  # the caller hung up
                    continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()


@pytest.fixture
def dribbler(signing: Deps) -> Iterator[Dribbler]:
    server = Dribbler()
    use_settings(signing, task_webhook_origins=(server.origin,))
    yield server
    server.stop()


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        return call(), time.monotonic() - started
    except Exception as exc:  # the test inspects it
        return exc, time.monotonic() - started


def test_a_receiver_dribbling_its_answer_is_cut_by_the_timeout_as_a_whole_call_bound(
        signing: Deps, dribbler: Dribbler) -> None:
    use_settings(signing, task_webhook_timeout_seconds=SHORT)  # each byte comes within it: only a whole bound cuts
    failed, took = timed(lambda: webhook.post(signing, action(dribbler.origin + "/"), "slow", DUE))
    assert isinstance(failed, webhook.WebhookFailed), failed
    assert took < SHORT + 0.5 and dribbler.sent < len(ANSWER)
    assert "timed out" in str(failed) and "TASK_WEBHOOK_TIMEOUT_SECONDS" in str(failed)
    assert failed.retry_after is None  # the task's own backoff decides


def test_a_call_ends_before_the_invocation_leaves_too_little_time_to_settle_and_is_retried_later(
        signing: Deps, dribbler: Dribbler) -> None:
    left = webhook.SETTLE_MARGIN_SECONDS + SHORT  # the invocation's time: the call may have SHORT of it
    failed, took = timed(lambda: webhook.post(signing, action(dribbler.origin + "/"), "slow", DUE, lambda: left))
    assert isinstance(failed, webhook.WebhookFailed), failed
    assert took < SHORT + 0.5 and dribbler.sent < len(ANSWER)
    assert "the invocation's time left" in str(failed)
    assert failed.retry_after == webhook.OUT_OF_TIME_RETRY_SECONDS  # a later delivery's, with its own time


def test_no_call_is_made_when_the_invocation_has_only_the_time_to_settle_left(
        signing: Deps, dribbler: Dribbler) -> None:
    left = webhook.SETTLE_MARGIN_SECONDS
    with pytest.raises(webhook.WebhookFailed, match="not made") as caught:
        webhook.post(signing, action(dribbler.origin + "/"), "late", DUE, lambda: left)
    assert caught.value.retry_after == webhook.OUT_OF_TIME_RETRY_SECONDS and dribbler.requests == 0


def test_the_executor_bounds_a_webhook_by_its_invocations_remaining_time_and_retries_it_later(
        client: Any, clock: FakeClock, signing: Deps, dribbler: Dribbler) -> None:
    """Through the task_executor handler: Lambda's context (get_remaining_time_in_millis) gives the deadline."""
    created = post_task(client, {"id": "dribbled", "run_at": RUN_AT, "action": action(dribbler.origin + "/")})
    assert created.status_code == 201, created.body
    clock.advance(minutes=10)
    event = events.sqs_event(events.sqs_record(due_body(TaskKey.for_id("dribbled"), DUE), "timekeeper-due"))
    context = LambdaContext("task_executor", 128,
                            max_runtime_ms=int((webhook.SETTLE_MARGIN_SECONDS + SHORT) * 1000))
    response, took = timed(lambda: app_module.app.handler_map["task_executor"](event, context))
    assert events.batch_item_failures(response) == set()
    assert took < SHORT + 2 and dribbler.requests == 1 and clock.slept == 0  # nothing slept in the delivery
    item = state_of(signing, TaskKey.for_id("dribbled"))
    assert (item["status"], item["attempts"]) == ("PENDING", 1)
    assert item["retry_at"] == (clock() + timedelta(seconds=webhook.OUT_OF_TIME_RETRY_SECONDS)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    assert "the invocation's time left" in item["last_error"]


def test_a_call_out_of_time_is_retried_in_a_later_delivery_not_slept_for() -> None:
    step = timing.next_retry(RetryPolicy(3, 3600), 1, datetime(2026, 1, 1, tzinfo=UTC),
                             datetime(2026, 1, 1, tzinfo=UTC), 0.5, webhook.OUT_OF_TIME_RETRY_SECONDS)
    assert step.kind == "later"


# --- the connection goes to the checked address, with the name's TLS server name, certificate check and Host -----

def certificate(name: str) -> tuple[bytes, bytes]:
    """A self-signed certificate for ``name`` and its key, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)  # the TLS library checks validity against the system's clock
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


class TlsReceiver:
    """An HTTPS receiver on 127.0.0.1 with a certificate for NAME: it records each request's TLS server name and
    head, and answers 200."""

    def __init__(self, tmp: Path) -> None:
        self.cert, key = certificate(NAME)
        (tmp / "cert.pem").write_bytes(self.cert)
        (tmp / "key.pem").write_bytes(key)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
        self.server_names: list[str | None] = []
        self._tls.sni_callback = self._server_name
        self.heads: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _server_name(self, sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self.server_names.append(name)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                with self._tls.wrap_socket(conn, server_side=True) as tls:
                    self.heads.append(read_request(tls))
                    tls.sendall(ANSWER)
            except OSError:  # a handshake the caller refused (a certificate it does not trust)
                conn.close()

    def client_tls(self) -> ssl.SSLContext:
        """What the caller trusts: the system's defaults (hostname check, certificate required), with this
        receiver's certificate as the one authority."""
        return ssl.create_default_context(cadata=self.cert.decode())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[TlsReceiver]:
    server = TlsReceiver(tmp_path)
    yield server
    server.stop()


class Resolver:
    """Answers ``first`` the first time a name is resolved, then ``later`` (a DNS answer changed in between)."""

    def __init__(self, first: list[str], later: list[str]) -> None:
        self.first, self.later = first, later
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.first if len(self.asked) == 1 else self.later


def test_the_https_connection_goes_to_the_checked_address_with_the_names_sni_host_and_certificate(
        signing: Deps, tls_receiver: TlsReceiver) -> None:
    origin = f"https://{NAME}:{tls_receiver.port}"
    use_settings(signing, task_webhook_origins=(origin,))
    resolver = Resolver(["127.0.0.1"], ["127.0.0.2"])  # resolved again, the name would lead elsewhere
    network = webhook.Network(addresses=resolver, tls=tls_receiver.client_tls)
    result = webhook.post(signing, action(origin + "/hook"), "pinned", DUE, network=network)
    assert result["status"] == 200
    assert resolver.asked == [(NAME, tls_receiver.port)]  # resolved once
    assert tls_receiver.server_names == [NAME]
    [head] = tls_receiver.heads
    assert head.startswith("POST /hook HTTP/1.1\r\n") and f"\r\nHost: {NAME}:{tls_receiver.port}\r\n" in head


def test_the_certificate_is_checked_against_the_urls_name_not_the_address(
        signing: Deps, tls_receiver: TlsReceiver) -> None:
    other = f"https://other.example.test:{tls_receiver.port}"
    use_settings(signing, task_webhook_origins=(other,))
    network = webhook.Network(addresses=Resolver(["127.0.0.1"], ["127.0.0.1"]), tls=tls_receiver.client_tls)
    with pytest.raises(webhook.WebhookFailed, match=r"certificate verify failed|CERTIFICATE_VERIFY_FAILED"):
        webhook.post(signing, action(other + "/hook"), "mismatch", DUE, network=network)
    assert tls_receiver.heads == []
