"""tests/deploy/moto_shims.py registers Chalice's Swagger 2.0 as API Gateway's importer does.

The deploy test (test_chalice_deploy_e2e.py) reads each method's authorization from moto after
``chalice deploy``; these check the registration it relies on for every authorization a stage can
choose (API_AUTH iam, api_key, cognito), from the swagger Chalice itself generates.  Calls go to
moto's backend directly: nothing is patched in this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from chalice.app import Chalice, CognitoUserPoolAuthorizer, IAMAuthorizer
from chalice.deploy.swagger import SwaggerGenerator
from moto import mock_aws
from moto.apigateway.models import apigateway_backends

from tests.deploy import moto_shims

REGION, ACCOUNT = "us-east-1", "123456789012"
HANDLER = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:shimmed"
POOL = f"arn:aws:cognito-idp:{REGION}:{ACCOUNT}:userpool/{REGION}_pool"


def swagger(protect: dict[str, Any]) -> dict[str, Any]:
    """Chalice's Swagger 2.0 of an app with a public route and two protected ones on a nested path."""
    app = Chalice(app_name="shimmed")

    @app.route("/health")
    def health() -> dict[str, str]:
        return {}

    @app.route("/tasks/{task_id}", methods=["GET", "DELETE"], **protect)
    def task(task_id: str) -> dict[str, str]:
        return {}

    document: dict[str, Any] = SwaggerGenerator(REGION, {"api_handler_arn": HANDLER}).generate_swagger(app)
    return document


@pytest.fixture
def backend() -> Iterator[Any]:
    with mock_aws():
        yield apigateway_backends[ACCOUNT][REGION]


def methods(backend: Any, api_id: str) -> dict[str, dict[str, Any]]:
    api = backend.get_rest_api(api_id)
    return {f"{verb} {resource.get_path()}": {
        "auth": method.authorization_type, "key": bool(method.api_key_required),
        "authorizer": api.authorizers[method.authorizer_id].name if method.authorizer_id else None,
        "integration": (method.method_integration.integration_type, method.method_integration.uri)}
        for resource in api.resources.values() for verb, method in resource.resource_methods.items()}


def imported(backend: Any, document: dict[str, Any]) -> str:
    info = document["info"]
    api = backend.create_rest_api(name=info["title"], description=info.get("description", ""))
    moto_shims.register_swagger(backend, api.id, document, overwrite=True)
    return str(api.id)


INTEGRATION = ("AWS_PROXY", f"arn:aws:apigateway:{REGION}:lambda:path/2015-03-31/functions/{HANDLER}/invocations")


@pytest.mark.parametrize("protect, auth, key, authorizer", [
    ({"authorizer": IAMAuthorizer()}, "AWS_IAM", False, None),
    ({"api_key_required": True}, "NONE", True, None),
    ({"authorizer": CognitoUserPoolAuthorizer("users", provider_arns=[POOL])}, "COGNITO_USER_POOLS", False, "users"),
])
def test_each_method_gets_the_authorization_its_security_names(
        backend: Any, protect: dict[str, Any], auth: str, key: bool, authorizer: str | None) -> None:
    api_id = imported(backend, swagger(protect))
    protected = {"auth": auth, "key": key, "authorizer": authorizer, "integration": INTEGRATION}
    assert methods(backend, api_id) == {
        "GET /health": {"auth": "NONE", "key": False, "authorizer": None, "integration": INTEGRATION},
        "GET /tasks/{task_id}": protected, "DELETE /tasks/{task_id}": protected}
    if authorizer:
        [registered] = backend.get_rest_api(api_id).authorizers.values()
        assert (registered.type, registered.provider_arns) == ("COGNITO_USER_POOLS", [POOL])


def test_an_overwrite_replaces_the_routes_and_keeps_the_api(backend: Any) -> None:
    api_id = imported(backend, swagger({"authorizer": IAMAuthorizer()}))
    document = swagger({})
    del document["paths"]["/tasks/{task_id}"]["delete"]
    moto_shims.register_swagger(backend, api_id, document, overwrite=True)
    assert {key: value["auth"] for key, value in methods(backend, api_id).items()} == {
        "GET /health": "NONE", "GET /tasks/{task_id}": "NONE"}
    assert backend.get_rest_api(api_id).binaryMediaTypes == document["x-amazon-apigateway-binary-media-types"]


def test_a_security_scheme_api_gateway_cannot_import_is_refused(backend: Any) -> None:
    document = swagger({"authorizer": IAMAuthorizer()})
    document["securityDefinitions"]["sigv4"] = {"type": "oauth2", "flow": "implicit"}
    with pytest.raises(ValueError, match="sigv4"):
        imported(backend, document)


def test_only_swagger_2_is_taken_over() -> None:
    assert moto_shims.is_swagger2({"swagger": "2.0"})
    assert not moto_shims.is_swagger2({"openapi": "3.0.1"})
