"""The ``webhook`` action: a signed HTTPS request (POST, or the task's ``method``, with its own ``headers``) of a
JSON body to an allow-listed origin (docs/tasks.md "Webhooks").

The decisions are pure and come first: the URL and secret field checks, the
origin allow-list (TASK_WEBHOOK_ORIGINS), which addresses may be called (never
private, loopback, link-local, multicast or reserved ones; loopback only where
TASK_WEBHOOK_ALLOW_LOOPBACK, the local stage, allows it), the Standard Webhooks
signature (HMAC-SHA256 of ``<id>.<timestamp>.<body>`` with each of the secret's
``whsec_`` keys), the idempotency key of an execution (its ``webhook-id``),
what a response status means and how long a ``Retry-After`` asks to wait.

The I/O follows: the secret, read from SSM Parameter Store (SecureString,
WithDecryption) or Secrets Manager and kept per container for
SECRET_TTL_SECONDS; then the name is resolved once, every address it resolves to
is checked, and the request goes to the first one (SNI, certificate check and
Host header of the name), so a DNS answer that changes between the check and the
connection cannot reach another address.  Redirects are never followed.  The
whole call (connection, request, answer) has one deadline (``call_budget``):
TASK_WEBHOOK_TIMEOUT_SECONDS, or less when the invocation has less time left
than that and SETTLE_MARGIN_SECONDS, which are kept to settle the task.

This module imports nothing of the app but botocore's errors: actions/webhook.py, which
declares the action, imports it.  A failure raises ``WebhookRefused`` (permanent: a 4xx but 408 and 429, a 3xx, a
refused address or origin, a secret that does not exist or holds no ``whsec_`` key) or ``WebhookFailed``
(transient: 408, 429, 5xx, a timeout, a connection error), whose
``retry_after`` is the receiver's ``Retry-After``, for the executor's next delay.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import http.client
import io
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from chalicelib.tasks.action_deps import ActionDeps as Deps

# Standard Webhooks (https://www.standardwebhooks.com): the execution's idempotency key is the webhook-id.
IDEMPOTENCY_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SIGNATURE_VERSION = "v1"     # symmetric: HMAC-SHA256, base64
SECRET_PREFIX = "whsec_"
SECRET_BYTES = (24, 64)      # a key's length, decoded, as the specification bounds it
SECRET_TTL_SECONDS = 300.0   # a rotated secret is used within five minutes
MAX_URL_LENGTH = 2048
MAX_KEY_LENGTH = 200         # a longer idempotency key is sent as its SHA-256
KEPT_RESPONSE_BYTES = 512    # of a refused or failed response's body, in the error
SECRET_KINDS = ("ssm", "secretsmanager")
DEFAULT_PORTS = {"https": 443, "http": 80}
USER_AGENT = "timekeeper-webhook/1"
# Of the invocation's time left when a call starts, what the call leaves for what follows it: the outcome's settle
# (retried up to 5 times, 7.5 s apart in all), its dead letter and alert, or a retry's message sent back.
SETTLE_MARGIN_SECONDS = 10.0
# A call shorter than this is not made (TASK_WEBHOOK_TIMEOUT_SECONDS's least value).
MIN_CALL_SECONDS = 0.05
# The Retry-After of a call the invocation had no time for, or that its time cut short: longer than the executor
# waits in a delivery (timing.RETRY_CAP_SECONDS), so the next attempt is a later delivery's, with its own time.
OUT_OF_TIME_RETRY_SECONDS = 30.0
# The methods a webhook may use (the first is the default) and those that send no body (its signature signs an
# empty one).
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
BODILESS = ("GET",)
# A task's own headers: at most MAX_HEADERS, each name and value within these bounds, MAX_HEADER_BYTES in all.
MAX_HEADERS = 20
MAX_HEADER_NAME = 64
MAX_HEADER_VALUE = 1024
MAX_HEADER_BYTES = 4096
# RFC 9110's token (a field name) and field value (visible ASCII, spaces and tabs inside; no CR, LF or NUL).
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HEADER_VALUE = re.compile(r"(?:[!-~](?:[ \t!-~]*[!-~])?)?")
# Headers a task may not set (lowercase): what the signature and the idempotency key ride on (today's and the
# Standard Webhooks names), what the connection itself frames (Host, Content-Length, Transfer-Encoding) and the
# hop-by-hop ones (RFC 9110 7.6.1; any Proxy-* too).
RESERVED_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature", "host", "content-length",
                              "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade"})
RESERVED_PREFIXES = ("proxy-",)
# Networks whose addresses carry an IPv4 address that a gateway may reach: NAT64's prefixes.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Special-purpose networks some Python versions count as global: IETF protocol assignments (192.0.0.0/24).
_SPECIAL = (ipaddress.ip_network("192.0.0.0/24"),)
# A host name: dot-separated labels of letters, digits, hyphens (and underscores, which some names hold).
_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class WebhookRefused(ValueError):
    """A webhook that cannot succeed as it is: not retried (actions/webhook.py raises it as a PermanentActionError)."""


class WebhookFailed(RuntimeError):
    """A webhook that may succeed later: retried, after ``retry_after`` seconds when the receiver said so
    (actions/webhook.py raises it as an ActionRetryHint)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- field checks and the allow-lists (pure) ------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """Where a webhook URL points: scheme, host (lowercase, IPv6 without brackets), port, path and query."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}"


def target_of(url: str) -> Target:
    """The URL's target; ValueError saying what is wrong.  Only https (and http, for loopback where allowed),
    with a host, without user info or fragment, in printable ASCII."""
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise ValueError("must be printable ASCII without spaces (percent-encode the rest; a Unicode domain as "
                         "Punycode)")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError("must be an https:// URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("must not hold a user name or password")
    if parts.fragment or url.endswith("#"):
        raise ValueError("must not have a #fragment")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise ValueError("has no host")
    port = parts.port  # ValueError for a port out of range
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme, host, port if port is not None else DEFAULT_PORTS[scheme], path)


def normal_origin(text: str, allow_loopback: bool = False) -> str:
    """An origin (``https://host[:port]``, lowercase, default port left out) as TASK_WEBHOOK_ORIGINS lists it;
    ValueError when ``text`` is not one (a path, a query or user info) or is one the executor always refuses
    (``origin_problem``)."""
    parts = urlsplit(text.strip())
    if parts.path not in ("", "/") or parts.query:
        raise ValueError(f"{text.strip()!r} is not an origin (scheme://host[:port], no path)")
    target = target_of(text.strip())
    problem = origin_problem(target, allow_loopback)
    if problem:
        raise ValueError(f"{text.strip()!r}: {problem}")
    return target.origin


def origin_problem(target: Target, allow_loopback: bool = False) -> str | None:
    """Why every call to ``target``'s origin would be refused, or None: a host that is no DNS name (a ``*``
    wildcard is not one: each origin is listed as it is), an address ``address_refusal`` refuses, or plain
    http but to loopback where loopback is allowed (the local stage's receiver). Pure."""
    address = host_address(target.host)
    if address is None:
        if not _HOST_NAME.fullmatch(target.host):
            return ("the host is not a DNS name (a wildcard such as *.example.com is not supported: list each "
                    "origin)")
        if target.scheme == "http" and not allow_loopback:
            return "plain http is for the local stage's loopback receiver only (TASK_WEBHOOK_ALLOW_LOOPBACK)"
        return None
    problem = address_refusal(address, allow_loopback)
    if problem:
        return f"{problem}; webhooks call public addresses only"
    if target.scheme == "http" and not ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
        return "plain http is for the local stage's loopback receiver only (TASK_WEBHOOK_ALLOW_LOOPBACK)"
    return None


_SHORT_IPV4 = re.compile(r"(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}")


def host_address(host: str) -> str | None:
    """The address a URL's host (lowercase) names whatever DNS says, or None for a name DNS answers for: an IP
    address; an IPv4 address in a form the system's resolver also reads (127.1, 2130706433, 0x7f.0.0.1); a
    loopback address for ``localhost`` and its subdomains (RFC 6761). Pure."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return host
    except ValueError:
        pass
    if _SHORT_IPV4.fullmatch(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            return None
    return "127.0.0.1" if host == "localhost" or host.endswith(".localhost") else None


def parse_origins(text: str, allow_loopback: bool = False) -> tuple[str, ...]:
    """TASK_WEBHOOK_ORIGINS: comma-separated origins, normalised; ValueError for one the executor would refuse
    on this stage (``origin_problem``; ``allow_loopback``: TASK_WEBHOOK_ALLOW_LOOPBACK)."""
    return tuple(dict.fromkeys(normal_origin(part, allow_loopback) for part in text.split(",") if part.strip()))


def url_problem(url: str) -> str | None:
    """The field check of ``action.url``: what is wrong with it, or None."""
    try:
        target_of(url)
    except ValueError as exc:
        return str(exc) or "is not a URL"
    return None


def secret_problem(ref: str) -> str | None:
    """The field check of ``action.secret``: ``ssm:<parameter name>`` or ``secretsmanager:<secret name>``."""
    kind, sep, name = ref.partition(":")
    if not sep or kind not in SECRET_KINDS or not name or len(name) > 2048 or \
            not all(c.isascii() and (c.isalnum() or c in "/_+=.@-") for c in name):
        return ("must name the signing secret as ssm:<parameter name> or secretsmanager:<secret name>, "
                f"got {ref[:80]!r}")
    return None


def reserved_header(name: str) -> bool:
    """True when a task may not set the header ``name`` (RESERVED_HEADERS, RESERVED_PREFIXES, and the signature's
    and idempotency key's own headers). Pure."""
    lower = name.lower()
    own = {TIMESTAMP_HEADER.lower(), SIGNATURE_HEADER.lower(), IDEMPOTENCY_HEADER.lower()}
    return lower in RESERVED_HEADERS or lower in own or lower.startswith(RESERVED_PREFIXES)


def headers_problem(headers: dict[str, Any]) -> tuple[str, str] | None:
    """The field check of ``action.headers``: (the header at fault, or "" for the whole object; what is wrong), or
    None.  Names are RFC 9110 tokens, values strings of visible ASCII (spaces and tabs inside); none reserved
    (``reserved_header``), none twice in another case; bounded in count and size. Pure."""
    if len(headers) > MAX_HEADERS:
        return "", f"holds {len(headers)} headers, more than {MAX_HEADERS}"
    seen: set[str] = set()
    size = 0
    for name, value in headers.items():
        part = name if HEADER_NAME.fullmatch(name) and len(name) <= MAX_HEADER_NAME else ""
        if not part:
            return "", (f"holds the name {name[:80]!r}, which is not a header name (an RFC 9110 token of at most "
                        f"{MAX_HEADER_NAME} characters: letters, digits and !#$%&'*+-.^_`|~)")
        if reserved_header(name):
            return part, ("is a header the webhook sets itself (its signature, idempotency key, host and framing) "
                          "or a hop-by-hop one, which a task may not set")
        if name.lower() in seen:
            return "", f"holds {name[:80]!r} twice, in another case (header names are case-insensitive)"
        seen.add(name.lower())
        if not isinstance(value, str):
            return part, f"must be a string, got {type(value).__name__}"
        if len(value) > MAX_HEADER_VALUE or not HEADER_VALUE.fullmatch(value):
            return part, (f"must be at most {MAX_HEADER_VALUE} characters of visible ASCII, spaces and tabs "
                          "inside (no CR, LF or other control character)")
        size += len(name) + len(value)
    if size > MAX_HEADER_BYTES:
        return "", f"is {size} bytes of names and values, more than {MAX_HEADER_BYTES}"
    return None


def parse_secrets(text: str) -> tuple[str, ...]:
    """TASK_WEBHOOK_SECRETS: comma-separated ``ssm:<name>`` / ``secretsmanager:<name>``."""
    refs = [part.strip() for part in text.split(",") if part.strip()]
    for ref in refs:
        if secret_problem(ref):
            raise ValueError(f"{ref!r} is not ssm:<name> or secretsmanager:<name>")
    return tuple(dict.fromkeys(refs))


def refusal(spec: dict[str, Any], origins: Sequence[str], secrets: Sequence[str]) -> tuple[str, str] | None:
    """(field, what is wrong) when a validated webhook ``spec`` calls an origin TASK_WEBHOOK_ORIGINS does not
    list or signs with a secret TASK_WEBHOOK_SECRETS does not list; None when the stage allows it. Pure."""
    origin = target_of(spec["url"]).origin
    if origin not in origins:
        return "url", (f"is not at an origin this stage allows webhooks to call (TASK_WEBHOOK_ORIGINS): "
                       f"{origin}")
    if spec["secret"] not in secrets:
        return "secret", (f"is not a secret this stage allows webhooks to sign with (TASK_WEBHOOK_SECRETS): "
                          f"{spec['secret'][:80]!r}")
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), which is what it reaches."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_refusal(text: str, allow_loopback: bool = False) -> str | None:
    """Why a webhook may not connect to the address ``text``, or None: private, loopback (unless
    ``allow_loopback``), link-local (169.254.169.254: the instance metadata), multicast, reserved, unspecified
    (0.0.0.0) or otherwise not global; an IPv6 address carrying an IPv4 one is judged by it. Pure."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    embedded = _embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if embedded is not None:
        problem = address_refusal(str(embedded), allow_loopback)
        return f"{problem} (in {text})" if problem else None
    if address.is_loopback:
        return None if allow_loopback else f"{text} is a loopback address"
    special = any(address in network for network in _SPECIAL if network.version == address.version)
    for kind, flag in (("unspecified", address.is_unspecified), ("link-local", address.is_link_local),
                       ("multicast", address.is_multicast), ("reserved", address.is_reserved),
                       ("private", address.is_private or special)):
        if flag:
            return f"{text} is a {kind} address"
    if not address.is_global:
        return f"{text} is not a public address"
    return None


def signing_keys(text: str) -> tuple[bytes, ...]:
    """The keys a signing secret's value holds: one or more ``whsec_<base64>`` separated by whitespace or commas,
    the newest first (a rotation: every one signs), each 24 to 64 bytes decoded.  ValueError saying which one is
    wrong and how, never showing a key."""
    parts = text.replace(",", " ").split()
    if not parts:
        raise ValueError("is empty; it must hold whsec_<base64> keys")
    keys = []
    for n, part in enumerate(parts, 1):
        where, form = f"key {n} of {len(parts)}", f"each must be {SECRET_PREFIX}<base64>"
        if not part.startswith(SECRET_PREFIX):
            raise ValueError(f"{where} does not start with {SECRET_PREFIX}; {form}")
        encoded = part[len(SECRET_PREFIX):]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            raise ValueError(f"{where} is not base64 after {SECRET_PREFIX}; {form}") from None
        if not SECRET_BYTES[0] <= len(key) <= SECRET_BYTES[1]:
            raise ValueError(f"{where} is {len(key)} bytes decoded; each must be {SECRET_BYTES[0]} to "
                             f"{SECRET_BYTES[1]}")
        keys.append(key)
    return tuple(dict.fromkeys(keys))


def signature(keys: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` with
    each key, space-separated, in the keys' order."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(f"{SIGNATURE_VERSION}," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
                    for key in keys)


def idempotency_key(task_id: str, due: datetime) -> str:
    """The execution's key, its ``webhook-id``: ``<task id>@<due time>``, percent-encoded to fit a header (``.``
    too: the signed content is ``<id>.<timestamp>.<body>``); a key longer than MAX_KEY_LENGTH (a task source's item
    key) as ``sha256:<hex>``.  Every attempt and every redelivery of one execution sends the same key."""
    at = due.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = f"{quote(task_id, safe='_:-|/~').replace('.', '%2E')}@{at}"
    return key if len(key) <= MAX_KEY_LENGTH else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def outcome_of(status: int) -> str:
    """What a response's status means: ``done`` (2xx), ``retry`` (408, 429, 5xx) or ``refused`` (any other)."""
    if 200 <= status < 300:
        return "done"
    if status in (408, 429) or status >= 500:
        return "retry"
    return "refused"


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """A ``Retry-After`` header as seconds from ``now``: delta-seconds or an HTTP date (a past one is 0);
    None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


# --- the secret, per container ---------------------------------------------------------------------------------------

def secret_value(deps: Deps, ref: str) -> tuple[bytes, ...]:
    """The keys of the signing secret ``ref`` names (``signing_keys``), read at most once per SECRET_TTL_SECONDS per
    container: the executor's threads that need it at once wait for the one reading it (``secret_lock``), rather
    than each reading it.  WebhookRefused when it does not exist or holds no valid key (a value not kept: the
    next webhook reads it again)."""
    cached = _cached_secret(deps, ref)
    if cached is not None:
        return cached
    with secret_lock(deps, ref):
        cached = _cached_secret(deps, ref)  # read by the thread this one waited for
        return cached if cached is not None else _read_secret(deps, ref)


def secret_lock(deps: Deps, ref: str) -> threading.Lock:
    lock: threading.Lock = deps.memo.setdefault(("webhook-secret-lock", ref), threading.Lock())  # atomic
    return lock


def _cached_secret(deps: Deps, ref: str) -> tuple[bytes, ...] | None:
    cached = deps.memo.get(("webhook-secret", ref))
    if cached is not None and deps.clock().timestamp() - cached[1] < SECRET_TTL_SECONDS:
        return tuple(cached[0])
    return None


def _read_secret(deps: Deps, ref: str) -> tuple[bytes, ...]:
    now = deps.clock().timestamp()
    kind, _, name = ref.partition(":")
    try:
        if kind == "ssm":
            value = deps.clients.ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
        else:
            response = deps.clients.secretsmanager.get_secret_value(SecretId=name)
            value = response.get("SecretString") or response.get("SecretBinary", b"")
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("ParameterNotFound", "ResourceNotFoundException"):
            raise WebhookRefused(f"action.secret {ref!r} does not exist ({code})") from exc
        raise
    text = value if isinstance(value, str) else bytes(value).decode("ascii", "replace")
    try:
        keys = signing_keys(text)
    except ValueError as exc:
        raise WebhookRefused(f"action.secret {ref!r}: its value {exc}") from None
    deps.memo[("webhook-secret", ref)] = (keys, now)
    return keys


# --- the call ----------------------------------------------------------------------------------------------------------

def call_budget(timeout: float, seconds_left: float | None) -> tuple[float, bool]:
    """The seconds the whole call (connection, request, answer) may take: ``timeout``
    (TASK_WEBHOOK_TIMEOUT_SECONDS), or the invocation's ``seconds_left`` (None: unknown) less
    SETTLE_MARGIN_SECONDS when that is less; and whether the invocation's time is what bounds it. Pure."""
    if seconds_left is not None and seconds_left - SETTLE_MARGIN_SECONDS < timeout:
        return seconds_left - SETTLE_MARGIN_SECONDS, True
    return timeout, False


