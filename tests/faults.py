"""Faults at the app's own AWS calls, where botocore's retries cannot absorb them.

``Faults(clients)`` hooks each client the app uses (tests/fixtures.py's
``aws.clients``; botocore copies a session's hooks into a client when it is
built, so hooks go on the clients themselves).  A fault is armed per operation
(``"dynamodb.UpdateItem"``), optionally for calls whose parameters match, and
hits one occurrence (1-based, counted among matching calls from the moment it
is armed), or every one from there on with ``times``:

=============  ===============================================================
kind           what the app sees
=============  ===============================================================
``error``      the call is not applied; a hard error (after botocore's retries:
               the error is returned without retrying), code ``code``
``lost``       the call IS applied, then its response is lost: a hard error
``retried``    the call IS applied, its response lost, and botocore retries it:
               the app sees the retry's answer (a conditional write then fails
               its own condition); on a client botocore makes one attempt on
               (``dynamodb_unretried``) it is ``lost``, as botocore does not retry
``crash``      the worker dies before the call (``WorkerCrash``, a
               BaseException no ``except Exception`` catches)
``crash_after``the call IS applied, then the worker dies
``answer``     the call is not applied; the app sees ``answer`` as its response
               (a partial failure a service reports in a successful answer:
               PutEvents' failed entry)
=============  ===============================================================

``Faults.chaos`` arms faults at random (seeded) for soak tests: throttling that
botocore's retry mode sees and retries (injected below the retry loop, in
``before-send``), hard errors and lost responses above it.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import boto3
from botocore.awsrequest import AWSResponse, HTTPHeaders
from moto.core.models import botocore_stubber

from chalicelib.aws import Clients

Kind = Literal["error", "lost", "retried", "crash", "crash_after", "answer"]
Match = Callable[[Mapping[str, Any]], bool]


class WorkerCrash(BaseException):  # a crash, not an error the app may handle
    """The worker process died (Lambda timeout, out of memory) in the middle of a handler."""


@dataclass
class Fault:
    operation: str          # "dynamodb.UpdateItem"
    kind: Kind
    occurrence: int = 1     # the first matching call it hits
    times: int = 1          # how many matching calls in a row it hits
    code: str = "InternalServerError"
    match: Match | None = None
    answer: dict[str, Any] | None = None  # kind "answer": the response the app sees
    seen: int = 0           # matching calls so far
    hits: int = 0

    def hit(self, params: Mapping[str, Any]) -> bool:
        if self.match is not None and not self.match(params):
            return False
        self.seen += 1
        if self.occurrence <= self.seen < self.occurrence + self.times:
            self.hits += 1
            return True
        return False


class _Raw:
    """A response object shaped like botocore's, for a short-circuited call."""

    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""
        self.text = ""
        self.raw = None


def _error(code: str, operation: str, status: int = 500) -> tuple[Any, dict[str, Any]]:
    return _Raw(status), {"Error": {"Code": code, "Message": f"injected fault on {operation}"},
                          "ResponseMetadata": {"HTTPStatusCode": status}}


