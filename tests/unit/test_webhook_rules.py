"""The webhook action's pure rules: signature, addresses, origins, answers, Retry-After, the key, the docs' snippet."""

from __future__ import annotations

import base64
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import WebhookVerificationError

from chalicelib.settings import Settings, SettingsError
from chalicelib.tasks import timing, webhook
from chalicelib.tasks.model import InvalidTask, parse_action
from local.webhook_receiver import ClockedWebhook

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
# The Standard Webhooks published vector (the specification repository's reference libraries test against it,
# standard-webhooks/libraries/python/tests/test_webhooks.py, test_sign_function): no library computes it here.
VECTOR = ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
          b'{"test": 2432232314}', "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")


def whsec(key: bytes) -> str:
    return "whsec_" + base64.b64encode(key).decode()


def test_the_signature_is_the_standard_webhooks_published_example() -> None:
    secret, msg_id, timestamp, body, expected = VECTOR
    assert webhook.signature(webhook.signing_keys(secret), msg_id, timestamp, body) == expected


def test_a_rotation_signs_with_every_key_in_order_space_separated() -> None:
    secret, msg_id, timestamp, body, expected = VECTOR
    other = whsec(b"k" * 32)
    keys = webhook.signing_keys(f" {other},\n{secret} ")
    assert keys == (b"k" * 32, base64.b64decode(secret.removeprefix("whsec_")))
    newest, oldest = webhook.signature(keys, msg_id, timestamp, body).split(" ")
    assert oldest == expected and newest == webhook.signature(keys[:1], msg_id, timestamp, body)


