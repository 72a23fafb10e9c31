"""API Gateway settings of a deployed stage: errors in the app's shape, and throttling.

API Gateway answers some requests itself, before any Lambda runs: no or bad
credentials (401, 403), an unknown path, a body too large, throttling (429), an
integration that failed (5xx).  Its default bodies are ``{"message": ...}``; the
gateway responses here give every one of them the shape of the app's own errors,
``{"error": <API Gateway's message>, "field": <what it concerns>}``, with ``Cache-Control: no-store`` as
every JSON answer of the app has (chalicelib/web.py).

Throttling: every method of the stage is limited to API_THROTTLE_RATE requests
per second with bursts of API_THROTTLE_BURST (stage settings, documented in
docs/configuration.md), so a flood of requests is refused with 429 at the gateway instead
of running Lambda and DynamoDB.

Both paths carry them: ``overlay`` is merged into Chalice's SAM ``RestAPI`` by
``chalice package --merge-template`` (the responses inside the API definition,
so a change redeploys the API), and ``apply`` sets them after ``chalice deploy``
(then deploys the stage again so they take effect).
"""

from __future__ import annotations

from typing import Any

from chalicelib.settings import Settings

# Response type -> the field an error of that type concerns (API Gateway's DEFAULT_4XX and DEFAULT_5XX cover the
# types not listed).
GATEWAY_RESPONSES: dict[str, str] = {
    "UNAUTHORIZED": "Authorization",
    "ACCESS_DENIED": "Authorization",
    "MISSING_AUTHENTICATION_TOKEN": "Authorization",  # also what an unknown path gets on an IAM-protected API
    "INVALID_SIGNATURE": "Authorization",
    "EXPIRED_TOKEN": "Authorization",
    "AUTHORIZER_FAILURE": "Authorization",
    "AUTHORIZER_CONFIGURATION_ERROR": "Authorization",
    "INVALID_API_KEY": "x-api-key",
    "QUOTA_EXCEEDED": "x-api-key",
    "THROTTLED": "request",
    "REQUEST_TOO_LARGE": "body",
    "BAD_REQUEST_BODY": "body",
    "BAD_REQUEST_PARAMETERS": "request",
    "UNSUPPORTED_MEDIA_TYPE": "Content-Type",
    "RESOURCE_NOT_FOUND": "path",
    "DEFAULT_4XX": "request",
    "DEFAULT_5XX": "request",
}
CONTENT_TYPE = "application/json"
HEADERS = {"gatewayresponse.header.Cache-Control": "'no-store'"}  # a static value is quoted
REST_API = "RestAPI"  # Chalice's name for the API in the SAM template


def response_template(field: str) -> str:
    """The mapping template of a gateway response: ``$context.error.messageString`` is already a JSON string."""
    return '{"error": $context.error.messageString, "field": "' + field + '"}'


def gateway_responses() -> dict[str, dict[str, Any]]:
    """``x-amazon-apigateway-gateway-responses`` of the API definition."""
    return {kind: {"responseTemplates": {CONTENT_TYPE: response_template(field)}, "responseParameters": HEADERS}
            for kind, field in GATEWAY_RESPONSES.items()}


def method_settings(settings: Settings) -> list[dict[str, Any]]:
    """The stage's throttling, on every method."""
    return [{"ResourcePath": "/*", "HttpMethod": "*", "ThrottlingRateLimit": settings.api_throttle_rate,
             "ThrottlingBurstLimit": settings.api_throttle_burst}]


def overlay(settings: Settings) -> dict[str, Any]:
    """What the merge template adds to Chalice's ``RestAPI`` (AWS::Serverless::Api)."""
    return {REST_API: {"Properties": {
        "MethodSettings": method_settings(settings),
        "DefinitionBody": {"x-amazon-apigateway-gateway-responses": gateway_responses()},
    }}}


def deployed_rest_api(deployed: dict[str, Any]) -> str | None:
    """The REST API id .chalice/deployed/<stage>.json records, or None."""
    for resource in deployed.get("resources", []):
        if resource.get("resource_type") == "rest_api" and resource.get("rest_api_id"):
            return str(resource["rest_api_id"])
    return None


def apply(client: Any, rest_api_id: str, stage_name: str, settings: Settings) -> list[str]:
    """Set the gateway responses and the stage's throttling on a deployed API, then deploy the stage again.

    Idempotent: every call states the whole wanted value. Returns what was done, for the deploy report."""
    for kind, field in GATEWAY_RESPONSES.items():
        client.put_gateway_response(restApiId=rest_api_id, responseType=kind,
                                    responseTemplates={CONTENT_TYPE: response_template(field)},
                                    responseParameters=HEADERS)
    client.update_stage(restApiId=rest_api_id, stageName=stage_name, patchOperations=[
        {"op": "replace", "path": "/*/*/throttling/rateLimit", "value": str(settings.api_throttle_rate)},
        {"op": "replace", "path": "/*/*/throttling/burstLimit", "value": str(settings.api_throttle_burst)},
    ])
    client.create_deployment(restApiId=rest_api_id, stageName=stage_name,
                             description="timekeeper: gateway responses and throttling")
    return [f"API {rest_api_id}: {len(GATEWAY_RESPONSES)} gateway responses in the error shape",
            f"API {rest_api_id} stage {stage_name}: throttling {settings.api_throttle_rate:g}/s, "
            f"burst {settings.api_throttle_burst}"]