def system_addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (the system's resolver); OSError or UnicodeError when it does not."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


@dataclass(frozen=True)
class Network:
    """How a call reaches its receiver: the resolver, the TLS context and the clock its deadline runs on (the
    system's; the tests inject theirs)."""

    addresses: Callable[[str, int], Sequence[str]] = system_addresses
    tls: Callable[[], ssl.SSLContext] = ssl.create_default_context
    monotonic: Callable[[], float] = time.monotonic


SYSTEM = Network()


class _Deadline:
    """The seconds a call has left; TimeoutError once none is."""

    def __init__(self, seconds: float, monotonic: Callable[[], float]) -> None:
        self.seconds, self._monotonic = seconds, monotonic
        self._end = monotonic() + seconds

    def left(self) -> float:
        left = self._end - self._monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out: the call's deadline of {self.seconds:.3g} s passed")
        return left

    @property
    def passed(self) -> bool:
        return self._monotonic() >= self._end


class _Bounded:
    """A connected socket (plain or TLS) each of whose operations may take only what is left of the call's
    ``deadline``, so a receiver that sends one byte at a time cannot hold the call past it."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock, self._deadline = sock, deadline

    def _armed(self) -> socket.socket:
        self._sock.settimeout(self._deadline.left())
        return self._sock

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._armed().send(view):]

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        return self._armed().recv_into(buffer, nbytes)

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        """The response's reader, reading through this socket; as ``socket.makefile``, it keeps the socket open
        until it is closed itself (the connection closes its socket once the response's head is read)."""
        self._sock._io_refs += 1  # type: ignore[attr-defined]
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to ``address``, with the SNI, certificate check and Host header of the URL's host, within
    ``deadline``."""

    def __init__(self, host: str, port: int, address: str, deadline: _Deadline, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=deadline.seconds, context=context)
        self._address, self._tls, self._deadline = address, context, deadline

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self._deadline.left())
        sock.settimeout(self._deadline.left())  # the handshake's
        self.sock = _Bounded(self._tls.wrap_socket(sock, server_hostname=self.host), self._deadline)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP to ``address`` (loopback only, where allowed), with the Host header of the URL's host, within
    ``deadline``."""

    def __init__(self, host: str, port: int, address: str, deadline: _Deadline) -> None:
        super().__init__(host, port, timeout=deadline.seconds)
        self._address, self._deadline = address, deadline

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self._deadline.left())
        self.sock = _Bounded(sock, self._deadline)


def resolve(target: Target, allow_loopback: bool,
            addresses_of: Callable[[str, int], Sequence[str]] = system_addresses) -> str:
    """The address to connect to: the host resolved once (``addresses_of``), refused when ANY address it
    resolves to is refused (``address_refusal``); plain http only to a loopback address where loopback is
    allowed."""
    try:
        found = addresses_of(target.host, target.port)
    except (OSError, UnicodeError) as exc:
        raise WebhookFailed(f"{target.host} does not resolve: {exc}") from exc
    addresses = list(dict.fromkeys(found))
    for address in addresses:
        problem = address_refusal(address, allow_loopback)
        if problem:
            raise WebhookRefused(f"{target.host} resolves to {problem}; webhooks call public addresses only")
    if not addresses:
        raise WebhookFailed(f"{target.host} resolves to no address")
    if target.scheme == "http" and not ipaddress.ip_address(addresses[0].split("%", 1)[0]).is_loopback:
        raise WebhookRefused(f"{target.origin}: plain http is for the local stage's loopback receiver only")
    return addresses[0]


def request_headers(spec: dict[str, Any], key: str, timestamp: int, mac: str) -> dict[str, str]:
    """The headers of a webhook's request: the task's own ``headers`` (a Content-Type or User-Agent of its own
    replaces the default one) and then the idempotency key and signature, which no task header replaces. Pure."""
    own: dict[str, str] = dict(spec.get("headers") or {})
    chosen = {name.lower() for name in own}
    defaults = {name: value for name, value in (("Content-Type", "application/json"), ("User-Agent", USER_AGENT))
                if name.lower() not in chosen}
    return {**defaults, **own, IDEMPOTENCY_HEADER: key, TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: mac}


def post(deps: Deps, spec: dict[str, Any], task_id: str, due: datetime,
         seconds_left: Callable[[], float] | None = None, network: Network = SYSTEM) -> dict[str, Any]:
    """Send ``spec['body']`` to ``spec['url']`` with ``spec['method']`` (POST; a GET sends no body, and its
    signature signs an empty one) and ``spec['headers']``, signed, with the execution's idempotency key, within
    the call's deadline (``call_budget``: ``seconds_left``, the invocation's time, when it is known); the result
    to record on success, else WebhookRefused or WebhookFailed (with OUT_OF_TIME_RETRY_SECONDS as its
    ``retry_after`` when the invocation's time was too short for the call or cut it short)."""
    settings = deps.settings
    target = target_of(spec["url"])
    problem = refusal(spec, settings.task_webhook_origins, settings.task_webhook_secrets)
    if problem:
        raise WebhookRefused(f"action.{problem[0]} {problem[1]}")
    keys = secret_value(deps, spec["secret"])
    method = str(spec.get("method", METHODS[0]))
    body = b"" if method in BODILESS else str(spec.get("body", "")).encode()
    timestamp = int(deps.clock().timestamp())
    key = idempotency_key(task_id, due)
    headers = request_headers(spec, key, timestamp, signature(keys, key, timestamp, body))
    budget, by_invocation = call_budget(settings.task_webhook_timeout_seconds,
                                        seconds_left() if seconds_left is not None else None)
    if budget < MIN_CALL_SECONDS:
        raise WebhookFailed(f"{method} {target.origin} not made: the invocation has "
                            f"{budget + SETTLE_MARGIN_SECONDS:.3g} s left, {SETTLE_MARGIN_SECONDS:g} s of which are "
                            "kept to settle the task", retry_after=OUT_OF_TIME_RETRY_SECONDS)
    deadline = _Deadline(budget, network.monotonic)
    why = "the invocation's time left less the settle's" if by_invocation else "TASK_WEBHOOK_TIMEOUT_SECONDS"
    address = resolve(target, settings.task_webhook_allow_loopback, network.addresses)
    connection: http.client.HTTPConnection = (
        _PinnedHTTPSConnection(target.host, target.port, address, deadline, network.tls())
        if target.scheme == "https" else _PinnedHTTPConnection(target.host, target.port, address, deadline))
    try:
        connection.request(method, target.path, body=None if method in BODILESS else body, headers=headers)
        response = connection.getresponse()
        status, retry_after = response.status, response.getheader("Retry-After")
        location = response.getheader("Location") or ""
        text = response.read(KEPT_RESPONSE_BYTES).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as exc:  # timeouts, refused and reset connections included
        if deadline.passed:
            raise WebhookFailed(f"{method} {target.origin}: {type(exc).__name__}: {exc} (the whole call's deadline: "
                                f"{budget:.3g} s, {why})",
                                retry_after=OUT_OF_TIME_RETRY_SECONDS if by_invocation else None) from exc
        raise WebhookFailed(f"{method} {target.origin}: {type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()
    kind = outcome_of(status)
    if kind == "done":
        return {"type": "webhook", "status": status, "idempotency_key": key}
    said = f"{method} {target.origin} answered {status}: {json.dumps(text[:200])}"
    if kind == "retry":
        raise WebhookFailed(said, retry_after=retry_after_seconds(retry_after, deps.clock()))
    if 300 <= status < 400:
        said += f"; redirects are not followed (Location: {location[:200]!r})"
    raise WebhookRefused(said)
