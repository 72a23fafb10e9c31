"""The webhook action's pure rules: signature, addresses, origins, answers, Retry-After, the key, the docs' snippet."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.settings import Settings, SettingsError
from chalicelib.tasks import webhook
from chalicelib.tasks.model import InvalidTask, parse_action

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# An independent vector: printf '%s' '1767225600.{"hello": "world"}' | openssl dgst -sha256 -hmac whsec_example
VECTOR = (b"whsec_example", 1767225600, b'{"hello": "world"}',
          "v1=132b31117e0067a3bcac22daf51f6079ca5f679c25fa750bf2bafdecf1d0a0b3")


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body_as_v1_hex() -> None:
    secret, timestamp, body, expected = VECTOR
    assert webhook.signature(secret, timestamp, body) == expected


def _docs_snippet() -> Any:
    text = DOCS.read_text()
    section = text[text.index("### Verifying a webhook"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, "docs/tasks.md's verification snippet is gone"
    scope: dict[str, Any] = {}
    exec(code.group(1), scope)
    return scope["verify_timekeeper_signature"]


def test_the_docs_snippet_verifies_a_signed_request_and_refuses_a_forged_or_stale_one() -> None:
    verify = _docs_snippet()
    secret, timestamp, body, signed = VECTOR
    headers = {"Timekeeper-Timestamp": str(timestamp), "Timekeeper-Signature": signed}
    assert verify(secret, headers, body, timestamp + 10)
    assert not verify(secret, headers, body + b" ", timestamp)
    assert not verify(b"other", headers, body, timestamp)
    assert not verify(secret, headers, body, timestamp + 301)
    assert webhook.verify(secret, str(timestamp), signed, body, timestamp + 10)


@settings(max_examples=25, deadline=None)
@given(secret=st.binary(min_size=1, max_size=40), body=st.binary(max_size=200), timestamp=st.integers(0, 2**33))
def test_any_signature_verifies_with_its_own_secret_and_body_only(secret: bytes, body: bytes, timestamp: int) -> None:
    signed = webhook.signature(secret, timestamp, body)
    assert webhook.verify(secret, str(timestamp), signed, body, timestamp)
    assert not webhook.verify(secret + b"x", str(timestamp), signed, body, timestamp)


@pytest.mark.parametrize(("address", "refused"), [
    ("8.8.8.8", None), ("2606:4700:4700::1111", None),
    ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("fe80::1%eth0", "link-local"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("fc00::1", "private"),
    ("fd12:3456::1", "private"), ("100.64.0.1", "not a public"), ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"), ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"), ("::ffff:8.8.8.8", None),
    ("2002:7f00:1::1", "loopback"), ("64:ff9b::a9fe:a9fe", "link-local"), ("192.0.0.8", "private"),
])
def test_only_public_addresses_may_be_called(address: str, refused: str | None) -> None:
    problem = webhook.address_refusal(address)
    assert (problem is None) if refused is None else (problem is not None and refused in problem), problem


def test_loopback_when_allowed_is_loopback_only() -> None:
    assert webhook.address_refusal("127.0.0.1", allow_loopback=True) is None
    assert webhook.address_refusal("::ffff:127.0.0.1", allow_loopback=True) is None
    assert webhook.address_refusal("10.0.0.1", allow_loopback=True) is not None
    assert webhook.address_refusal("169.254.169.254", allow_loopback=True) is not None


@pytest.mark.parametrize(("url", "origin"), [
    ("https://Hooks.Example.COM/a?b=1", "https://hooks.example.com"),
    ("https://hooks.example.com:443/", "https://hooks.example.com"),
    ("HTTPS://hooks.example.com:8443/x", "https://hooks.example.com:8443"),
    ("https://hooks.example.com./x", "https://hooks.example.com"),
    ("http://127.0.0.1:8010/hook", "http://127.0.0.1:8010"),
    ("https://[2606:4700::1]:8443/", "https://[2606:4700::1]:8443"),
])
def test_an_urls_origin_is_lowercase_without_its_default_port(url: str, origin: str) -> None:
    assert webhook.target_of(url).origin == origin


def test_origins_match_by_scheme_host_and_port() -> None:
    allowed = webhook.parse_origins("https://HOOKS.example.com:443/, http://127.0.0.1:8010")
    assert allowed == ("https://hooks.example.com", "http://127.0.0.1:8010")
    spec = {"url": "https://hooks.example.com/x", "secret": "ssm:/s", "body": "{}"}
    assert webhook.refusal(spec, allowed, ("ssm:/s",)) is None
    for other in ("https://hooks.example.com:8443/x", "http://hooks.example.com/x", "https://evil.example.com/x",
                  "https://hooks.example.com.evil.net/x", "http://127.0.0.1:8011/"):
        assert webhook.refusal({**spec, "url": other}, allowed, ("ssm:/s",))[0] == "url"  # type: ignore[index]
    assert webhook.refusal({**spec, "secret": "ssm:/t"}, allowed, ("ssm:/s",))[0] == "secret"  # type: ignore[index]
    with pytest.raises(ValueError, match="not an origin"):
        webhook.parse_origins("https://hooks.example.com/path")


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://hooks.example.com/", "https://"), ("https://user:pw@hooks.example.com/", "user name"),
    ("https://hooks.example.com/#frag", "fragment"), ("https:///path", "no host"),
    ("https://hooks.example.com/a b", "printable ASCII"), ("https://hooks.example.com:99999/", "out of range"),
    ("https://hooks.example.com/" + "a" * 2048, "longer than"),
])
def test_a_bad_url_is_refused_naming_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(InvalidTask) as caught:
        parse_action({"type": "webhook", "url": url, "secret": "ssm:/s", "body": "{}"})
    assert caught.value.field == "action.url" and problem in caught.value.message


def test_a_secret_names_ssm_or_secrets_manager() -> None:
    assert webhook.secret_problem("ssm:/timekeeper/prod/hook") is None
    assert webhook.secret_problem("secretsmanager:prod/hook-1") is None
    for bad in ("vault:/x", "ssm:", "/timekeeper/hook", "ssm:/a b"):
        assert webhook.secret_problem(bad) is not None


@pytest.mark.parametrize(("status", "outcome"), [
    (200, "done"), (204, "done"), (299, "done"), (301, "refused"), (400, "refused"), (401, "refused"),
    (404, "refused"), (408, "retry"), (409, "refused"), (429, "retry"), (500, "retry"), (503, "retry"),
])
def test_what_an_answer_means(status: int, outcome: str) -> None:
    assert webhook.outcome_of(status) == outcome


@pytest.mark.parametrize(("value", "seconds"), [
    ("120", 120.0), (" 0 ", 0.0), ("Thu, 01 Jan 2026 00:00:30 GMT", 30.0),
    ("Wed, 31 Dec 2025 23:00:00 GMT", 0.0), (None, None), ("", None), ("soon", None), ("-5", None), ("1.5", None),
])
def test_retry_after_in_seconds_or_as_an_http_date(value: str | None, seconds: float | None) -> None:
    assert webhook.retry_after_seconds(value, NOW) == seconds


def test_the_idempotency_key_is_the_task_and_its_due_time_fit_for_a_header() -> None:
    due = datetime(2026, 11, 22, 12, 10, tzinfo=UTC)
    assert webhook.idempotency_key("ping", due) == "ping@2026-11-22T12:10:00Z"
    assert webhook.idempotency_key("USER#ä|R 1", due) == "USER%23%C3%A4|R%201@2026-11-22T12:10:00Z"
    long = webhook.idempotency_key("src/" + "x" * 300, due)
    assert long.startswith("sha256:") and long == webhook.idempotency_key("src/" + "x" * 300, due)


def test_loopback_may_be_allowed_on_the_local_stage_only() -> None:
    assert Settings.from_env({"STAGE": "local", "TASK_WEBHOOK_ALLOW_LOOPBACK": "true"}).task_webhook_allow_loopback
    with pytest.raises(SettingsError, match="TASK_WEBHOOK_ALLOW_LOOPBACK"):
        Settings.from_env({"STAGE": "prod", "TASK_WEBHOOK_ALLOW_LOOPBACK": "true"})


HOOK = {"type": "webhook", "url": "https://hooks.example.com/x", "secret": "ssm:/hooks/signing", "body": "{}"}


@pytest.mark.parametrize("name", [
    *sorted(webhook.RESERVED_HEADERS), "Host", "Idempotency-Key", "TIMEKEEPER-SIGNATURE",
    "timekeeper-timestamp", "Proxy-Authorization", "TE"])
def test_a_header_the_webhook_sets_itself_or_a_hop_by_hop_one_is_refused_naming_it(name: str) -> None:
    with pytest.raises(InvalidTask) as refused:
        parse_action({**HOOK, "headers": {"X-Team": "7", name: "x"}})
    assert refused.value.field == f"action.headers.{name}"


@pytest.mark.parametrize(("headers", "field"), [
    ({"X-Bad": "a\r\nHost: evil"}, "action.headers.X-Bad"),
    ({"X-Bad": "tab\tok but\nnot a newline"}, "action.headers.X-Bad"),
    ({"X-Bad": " padded"}, "action.headers.X-Bad"),
    ({"X-Bad": 7}, "action.headers.X-Bad"),
    ({"X-Bad": "é"}, "action.headers.X-Bad"),
    ({"X-Bad": "x" * (webhook.MAX_HEADER_VALUE + 1)}, "action.headers.X-Bad"),
    ({"bad name": "x"}, "action.headers"),
    ({"": "x"}, "action.headers"),
    ({"X-A": "1", "x-a": "2"}, "action.headers"),
    ({f"X-{i}": "v" for i in range(webhook.MAX_HEADERS + 1)}, "action.headers"),
    ({f"X-{i}": "v" * 900 for i in range(5)}, "action.headers"),
    (["X-A", "1"], "action.headers"),
])
def test_a_bad_header_name_value_count_or_size_is_refused_naming_the_field(headers: Any, field: str) -> None:
    with pytest.raises(InvalidTask) as refused:
        parse_action({**HOOK, "headers": headers})
    assert refused.value.field == field


def test_a_webhooks_method_is_one_of_five_and_a_get_alone_sends_no_body() -> None:
    assert parse_action({**HOOK, "method": "PUT", "headers": {"X-Team": "7", "Content-Type": "text/plain"}}) == {
        **HOOK, "method": "PUT", "headers": {"X-Team": "7", "Content-Type": "text/plain"}}
    assert parse_action({k: v for k, v in {**HOOK, "method": "GET"}.items() if k != "body"})["method"] == "GET"
    for spec, field in (({**HOOK, "method": "get"}, "action.method"), ({**HOOK, "method": "HEAD"}, "action.method"),
                        ({**HOOK, "method": "GET"}, "action.body"),
                        ({k: v for k, v in {**HOOK, "method": "DELETE"}.items() if k != "body"}, "action.body"),
                        ({k: v for k, v in HOOK.items() if k != "body"}, "action.body")):
        with pytest.raises(InvalidTask) as refused:
            parse_action(spec)
        assert refused.value.field == field, spec


def test_a_tasks_headers_go_first_and_never_replace_the_key_or_the_signature() -> None:
    headers = webhook.request_headers({"headers": {"content-type": "text/plain", "X-Team": "7"}}, "k", 1, "v1=s")
    assert headers == {"User-Agent": webhook.USER_AGENT, "content-type": "text/plain", "X-Team": "7",
                       webhook.IDEMPOTENCY_HEADER: "k", webhook.TIMESTAMP_HEADER: "1", webhook.SIGNATURE_HEADER: "v1=s"}
