"""moto's server for the deploy test, taught the one thing ``chalice deploy`` needs that moto lacks.

Chalice creates and updates its REST API from a Swagger 2.0 document (ImportRestApi, then
PutRestApi with mode=overwrite).  moto 5.2 takes only OpenAPI 3 there: an import answers 500
(``KeyError: 'description'``, Chalice's ``info`` has none) and a put "Only OpenAPI 3.x.x are
currently supported"; its OpenAPI 3 import also ignores a method's ``security``, so no method
would show the authorizer the stage asks for.

``install()`` wraps the apigateway backend's ``import_rest_api`` and ``put_rest_api`` so that a
Swagger 2.0 document registers what API Gateway's importer registers for the subset Chalice
writes: a resource per path (and its ancestors), a method per operation with the authorization
its ``security`` names (``x-amazon-apigateway-authtype: awsSigv4`` -> AWS_IAM, an ``x-api-key``
header key -> apiKeyRequired, an ``x-amazon-apigateway-authorizer`` -> an authorizer of its type),
its method responses, its ``x-amazon-apigateway-integration`` and the API's binary media types.
Any other document goes to moto as before.

moto also replaces a stage on each CreateDeployment, dropping the stage's method settings (the
throttling ``make deploy`` sets); AWS keeps the stage and points it at the new deployment, which
``install()`` makes moto do too.  The app never sees any of this: only the test's server process
installs it.

    python -m tests.deploy.moto_shims      # prints the server's port, serves until stdin closes
"""

from __future__ import annotations

import sys
from typing import Any

AUTHTYPE = "x-amazon-apigateway-authtype"
AUTHORIZER = "x-amazon-apigateway-authorizer"
INTEGRATION = "x-amazon-apigateway-integration"
BINARY_MEDIA_TYPES = "x-amazon-apigateway-binary-media-types"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "x-amazon-apigateway-any-method")
AUTHORIZER_TYPES = {"cognito_user_pools": "COGNITO_USER_POOLS", "token": "TOKEN", "request": "REQUEST"}


def is_swagger2(document: Any) -> bool:
    return isinstance(document, dict) and str(document.get("swagger", "")).startswith("2")


def method_authorization(backend: Any, api_id: str, document: dict[str, Any],
                         operation: dict[str, Any]) -> dict[str, Any]:
    """put_method's authorization arguments for an operation's ``security`` (the first scheme it names)."""
    schemes = [name for requirement in operation.get("security") or [] for name in requirement]
    if not schemes:
        return {"authorization_type": "NONE"}
    name = schemes[0]
    scheme = document.get("securityDefinitions", {}).get(name)
    if scheme is None:
        raise ValueError(f"security scheme {name!r} is not in securityDefinitions")
    if scheme.get(AUTHTYPE) == "awsSigv4":
        return {"authorization_type": "AWS_IAM"}
    if AUTHORIZER in scheme:
        spec = scheme[AUTHORIZER]
        kind = AUTHORIZER_TYPES[str(spec.get("type", "")).lower()]
        api = backend.get_rest_api(api_id)
        authorizer = next((a for a in api.authorizers.values() if a.name == name), None)
        if authorizer is None:
            authorizer = backend.create_authorizer(
                api_id, name, kind, provider_arns=spec.get("providerARNs"), auth_type=scheme.get(AUTHTYPE),
                authorizer_uri=spec.get("authorizerUri"), authorizer_credentials=spec.get("authorizerCredentials"),
                identity_source=spec.get("identitySource") or f"method.request.header.{scheme.get('name')}",
                authorizer_result_ttl=spec.get("authorizerResultTtlInSeconds"))
        return {"authorization_type": kind, "authorizer_id": authorizer.id}
    if scheme.get("type") == "apiKey" and scheme.get("in") == "header" and scheme.get("name") == "x-api-key":
        return {"authorization_type": "NONE", "api_key_required": True}
    raise ValueError(f"security scheme {name!r} is not one API Gateway imports: {scheme}")


def resource_for(backend: Any, api_id: str, path: str) -> Any:
    """The resource of ``path``, created with its ancestors if missing."""
    api = backend.get_rest_api(api_id)
    resource = api.get_resource_for_path("/")
    walked = ""
    for part in [p for p in path.split("/") if p]:
        walked += "/" + part
        child = api.get_resource_for_path(walked)
        resource = child or backend.create_resource(function_id=api_id, parent_resource_id=resource.id,
                                                    path_part=part)
    return resource


