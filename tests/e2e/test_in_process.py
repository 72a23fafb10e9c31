"""The runtime's own clients reach moto's server in this process without a socket (local/in_process.py):
same answers as over HTTP, errors included, and an outage once the server stops, which it does at once."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ProxyConnectionError

from local.aws import MotoServer

pytestmark = pytest.mark.e2e

REGION = "us-east-1"
NO_HTTP = Config(proxies={"http": "http://127.0.0.1:9"}, retries={"mode": "standard", "max_attempts": 1},
                 connect_timeout=1)  # any request that goes over HTTP fails


def client(endpoint: str, service: str, config: Config | None = None) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION,  # type: ignore[call-overload]
                        aws_access_key_id="local", aws_secret_access_key="local", config=config)


def test_an_attached_client_gets_moto_s_answers_without_http_and_sees_the_same_state() -> None:
    moto = MotoServer(port=0).start()
    try:
        transport = moto.in_process()
        ddb = transport.attach(client(moto.endpoint, "dynamodb", NO_HTTP))
        sqs = transport.attach(client(moto.endpoint, "sqs", NO_HTTP))
        over_http = client(moto.endpoint, "dynamodb")
        ddb.create_table(TableName="direct", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        ddb.put_item(TableName="direct", Item={"PK": {"S": "a"}, "n": {"N": "1"}})
        assert over_http.get_item(TableName="direct", Key={"PK": {"S": "a"}})["Item"]["n"] == {"N": "1"}
        with pytest.raises(ClientError) as raised:
            ddb.put_item(TableName="direct", Item={"PK": {"S": "a"}}, ConditionExpression="attribute_not_exists(PK)")
        assert raised.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
        url = sqs.create_queue(QueueName="direct")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="hello")
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["hello"]
        with pytest.raises(ClientError) as missing:
            sqs.get_queue_url(QueueName="nowhere")
        assert "NonExistentQueue" in missing.value.response["Error"]["Code"]
        with pytest.raises(ProxyConnectionError):  # not attached: over HTTP, as before
            client(moto.endpoint, "dynamodb", NO_HTTP).list_tables()
        with urllib.request.urlopen(f"{moto.endpoint}/moto-api/config", timeout=10):  # a new connection: the
            pass  # server's loop accepted it and waits a whole poll interval again before it looks at a stop
        began = time.monotonic()
        moto.stop()
        assert time.monotonic() - began < 0.4  # noticed within POLL_SECONDS (0.05), not moto's own 0.5 s
    finally:
        moto.stop()
    with pytest.raises((EndpointConnectionError, ProxyConnectionError)):  # stopped: an outage, as over HTTP
        ddb.list_tables()


def test_a_server_starts_empty_whatever_one_started_before_it_in_this_process_left() -> None:
    """moto's state is the process's: a stage started after another in the same test worker (a sample table
    restored by one, backed up by the next run of the other) would otherwise see what the first left. One
    started next to a running one (a test's own stage beside its module's) empties nothing."""
    first = MotoServer(port=0).start()
    try:
        ddb = client(first.endpoint, "dynamodb")
        ddb.create_table(TableName="left-over", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        ddb.create_backup(TableName="left-over", BackupName="left-over-1")
        client(first.endpoint, "sqs").create_queue(QueueName="left-over")
    finally:
        first.stop()
    second = MotoServer(port=0).start()
    try:
        assert client(second.endpoint, "dynamodb").list_tables()["TableNames"] == []
        assert client(second.endpoint, "dynamodb").list_backups()["BackupSummaries"] == []
        assert client(second.endpoint, "sqs").list_queues().get("QueueUrls", []) == []
        client(second.endpoint, "sqs").create_queue(QueueName="kept")
        beside = MotoServer(port=0).start()
        beside.stop()
        assert len(client(second.endpoint, "sqs").list_queues()["QueueUrls"]) == 1
    finally:
        second.stop()
