"""``make deploy`` sets the API's gateway responses and throttling after ``chalice deploy`` (moto's API Gateway)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.settings import Settings
from deploy import api_gateway

REGION = "us-east-1"


@pytest.fixture
def apigateway() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("apigateway", region_name=REGION)


def deployed_api(client: Any) -> str:
    """A REST API with one method, deployed to the stage ``api`` as ``chalice deploy`` leaves it."""
    api = str(client.create_rest_api(name="timekeeper")["id"])
    root = client.get_resources(restApiId=api)["items"][0]["id"]
    client.put_method(restApiId=api, resourceId=root, httpMethod="GET", authorizationType="AWS_IAM")
    client.put_integration(restApiId=api, resourceId=root, httpMethod="GET", type="MOCK")
    client.create_deployment(restApiId=api, stageName="api")
    return api


def test_every_gateway_response_gets_the_error_shape_and_the_stage_its_throttling(apigateway: Any) -> None:
    api = deployed_api(apigateway)
    sent: list[dict[str, Any]] = []
    apigateway.meta.events.register("provide-client-params.apigateway.UpdateStage",
                                    lambda params, **kwargs: sent.append(params))
    settings = Settings.from_env({"API_THROTTLE_RATE": "20", "API_THROTTLE_BURST": "40"})
    report = api_gateway.apply(apigateway, api, "api", settings)
    for kind in ("UNAUTHORIZED", "ACCESS_DENIED", "THROTTLED", "DEFAULT_4XX", "DEFAULT_5XX"):
        mapping = apigateway.get_gateway_response(restApiId=api, responseType=kind)["responseTemplates"]
        body = json.loads(mapping["application/json"].replace("$context.error.messageString", '"Unauthorized"'))
        assert set(body) == {"error", "field"}, kind
    for kind in api_gateway.GATEWAY_RESPONSES:  # JSON answers of the gateway, as the app's, are never kept
        answer = apigateway.get_gateway_response(restApiId=api, responseType=kind)
        assert answer["responseParameters"] == {"gatewayresponse.header.Cache-Control": "'no-store'"}, kind
    for kind, answer in api_gateway.overlay(settings)["RestAPI"]["Properties"]["DefinitionBody"][
            "x-amazon-apigateway-gateway-responses"].items():
        assert answer["responseParameters"] == {"gatewayresponse.header.Cache-Control": "'no-store'"}, kind
    [update] = sent
    assert {op["path"]: op["value"] for op in update["patchOperations"]} == {
        "/*/*/throttling/rateLimit": "20.0", "/*/*/throttling/burstLimit": "40"}
    assert len(apigateway.get_deployments(restApiId=api)["items"]) == 2  # redeployed: the responses take effect
    assert any("throttling 20/s, burst 40" in line for line in report)


def test_the_rest_api_is_found_in_chalices_deployed_record() -> None:
    deployed = {"resources": [{"name": "api_handler", "resource_type": "lambda_function"},
                              {"name": "rest_api", "resource_type": "rest_api", "rest_api_id": "abc123"}]}
    assert api_gateway.deployed_rest_api(deployed) == "abc123"
    assert api_gateway.deployed_rest_api({"resources": []}) is None


@pytest.mark.parametrize("variable, value", [("API_THROTTLE_RATE", "0"), ("API_THROTTLE_BURST", "lots")])
def test_a_throttle_setting_out_of_range_stops_the_import(variable: str, value: str) -> None:
    from chalicelib.settings import SettingsError

    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})