def register_swagger(backend: Any, api_id: str, document: dict[str, Any], overwrite: bool) -> Any:
    """Register a Swagger 2.0 document's paths, methods, authorizations and integrations on an API."""
    api = backend.get_rest_api(api_id)
    if overwrite:
        api.resources = {}
        api.default = api.add_child("/")
        api.authorizers = {}
    for path, operations in sorted(document.get("paths", {}).items()):
        resource = resource_for(backend, api_id, path)
        for verb, operation in operations.items():
            if verb not in HTTP_METHODS:
                continue  # "parameters" and vendor extensions of the path item
            method = "ANY" if verb == "x-amazon-apigateway-any-method" else verb.upper()
            backend.put_method(api_id, resource.id, method, **method_authorization(backend, api_id, document, operation))
            for status in operation.get("responses", {}):
                backend.put_method_response(api_id, resource.id, method, str(status),
                                            response_models=None, response_parameters=None)
            integration = operation.get(INTEGRATION)
            if integration:
                # API Gateway stores the type upper-case (Chalice writes "aws_proxy")
                arguments = backend._build_integration_args({**integration, "type": str(integration["type"]).upper()})
                backend.put_integration(function_id=api_id, resource_id=resource.id, method_type=method,
                                        **{k: v for k, v in arguments.items() if v is not None})
                for response in backend._build_integration_responses_args(integration):
                    backend.put_integration_response(function_id=api_id, resource_id=resource.id, method_type=method,
                                                     **{k: v for k, v in response.items() if v is not None})
    if BINARY_MEDIA_TYPES in document:
        api.binaryMediaTypes = list(document[BINARY_MEDIA_TYPES])
    return api


def install() -> None:
    """Make moto's apigateway backend take Chalice's Swagger 2.0 (idempotent)."""
    from moto.apigateway.models import APIGatewayBackend, RestAPI

    if getattr(APIGatewayBackend.import_rest_api, "takes_swagger2", False):
        return
    moto_deploy = RestAPI.create_deployment

    def create_deployment(self: Any, name: str, description: str, stage_variables: Any = None) -> Any:
        stage = self.stages.get(name) if name else None
        deployment = moto_deploy(self, name, description, stage_variables)
        if stage is not None:  # the same stage, now serving the new deployment
            stage.deployment_id = deployment.id
            stage.variables.update(stage_variables or {})
            self.stages[name] = stage
        return deployment

    RestAPI.create_deployment = create_deployment  # type: ignore[method-assign]
    moto_import, moto_put = APIGatewayBackend.import_rest_api, APIGatewayBackend.put_rest_api

    def import_rest_api(self: Any, api_doc: dict[str, Any], fail_on_warnings: bool) -> Any:
        if not is_swagger2(api_doc):
            return moto_import(self, api_doc, fail_on_warnings)
        info = api_doc.get("info", {})
        api = self.create_rest_api(name=info.get("title", ""), description=info.get("description", ""))
        return register_swagger(self, api.id, api_doc, overwrite=True)

    def put_rest_api(self: Any, function_id: str, api_doc: dict[str, Any], fail_on_warnings: bool,
                     mode: str = "merge") -> Any:
        if not is_swagger2(api_doc):
            return moto_put(self, function_id, api_doc, fail_on_warnings, mode)
        return register_swagger(self, function_id, api_doc, overwrite=mode == "overwrite")

    import_rest_api.takes_swagger2 = True  # type: ignore[attr-defined]
    APIGatewayBackend.import_rest_api = import_rest_api  # type: ignore[method-assign]
    APIGatewayBackend.put_rest_api = put_rest_api  # type: ignore[method-assign]


def main() -> int:
    import logging

    from moto.server import ThreadedMotoServer

    from local import moto_corrections

    moto_corrections.install()  # moto behaves as AWS where the project knows how (never the runtime's speed-ups)
    install()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server.get_host_and_port()[1], flush=True)
    sys.stdin.read()  # the test closes it (or exits) to stop the server
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