@pytest.mark.parametrize(("value", "problem"), [
    ("", "is empty"), (" , ", "is empty"),
    ("hunter2-but-longer-than-24-bytes-xx", "key 1 of 1 does not start with whsec_"),
    (whsec(b"k" * 32) + " " + base64.b64encode(b"k" * 32).decode(), "key 2 of 2 does not start with whsec_"),
    ("whsec_not*base64*at*all*hunter2xx", "key 1 of 1 is not base64"),
    (whsec(b"k" * 23), "key 1 of 1 is 23 bytes decoded; each must be 24 to 64"),
    (whsec(b"k" * 65), "key 1 of 1 is 65 bytes decoded; each must be 24 to 64"),
])
def test_a_secret_is_whsec_base64_keys_of_24_to_64_bytes_else_refused_without_showing_it(
        value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        webhook.signing_keys(value)
    assert "hunter2" not in str(caught.value)


def test_a_key_is_accepted_with_or_without_base64_padding() -> None:
    padded = whsec(b"k" * 32)
    assert padded.endswith("=")
    assert webhook.signing_keys(padded) == webhook.signing_keys(padded.rstrip("=")) == (b"k" * 32,)


def _docs_snippet() -> Any:
    text = DOCS.read_text()
    section = text[text.index("### Verifying a webhook"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, "docs/tasks.md's verification snippet is gone"
    scope: dict[str, Any] = {}
    exec(code.group(1), scope)
    return scope["verified_body"]


def test_the_docs_snippet_verifies_a_signed_request_and_refuses_a_forged_stale_or_other_secrets_one() -> None:
    """The snippet is the standardwebhooks library, which reads the wall clock: the request is signed at it."""
    verified_body = _docs_snippet()
    secret, other = whsec(b"s" * 32), whsec(b"o" * 32)
    body, msg_id, now = b'{"order": 42}', "ping@2026-11-22T12:10:00Z", int(time.time())

    def headers(at: int, keys: str = secret) -> dict[str, str]:
        signed = webhook.signature(webhook.signing_keys(keys), msg_id, at, body)
        return {"webhook-id": msg_id, "webhook-timestamp": str(at), "webhook-signature": signed}

    assert verified_body(secret, headers(now), body) == {"order": 42}
    assert verified_body(secret, headers(now, f"{other} {secret}"), body) == {"order": 42}  # a rotation
    assert verified_body(secret, headers(now), body + b" ") is None
    assert verified_body(secret, {**headers(now), "webhook-id": "ping@2026-11-22T12:11:00Z"}, body) is None
    assert verified_body(other, headers(now), body) is None
    assert verified_body(secret, headers(now - 301), body) is None


@settings(max_examples=25, deadline=None)
@given(key=st.binary(min_size=24, max_size=64), body=st.text(max_size=200),
       msg_id=st.text(alphabet="abc@:%-", min_size=1, max_size=30), timestamp=st.integers(0, 2**33))
def test_any_signature_verifies_with_the_library_with_its_own_key_only(
        key: bytes, body: str, msg_id: str, timestamp: int) -> None:
    signed = webhook.signature((key,), msg_id, timestamp, body.encode())
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": signed}
    ClockedWebhook(whsec(key), lambda: float(timestamp)).verify(body.encode(), headers, json_parse=False)
    with pytest.raises(WebhookVerificationError):
        ClockedWebhook(whsec(key[::-1] + b"x"), lambda: float(timestamp)).verify(body.encode(), headers)


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
    allowed = webhook.parse_origins("https://HOOKS.example.com:443/, http://127.0.0.1:8010", allow_loopback=True)
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
    assert webhook.idempotency_key("v1.2", due) == "v1%2E2@2026-11-22T12:10:00Z"  # no "." in <id>.<ts>.<body>
    long = webhook.idempotency_key("src/" + "x" * 300, due)
    assert long.startswith("sha256:") and long == webhook.idempotency_key("src/" + "x" * 300, due)


def test_loopback_may_be_allowed_on_the_local_stage_only() -> None:
    assert Settings.from_env({"STAGE": "local", "TASK_WEBHOOK_ALLOW_LOOPBACK": "true"}).task_webhook_allow_loopback
    with pytest.raises(SettingsError, match="TASK_WEBHOOK_ALLOW_LOOPBACK"):
        Settings.from_env({"STAGE": "prod", "TASK_WEBHOOK_ALLOW_LOOPBACK": "true"})


@pytest.mark.parametrize(("origin", "reason"), [
    ("http://hooks.example.com", "plain http"), ("http://127.0.0.1:8010", "loopback"),
    ("https://127.0.0.1", "loopback"), ("https://[::1]:8443", "loopback"), ("https://10.0.0.1", "private"),
    ("https://169.254.169.254", "link-local"), ("https://*.example.com", "wildcard"),
    ("https://hooks_.exa mple.com", "printable ASCII"),
    # Hosts the system's resolver reads as an address whatever DNS says: loopback or private, always refused.
    ("https://localhost", "loopback"), ("https://api.localhost:8443", "loopback"), ("https://127.1", "loopback"),
    ("https://2130706433", "loopback"), ("https://0x7f.0.0.1", "loopback"), ("https://10.1", "private"),
])
def test_a_deployed_stage_refuses_to_start_with_an_origin_the_executor_always_refuses(origin: str, reason: str) -> None:
    with pytest.raises(SettingsError, match="TASK_WEBHOOK_ORIGINS") as caught:
        Settings.from_env({"STAGE": "prod", "TASK_WEBHOOK_ORIGINS": f"https://hooks.example.com, {origin}"})
    assert reason in str(caught.value)


def test_the_local_stage_keeps_its_plain_http_loopback_receiver_and_refuses_what_its_executor_refuses() -> None:
    local = {"STAGE": "local", "TASK_WEBHOOK_ALLOW_LOOPBACK": "true"}
    allowed = "http://127.0.0.1:8010, http://localhost:8010, https://127.0.0.1:8443, https://hooks.example.com"
    assert Settings.from_env({**local, "TASK_WEBHOOK_ORIGINS": allowed}).task_webhook_origins == (
        "http://127.0.0.1:8010", "http://localhost:8010", "https://127.0.0.1:8443", "https://hooks.example.com")
    assert Settings.from_env({"STAGE": "prod", "TASK_WEBHOOK_ORIGINS": "https://123.example.com"}).task_webhook_origins \
        == ("https://123.example.com",)  # a name with a numeric label is a name
    for refused in ("http://8.8.8.8", "https://10.0.0.1", "https://*.example.com", "https://10.1"):
        with pytest.raises(SettingsError, match="TASK_WEBHOOK_ORIGINS"):
            Settings.from_env({**local, "TASK_WEBHOOK_ORIGINS": refused})


def resolving(*answers: str) -> Any:
    """A resolver (webhook.Network.addresses) answering ``answers`` for any name."""
    return lambda host, port: list(answers)


@pytest.mark.parametrize("answers", [
    ("93.184.216.34", "10.0.0.7"), ("10.0.0.7", "93.184.216.34"), ("93.184.216.34", "2606:4700::1", "::1"),
    ("2606:4700::1", "169.254.169.254", "93.184.216.34"),
])
def test_a_name_is_refused_when_any_address_it_resolves_to_is_not_public(answers: tuple[str, ...]) -> None:
    target = webhook.target_of("https://hooks.example.com/x")
    [bad] = [a for a in answers if webhook.address_refusal(a)]
    with pytest.raises(webhook.WebhookRefused, match=re.escape(bad)):
        webhook.resolve(target, False, resolving(*answers))


def test_a_name_resolving_to_public_addresses_only_is_called_at_its_first() -> None:
    target = webhook.target_of("https://hooks.example.com/x")
    assert webhook.resolve(target, False, resolving("93.184.216.34", "2606:4700::1")) == "93.184.216.34"
    with pytest.raises(webhook.WebhookFailed, match="no address"):
        webhook.resolve(target, False, resolving())


def test_a_calls_budget_is_the_timeout_or_the_invocations_time_less_the_settles() -> None:
    margin = webhook.SETTLE_MARGIN_SECONDS
    assert webhook.call_budget(10.0, None) == (10.0, False)
    assert webhook.call_budget(10.0, 90.0) == (10.0, False)
    assert webhook.call_budget(10.0, margin + 0.25) == (0.25, True)
    assert webhook.call_budget(10.0, margin - 1) == (-1.0, True)


def test_the_docs_say_how_long_a_retry_after_waits_and_the_calls_deadline_as_the_code_does() -> None:
    """docs/tasks.md's "The answer" and "The deadline": the figures are the code's."""
    text = " ".join(DOCS.read_text().split())
    answer = text[text.index("**The answer.**"):text.index("**The deadline.**")]
    deadline = text[text.index("**The deadline.**"):text.index("### Verifying a webhook")]
    assert "fails the task" not in answer
    assert f"a wait of up to {timing.RETRY_CAP_SECONDS:g} s in the same delivery, a longer one in a later delivery" \
        in answer
    assert f"less {webhook.SETTLE_MARGIN_SECONDS:g} s kept to settle the task" in deadline
    assert f"retried in a later delivery, {webhook.OUT_OF_TIME_RETRY_SECONDS:g} s on" in deadline


HOOK = {"type": "webhook", "url": "https://hooks.example.com/x", "secret": "ssm:/hooks/signing", "body": "{}"}


@pytest.mark.parametrize("name", [
    *sorted(webhook.RESERVED_HEADERS), "Host", "Webhook-Signature", "WEBHOOK-ID", "Proxy-Authorization", "TE"])
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
