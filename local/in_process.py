"""The runtime's own AWS calls reach moto's server without a socket.

moto's server runs in this process (local/aws.py), and so do the app's
handlers and the runtime's sources: each of their AWS calls went out through a
socket, a TCP connection (a new one, and a new server thread, whenever the
client's pool of 20 was exhausted by the invocations running at once) and
werkzeug's HTTP parsing, only to come back into the same process, under the
same GIL as the handler that made it.  Measured under bench T, that plumbing
was more of the process's CPU than moto's own work (docs/offline-throughput.md).

``InProcessTransport.attach(client)`` answers a client's requests to moto's
endpoint by calling moto's WSGI application (the one its server serves:
``DomainDispatcherApplication(create_backend_app)``, over the same backends)
in the calling thread, from botocore's ``before-send`` event,
registered last (a fault injector's own ``before-send`` answers first).
Everything above the socket is unchanged: the request is signed, serialised and
retried by botocore as before, moto parses and answers it as its server would,
and botocore parses the answer.  Requests to any other endpoint, and every
request once the server is stopped, go over HTTP as before (an outage still
looks like one).  Clients outside this process (the bench, curl, tests) use the
server as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from io import BytesIO
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from werkzeug.test import EnvironBuilder, run_wsgi_app

if TYPE_CHECKING:  # moto is imported where it runs, never by a handler process (local/handler_processes.py)
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication


class InProcessTransport:
    """Sends requests for ``endpoint`` straight to moto's WSGI application while ``serving()``."""

    def __init__(self, endpoint: str, serving: Callable[[], bool],
                 app: DomainDispatcherApplication | None = None) -> None:
        parts = urlsplit(endpoint)
        self.endpoint = f"{parts.scheme}://{parts.netloc}"
        self._serving = serving
        # the server's own application when given (each service's app then built once), else one built alike
        if app is None:
            from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

            app = DomainDispatcherApplication(create_backend_app)
        self._app = app

    def attach(self, client: Any) -> Any:
        """Route ``client``'s requests to moto through this process (returns the client)."""
        client.meta.events.register_last("before-send", self.send)
        return client

    def attach_session(self, session: boto3.session.Session) -> boto3.session.Session:
        """Route the requests of every client ``session`` makes from now on to moto through this process."""
        session.events.register_last("before-send", cast(Any, self.send))  # its answer ends the request
        return session

    def serving(self) -> bool:
        return self._serving()

    def send(self, request: AWSPreparedRequest, **kwargs: Any) -> AWSResponse | None:
        """moto's answer to ``request``, or None (botocore sends it over HTTP) when it is not moto's."""
        if not request.url.startswith(self.endpoint + "/") or not self._serving():
            return None
        status, headers, content = self.answer(request_parts(request))
        return response(request.url, status, headers, content)

    def answer(self, parts: RequestParts) -> Answer:
        """moto's answer (status, headers, body) to a request given as ``request_parts`` makes it."""
        method, url, headers, data = parts
        split = urlsplit(url)
        environ = EnvironBuilder(path=split.path or "/", query_string=split.query, method=method,
                                 headers=headers, data=data, base_url=self.endpoint).get_environ()
        chunks, status, response_headers = run_wsgi_app(self._app, environ, buffered=True)
        try:
            content = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return int(status.split(" ", 1)[0]), dict(response_headers.items()), content


# (method, URL, headers, body) of a request, and (status, headers, body) of its answer: plain values, so that
# another process can send one and receive the other (local/handler_processes.py)
RequestParts = tuple[str, str, list[tuple[str, str]], bytes | str]
Answer = tuple[int, dict[str, str], bytes]


def request_parts(request: AWSPreparedRequest) -> RequestParts:
    body = request.body
    data: str | bytes = b""
    if isinstance(body, str | bytes):
        data = body
    elif isinstance(body, bytearray):
        data = bytes(body)
    elif body is not None:
        data = body.read()
    headers = [(name, value.decode() if isinstance(value, bytes) else str(value))
               for name, value in request.headers.items()]
    return request.method, request.url, headers, data


class RawResponse(BytesIO):
    """An answer's body as botocore reads a raw response (as moto's own MockRawResponse, without importing moto
    into a handler process)."""

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        contents = self.read()
        while contents:
            yield contents
            contents = self.read()


def response(url: str, status: int, headers: dict[str, str], content: bytes) -> AWSResponse:
    return AWSResponse(url, status, cast(Any, headers), RawResponse(content))
