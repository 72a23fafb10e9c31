"""Who may call the API: the keyword arguments that protect a route, chosen by API_AUTH.

Chalice attaches a route's authorizer when app.py is imported, so the choice is
made from the settings read at import:

=========  ==================================================================
API_AUTH   what a request to a protected route needs
=========  ==================================================================
iam        a SigV4 signature of an IAM principal allowed execute-api:Invoke;
           API Gateway checks it (IAMAuthorizer), no Lambda runs for it.
           The default of the deployed stages.
api_key    an ``x-api-key`` header with a key of a usage plan (API Gateway).
cognito    an ``Authorization`` header with a JWT of COGNITO_USER_POOL_ARN.
token      ``Authorization: Bearer <API_TOKEN>``, checked by the app itself
           (an HTTP middleware, which ``chalice local`` and
           ``chalice.test.Client`` run too): the local stage only.
none       nothing: only for tests of other features; ``make deploy``
           refuses a stage with it.
=========  ==================================================================

GET /health, GET /openapi.json and the console's page and files (GET /console, GET /console/{asset})
never need credentials. Every refusal has the shape of every other
error, ``{"error": ..., "field": ...}``: without credentials 401, with wrong
ones 403. On a deployed stage API Gateway answers them, through the gateway
responses of the deploy template (deploy/template.py); with ``token`` the
middleware answers them, so the local stage's answers have the same shape
(Chalice's local gateway would answer ``{"message": "Unauthorized"}`` from an
authorizer).

The token check reads the settings of the running container (``current()``),
not the ones read at import, so a test can change the token; it protects every
route but the public ones, so a route added without ``**protected`` is
protected all the same.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from chalice.app import Chalice, CognitoUserPoolAuthorizer, IAMAuthorizer, Request, Response

from chalicelib.settings import Settings

COGNITO_AUTHORIZER = "timekeeper-users"
BEARER = "bearer "


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None for any other form)."""
    if header[: len(BEARER)].lower() != BEARER:
        return None
    token = header[len(BEARER):].strip()
    return token or None


def token_allows(settings: Settings, header: str) -> bool:
    """True when ``header`` carries the configured API_TOKEN (compared in constant time)."""
    supplied = bearer_token(header)
    expected = settings.api_token
    if settings.api_auth != "token" or not expected or supplied is None:
        return False
    return hmac.compare_digest(supplied.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


# (path, method) that need no credentials: liveness, the API's description and the console's page and files
# (chalicelib/console: the page asks the operator for the token its data calls carry).
PUBLIC_ROUTES = frozenset({("/health", "GET"), ("/openapi.json", "GET"), ("/console", "GET"), ("/console/{asset}", "GET")})


def token_refusal(settings: Settings, header: str | None) -> Response | None:
    """The 401 or 403 for a request whose ``Authorization`` header is ``header``; None when it may pass."""
    if not header:
        return _refusal(401, "credentials are required: Authorization: Bearer <token>")
    if not token_allows(settings, header):
        return _refusal(403, "the Authorization header does not carry a valid bearer token")
    return None


def _refusal(status: int, message: str) -> Response:
    return Response(body={"error": message, "field": "Authorization"}, status_code=status,
                    headers={"Content-Type": "application/json"})


def require_token(app: Chalice, current: Callable[[], Settings]) -> None:
    """Check the bearer token of every request to a route that is not public (an HTTP middleware)."""

    def check_token(request: Request, get_response: Callable[[Request], Response]) -> Response:
        route = (str((request.context or {}).get("resourcePath", "")), str(request.method))
        if route not in PUBLIC_ROUTES:
            headers: Any = request.headers  # Chalice's case-insensitive mapping
            refusal = token_refusal(current(), headers.get("authorization") if headers else None)
            if refusal is not None:
                return refusal
        return get_response(request)

    app.register_middleware(check_token, "http")


def caller(request: Request | None) -> str:
    """Who called the API, as the request's context (API Gateway's) names them: an IAM principal's ARN (iam), a
    Cognito user's name or subject (cognito), the API key's id (api_key); ``"api"`` when it names nobody (token:
    one token for all; none)."""
    context = request.context if request is not None else None
    def part(of: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
        found = (of or {}).get(name)
        return found if isinstance(found, Mapping) else {}

    identity, claims = part(context, "identity"), part(part(context, "authorizer"), "claims")
    for value in (identity.get("userArn"), claims.get("cognito:username"), claims.get("email"), claims.get("sub"),
                  identity.get("apiKeyId")):
        if isinstance(value, str) and value:
            return value
    return "api"


def route_auth(app: Chalice, settings: Settings, current: Callable[[], Settings]) -> dict[str, Any]:
    """The ``@app.route(...)`` keyword arguments that protect a route under ``settings.api_auth``."""
    if settings.api_auth == "iam":
        return {"authorizer": IAMAuthorizer()}
    if settings.api_auth == "api_key":
        return {"api_key_required": True}
    if settings.api_auth == "cognito":
        return {"authorizer": CognitoUserPoolAuthorizer(
            COGNITO_AUTHORIZER, provider_arns=[settings.cognito_user_pool_arn])}
    if settings.api_auth == "token":
        require_token(app, current)
    return {}
