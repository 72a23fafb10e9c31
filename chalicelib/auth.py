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
token      ``Authorization: Bearer <API_TOKEN>``, checked by a built-in
           (Lambda) authorizer, which ``chalice local`` and
           ``chalice.test.Client`` run too: the local stage.
none       nothing: only for tests of other features; ``make deploy``
           refuses a stage with it.
=========  ==================================================================

GET /health never needs credentials. Without credentials a request gets 401
(``{"message": "Unauthorized"}``); with wrong ones 403 (``{"Message": ...}``),
from API Gateway on a deployed stage and from Chalice's local gateway offline.

The token authorizer compares against the settings of the running container
(``current()``), not the ones read at import, so a test can change the token.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from chalice.app import (
    AuthRequest,
    AuthResponse,
    Chalice,
    ChaliceAuthorizer,
    CognitoUserPoolAuthorizer,
    IAMAuthorizer,
)

from chalicelib.settings import Settings

TOKEN_AUTHORIZER = "token_authorizer"  # app.py exposes it under this name: Lambda handler app.token_authorizer
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
    return hmac.compare_digest(supplied.encode(), expected.encode())


def token_authorizer(app: Chalice, current: Callable[[], Settings]) -> ChaliceAuthorizer:
    """Register the built-in bearer-token authorizer on ``app``."""

    def token_authorizer(request: AuthRequest) -> AuthResponse:
        if token_allows(current(), request.token or ""):
            return AuthResponse(routes=["*"], principal_id="api-token")
        return AuthResponse(routes=[], principal_id="anonymous")

    authorizer: ChaliceAuthorizer = app.authorizer(name=TOKEN_AUTHORIZER)(token_authorizer)
    return authorizer


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
        return {"authorizer": token_authorizer(app, current)}
    return {}


def builtin_authorizer(protected: dict[str, Any]) -> ChaliceAuthorizer | None:
    """The Lambda authorizer among ``protected``, which app.py must expose as a module attribute."""
    authorizer = protected.get("authorizer")
    return authorizer if isinstance(authorizer, ChaliceAuthorizer) else None