@dataclass
class Faults:
    """Armed faults on one botocore session; ``calls`` counts every operation made through it."""

    clients: Clients
    faults: list[Fault] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    _shadow: dict[str, Any] = field(default_factory=dict)
    _rng: random.Random | None = None
    _chaos: dict[str, float] = field(default_factory=dict)
    _no_loss: tuple[str, ...] = ()
    _hooked: list[tuple[Any, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for client in (self.clients.dynamodb, self.clients.dynamodb_unretried, self.clients.sqs, self.clients.sns,
                       self.clients.ses, self.clients.scheduler):
            self._hook(client.meta.events)
        # The downstream actions' clients, hooked on the session when not built yet (botocore copies a session's
        # hooks into a client it builds, per service): most tests never build them, and building costs time.
        for attribute, service in (("lambda_", "lambda"), ("events", "eventbridge"), ("stepfunctions", "sfn"),
                                   ("s3", "s3")):
            built = self.clients.__dict__.get(attribute)
            if built is not None:
                self._hook(built.meta.events)
            else:
                self._hook(self.clients.session.events, f".{service}")

    def detach(self) -> None:
        """Unhook from the clients (for clients shared by the tests of a module): a client the session's
        hooks were copied into since is unhooked too."""
        for attribute, service in (("lambda_", "lambda"), ("events", "eventbridge"), ("stepfunctions", "sfn"),
                                   ("s3", "s3")):
            built = self.clients.__dict__.get(attribute)
            if built is not None and (built.meta.events, "") not in self._hooked:
                self._hooked.append((built.meta.events, f".{service}"))
        for events, scope in self._hooked:
            events.unregister(f"before-parameter-build{scope}", self._keep_params)
            events.unregister(f"before-call{scope}", self._before_call)
            events.unregister(f"before-send{scope}", self._before_send)
            events.unregister(f"before-send{scope}", self._after_before_send)
        self._hooked.clear()

    def _hook(self, events: Any, scope: str = "") -> None:
        self._hooked.append((events, scope))
        events.register(f"before-parameter-build{scope}", self._keep_params)
        events.register_first(f"before-call{scope}", self._before_call)
        events.register_first(f"before-send{scope}", self._before_send)
        events.register_last(f"before-send{scope}", self._after_before_send)

    def inject(self, operation: str, kind: Kind, occurrence: int = 1, times: int = 1,
               code: str = "InternalServerError", match: Match | None = None,
               answer: dict[str, Any] | None = None) -> Fault:
        fault = Fault(operation, kind, occurrence, times, code, match, answer)
        self.faults.append(fault)
        return fault

    def chaos(self, seed: int, throttle: float = 0.0, error: float = 0.0, lost: float = 0.0,
              no_loss: tuple[str, ...] = ()) -> None:
        """Random faults from now on: ``throttle`` of all HTTP attempts (retried by botocore), ``error`` and
        ``lost`` of all calls (hard errors the app sees; lost ones were applied), no lost response on the
        operations ``no_loss`` names."""
        self._rng = random.Random(seed)
        self._chaos = {"throttle": throttle, "error": error, "lost": lost}
        self._no_loss = no_loss

    def calm(self) -> None:
        self._rng = None
        self._chaos = {}
        self.faults.clear()

    # --- hooks ----------------------------------------------------------------

    def _keep_params(self, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["faults_params"] = json.loads(json.dumps(params, default=_bytes_safe))
        context["faults_raw_params"] = dict(params)

    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        operation = f"{model.service_model.endpoint_prefix}.{model.name}"
        if model.service_model.service_name == "sesv2":
            operation = f"sesv2.{model.name}"
        self.calls[operation] += 1
        params: Mapping[str, Any] = context.get("faults_params", {})
        hit = [fault for fault in self.faults if fault.operation == operation and fault.hit(params)]
        if hit and hit[0].kind == "answer":
            self.injected["answer"] += 1
            return _Raw(200), {**(hit[0].answer or {}), "ResponseMetadata": {"HTTPStatusCode": 200}}
        if hit:
            return self._apply(hit[0].kind, hit[0].code, operation, model, context)
        if self._rng is not None:
            roll = self._rng.random()
            if roll < self._chaos.get("error", 0.0):
                return self._apply("error", "InternalServerError", operation, model, context)
            if roll < self._chaos.get("error", 0.0) + self._chaos.get("lost", 0.0) and operation not in self._no_loss:
                return self._apply("lost", "InternalServerError", operation, model, context)
        return None

    def _before_send(self, request: Any, **_: Any) -> Any:
        if self._rng is None or self._rng.random() >= self._chaos.get("throttle", 0.0):
            return None
        self.injected["throttle"] += 1
        # botocore calls every before-send handler and takes the first answer: moto's stubber, after this one,
        # must not apply a request that AWS refused.  (One thread at a time: chaos is for sequential soaks.)
        botocore_stubber.enabled = False
        return _throttled(request)

    def _after_before_send(self, **_: Any) -> None:
        botocore_stubber.enabled = True

    def _apply(self, kind: Kind, code: str, operation: str, model: Any, context: dict[str, Any]) -> Any:
        self.injected[kind] += 1
        if kind == "retried" and _attempts(context) == 1:
            kind = "lost"  # a client botocore makes one attempt on (Clients.dynamodb_unretried) does not retry
        if kind in ("lost", "retried", "crash_after"):
            self._replay(model, context)
        if kind in ("crash", "crash_after"):
            raise WorkerCrash(f"worker crashed at {operation} ({kind})")
        if kind == "retried":
            return None  # the real call is botocore's retry of the applied one
        return _error(code, operation)

    def _replay(self, model: Any, context: dict[str, Any]) -> None:
        """Apply the call once through a client no fault hooks (the request that reached AWS)."""
        service = model.service_model.service_name
        if service not in self._shadow:
            client_config = context.get("client_config")
            self._shadow[service] = boto3.session.Session().client(
                service, region_name=context.get("client_region"), config=client_config)
        client = self._shadow[service]
        method = getattr(client, _snake(model.name))
        with contextlib.suppress(client.exceptions.ClientError):  # the applied attempt's answer is what was lost
            method(**context["faults_raw_params"])


def _attempts(context: Mapping[str, Any]) -> int:
    """How many attempts botocore makes of a call of the client (``total_max_attempts``; 0: not said)."""
    retries = getattr(context.get("client_config"), "retries", None) or {}
    return int(retries.get("total_max_attempts", 0) or 0)


def _bytes_safe(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("latin-1")
    return str(value)


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _throttled(request: Any) -> AWSResponse:
    """A throttling answer in the request's protocol, for botocore's retry handler to see."""
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    content_type = request.headers.get("Content-Type", b"")
    content_type = content_type.decode() if isinstance(content_type, bytes) else str(content_type)
    if "x-www-form-urlencoded" in content_type:  # query protocol (SNS)
        body = (b"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>"
                b"<Message>Rate exceeded (injected)</Message></Error><RequestId>1</RequestId></ErrorResponse>")
        return AWSResponse(request.url, 400, _headers({"Content-Type": "text/xml"}), _Body(body))
    code = "ProvisionedThroughputExceededException" if target.startswith("DynamoDB") else "ThrottlingException"
    body = json.dumps({"__type": code, "message": "Rate exceeded (injected)"}).encode()
    headers = _headers({"Content-Type": "application/x-amz-json-1.0", "x-amzn-ErrorType": code,
                           "x-amzn-query-error": "ThrottlingException;Sender"})
    return AWSResponse(request.url, 400, headers, _Body(body))


def _headers(values: Mapping[str, str]) -> HTTPHeaders:
    headers = HTTPHeaders()
    for name, value in values.items():
        headers[name] = value
    return headers


class _Body:
    """The raw stream of an AWSResponse."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data

    def read(self, *_: Any) -> bytes:
        data, self._data = self._data, b""
        return data
