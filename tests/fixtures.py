"""Shared fixtures: moto, provisioned resources, an injected clock, the Chalice test client."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.endpoint
import botocore.loaders
import botocore.session
import pytest
from chalice.test import Client
from moto import mock_aws

import app as app_module
from chalicelib.aws import Clients, Deps
from chalicelib.log import logger
from chalicelib.metrics import LINE_METRIC_NAMES, Metrics
from chalicelib.settings import Settings
from deploy.provision import provision
from local import moto_corrections, moto_speed, shared_loaders
from tests import metric_filters, moto_cpu
from tests.aws_limits import AwsLimits
from tests.faults import Faults
from tests.policy_recorder import ACCOUNT, RECORDER, report, suite_problems

__all__ = ["ACCOUNT"]  # moto's default account, re-exported for the tests


@dataclass
class FakeClock:
    """A clock tests move by hand; ``sleep`` advances it instead of waiting."""

    now: datetime = field(default_factory=lambda: datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC))
    slept: float = 0.0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += timedelta(seconds=seconds)


@dataclass
class Aws:
    """moto-backed clients plus helpers to read what the app did."""

    clients: Clients
    settings: Settings
    alert_queue_url: str
    limits: AwsLimits

    def queue_url(self, name: str) -> str:
        return self.clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def drain(self, queue_name_or_url: str) -> list[dict[str, Any]]:
        """Every message now in the queue (delays ignored by reading moto's backend via receive)."""
        url = queue_name_or_url if queue_name_or_url.startswith("http") else self.queue_url(queue_name_or_url)
        messages: list[Any] = []
        while True:
            batch = self.clients.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"],
                MessageAttributeNames=["All"]).get("Messages", [])
            if not batch:
                return messages
            messages.extend(batch)
            self.clients.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)])

    def sent(self, queue_name: str) -> list[tuple[str, int]]:
        """(body, delay seconds) of every message now in the queue, delayed ones included; empties it.

        Read from moto's backend, since a delayed message cannot be received before its time.
        """
        from moto.sqs.models import sqs_backends

        queue = sqs_backends[ACCOUNT][self.settings.region].queues[queue_name]
        out = [(m.body, round((m.delayed_until - (m.sent_timestamp or 0)) / 1000) if m.delayed_until else 0)
               for m in queue._messages]
        queue._messages.clear()
        return out

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts published to the alert topic, as {subject, message, dedup_id} (read once)."""
        out = []
        for m in self.drain(self.alert_queue_url):
            envelope = json.loads(m["Body"])
            out.append({"subject": envelope.get("Subject", ""), "message": json.loads(envelope["Message"]),
                        "dedup_id": envelope.get("MessageAttributes", {}).get("dedup_id", {}).get("Value")})
        return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass(frozen=True)
class _Provisioned:
    """A provisioned world as moto holds it: its backends' deep copy, and the settings it gave."""

    places: list[tuple[Any, str, str]]  # where each backend lives: (moto's BackendDict, account, region)
    backends: list[Any]  # one deep copy of them all, so that a backend's reference to another stays one
    settings: Settings
    alert_queue_url: str


# The provisioned world of each stage's settings, made once a process: ``provision`` is some 125 requests to moto
# (most of a functional test's set-up); a deep copy of moto's backends brings the same world back in milliseconds.
_PROVISIONED: dict[str, _Provisioned] = {}


def _deep_copy(backends: list[Any]) -> list[Any]:
    """moto's backends copied together (sesv2's holds ses's), sharing moto's registries of backends rather than
    copying them; moto's SQS queues hold locks and conditions, which ``copy.deepcopy`` cannot copy: new ones."""
    import copy
    import threading

    from moto.core.base_backend import BackendDict
    dispatch: Any = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    dispatch.setdefault(type(threading.Lock()), lambda _lock, _memo: threading.Lock())
    dispatch.setdefault(type(threading.RLock()), lambda _lock, _memo: threading.RLock())
    dispatch.setdefault(threading.Condition, lambda _condition, _memo: threading.Condition())
    registries: list[Any] = list(BackendDict._instances)  # type: ignore[misc]
    shared = {id(r): r for r in registries} | {id(a): a for r in registries for a in r.values()}
    copied: list[Any] = copy.deepcopy(backends, shared)
    return copied


def _freeze(settings: Settings, alert_queue_url: str) -> _Provisioned:
    from moto.core.base_backend import BackendDict
    places = [(bd, account, region) for bd in list(BackendDict._instances)  # type: ignore[misc]
              for account, regional in bd.items() for region in regional]
    return _Provisioned(places, _deep_copy([bd[a][r] for bd, a, r in places]), settings, alert_queue_url)


def _thaw(world: _Provisioned) -> None:
    """Inside a fresh ``mock_aws`` (every backend empty): each backend as it was when provisioned (a new copy)."""
    for (bd, account, region), backend in zip(world.places, _deep_copy(world.backends), strict=True):
        dict.__setitem__(bd[account], region, backend)


def provision_world(clients: Clients, settings: Settings) -> tuple[Settings, str]:
    """What ``make deploy`` provisions, in moto, plus a queue capturing the alert topic's messages: the stage's
    settings with the provisioned names, and that queue's URL."""
    provisioned = provision(clients, settings)
    settings = replace(settings, alert_topic_arn=provisioned.environment["ALERT_TOPIC_ARN"],
                       tasks_stream_arn=provisioned.environment["TASKS_STREAM_ARN"],
                       due_queue_url=provisioned.environment["DUE_QUEUE_URL"],
                       due_queue_arn=provisioned.environment["DUE_QUEUE_ARN"])
    capture = clients.sqs.create_queue(QueueName="alert-capture")["QueueUrl"]
    capture_arn = clients.sqs.get_queue_attributes(
        QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    clients.sns.subscribe(TopicArn=settings.alert_topic_arn, Protocol="sqs", Endpoint=capture_arn)
    return settings, capture


@contextlib.contextmanager
def moto_aws(clock: FakeClock | None = None) -> Iterator[Aws]:
    """The ``aws`` fixture's world (a module may share one: ``pytest.fixture(scope="module")``); with a
    clock, moto's backups are made at its time (without, at the real time, as on AWS).

    The first world of a stage's settings in a process is provisioned by ``deploy.provision`` (the code
    ``make deploy`` runs) and kept as a deep copy of moto's backends; each later world starts from a copy of it."""
    # moto plus its corrections toward AWS's behaviour (local/moto_corrections.py: transactions, serialised
    # conditional writes for the handlers that run threads, ...), never the offline runtime's speed-ups
    # (local/moto_speed.py) beyond the CPU caches of tests/moto_cpu.py: the app is proven against what AWS does,
    # not against the project's own moto.
    # moto's backups are made at the test's clock, so that ListBackups' time bounds mean what they mean on AWS.
    moto_corrections.install()
    moto_speed.uninstall()  # installed in this process if this xdist worker ran an e2e test before
    stamped = moto_corrections.backups_stamped_by(clock) if clock is not None else contextlib.nullcontext()
    with mock_aws(config={"lambda": {"use_docker": False}}), stamped:  # Lambda functions are invoked, never run
        settings = Settings.from_env()
        key = repr(settings)
        made = _PROVISIONED.get(key)
        if made is not None:
            _thaw(made)
        clients = Clients(settings)
        RECORDER.attach(clients.session)  # app code's calls are checked against the IAM policy
        limits = AwsLimits(clients)  # a request AWS would reject fails the test, though moto accepts it
        if made is None:
            made = _PROVISIONED[key] = _freeze(*provision_world(clients, settings))
        settings, capture = made.settings, made.alert_queue_url
        yield Aws(clients=clients, settings=settings, alert_queue_url=capture, limits=limits)
        if limits.violations and not limits.expected:
            pytest.fail("requests AWS would reject (moto accepted them):\n" + "\n".join(limits.violations))


@pytest.fixture
def aws(clock: FakeClock) -> Iterator[Aws]:
    with moto_aws(clock) as world:
        yield world


@dataclass
class Emitted:
    """The EMF documents the app's metrics emitted (each line parsed), the log lines that carry line metrics
    (chalicelib/metrics.py ``LINE_METRICS``), and what they say: a line metric as its metric filter reads it
    (tests/metric_filters.py), the others as EMF."""

    lines: list[str] = field(default_factory=list)
    logged: list[str] = field(default_factory=list)

    def documents(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def values(self, name: str, **dimensions: str) -> list[float]:
        """Every value of metric ``name`` emitted with exactly ``dimensions`` (Stage aside)."""
        found: list[float] = []
        if name in LINE_METRIC_NAMES:
            events = [*self.documents(), *metric_filters.parsed(self.logged)]
            return [value for value, dims in metric_filters.line_metric_values(name, events)
                    if {k: v for k, v in dims.items() if k != "Stage"} == dimensions]
        for document in self.documents():
            [directive] = document["_aws"]["CloudWatchMetrics"]
            names = {m["Name"] for m in directive["Metrics"]}
            dimension_names = set(directive["Dimensions"][0])
            if name in names and dimension_names - {"Stage"} == set(dimensions) and \
                    all(document[k] == v for k, v in dimensions.items()):
                found += document[name] if isinstance(document[name], list) else [document[name]]
        return found

    def total(self, name: str, **dimensions: str) -> float:
        return sum(self.values(name, **dimensions))


@pytest.fixture
def emitted() -> Emitted:
    return Emitted()


class _LineMetricLines(logging.Handler):
    """The app's log lines that carry a line metric, as its logger writes them (others are not even formatted)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines
        self.setFormatter(logger.registered_formatter)

    def emit(self, record: logging.LogRecord) -> None:
        if any(hasattr(record, name) for name in LINE_METRIC_NAMES):
            self.lines.append(self.format(record))


@pytest.fixture
def deps(aws: Aws, clock: FakeClock, emitted: Emitted) -> Iterator[Deps]:
    bundle = Deps(settings=aws.settings, clients=aws.clients, clock=clock, sleep=clock.sleep,
                  metrics=Metrics(emit=emitted.lines.append))
    app_module.container.use(bundle)
    handler = _LineMetricLines(emitted.logged)
    logging.getLogger(logger.name).addHandler(handler)
    yield bundle
    logging.getLogger(logger.name).removeHandler(handler)
    app_module.container.use(None)


class _ClockBackoff:
    """botocore.endpoint's ``time`` module, as far as its retry backoff uses it: it moves the test's clock."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def sleep(self, seconds: float) -> None:
        self._clock.advance(seconds=seconds)


@pytest.fixture
def fake_backoff(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """botocore's retry backoff (standard mode) moves the injected clock instead of sleeping for real.

    Use it with clients in retry mode ``standard``: adaptive mode's client-side rate limiter waits in real
    time once throttled, below anything a test can move."""
    monkeypatch.setattr(botocore.endpoint, "time", _ClockBackoff(clock))
    return clock


@pytest.fixture
def faults(aws: Aws) -> Faults:
    """Faults at the app's own AWS calls (tests/faults.py); armed by the test, after its arrange steps."""
    return Faults(aws.clients)


def use_settings(deps: Deps, **changes: Any) -> Deps:
    """Re-point the injected bundle at settings with ``changes`` (same clients and clock)."""
    deps.settings = replace(deps.settings, **changes)
    return deps


@pytest.fixture
def client(deps: Deps) -> Iterator[Client]:
    with Client(app_module.app) as test_client:
        yield test_client


# The test files that take longest (a full run's --durations on 2 cores, summed per file), longest first.  Under
# ``--dist loadfile`` a worker takes the next file in collection order when it is nearly done with its own: one of
# these collected late ran alone at the end while the other worker had nothing left.  Started first, the many
# short files even out the end.  A path here that no longer exists fails tests/unit/test_suite_order.py.  xdist
# would reorder files by their number of tests (a one-test file such as test_demo_process.py last): pyproject's
# ``--no-loadscope-reorder`` keeps this order.
LONGEST_FIRST = (
    "tests/e2e/test_console_browser.py",
    "tests/deploy/test_chalice_deploy_e2e.py",
    "tests/bench/test_runtime_bench.py",
    "tests/functional/test_task_sources.py",
    "tests/e2e/test_runtime.py",
    "tests/e2e/test_soak.py",
    "tests/functional/test_backup_scale.py",
    "tests/functional/test_backup_faults.py",
    "tests/functional/test_task_faults.py",
    "tests/functional/test_backup_verify_faults.py",
    "tests/e2e/test_demo_process.py",
    "tests/e2e/test_docs_aws_commands.py",
    "tests/bench/test_task_bench.py",
    "tests/functional/test_api_schema_fuzz.py",
    "tests/deploy/test_template.py",
    "tests/e2e/test_local_stage_load.py",
    "tests/e2e/test_demo_flows.py",
    "tests/e2e/test_run_process.py",
    "tests/functional/test_seeded_soak.py",
    "tests/e2e/test_sample_sources.py",
    "tests/functional/test_task_api.py",
    "tests/e2e/test_moto_corrections.py",
    "tests/e2e/test_exact_via_scheduler.py",
    "tests/functional/test_recurring_end.py",
    "tests/functional/test_executor.py",
    "tests/functional/test_backup_verification.py",
    "tests/functional/test_task_failures.py",
    "tests/functional/test_exports.py",
    "tests/bench/test_capacity.py",
)


def suite_order(item: pytest.Item) -> tuple[bool, int]:
    """Where a test runs: the files of LONGEST_FIRST first, in its order, then the others as collected;
    tests marked ``last`` (the IAM policy coverage check) after all the others."""
    path = item.nodeid.split("::", 1)[0]
    rank = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    return item.get_closest_marker("last") is not None, rank


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=suite_order)  # stable: a file's tests keep their order


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "last: runs after every other test (it checks what they did)")
    moto_corrections.install()  # wherever a test uses moto (mock_aws), moto behaves as AWS where it knows how
    moto_cpu.install()  # and spends less CPU per request, answering the same (tests/moto_cpu.py)
    share_botocore_loaders()


def share_botocore_loaders() -> None:
    """Every botocore session of the test process reads botocore's data files (service models, endpoints)
    through one loader per data path, so each file is read and parsed once per process, not once per session.

    Each test builds sessions of its own (the ``aws`` fixture's ``Clients``, the shadow clients of
    tests/faults.py and tests/aws_limits.py): with a loader each, re-parsing the JSON models was about 0.25 s
    of every moto test's setup. The files and what botocore builds from them are the same: a loader only caches
    what it read, and one session already shares it between all its clients."""
    shared_loaders.install()  # the offline processes' own (local/shared_loaders.py)


# --- the IAM policy check over the whole suite, also when pytest-xdist splits it -------------
#
# In one process, test_zz_policy_coverage (marked ``last``) checks every call the suite recorded.  Under
# ``pytest -n``, each worker records only its own tests' calls: each hands them to the controller when it
# finishes, and the controller checks them all together; a call a policy does not allow fails the run.

_WORKER_CALLS = "policy_calls"


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker
        workeroutput[_WORKER_CALLS] = base64.b64encode(pickle.dumps(RECORDER.calls)).decode()
        return
    if not getattr(config, "_policy_workers", 0):
        return  # one process: test_zz_policy_coverage checked these calls
    problems = suite_problems(RECORDER.calls)
    if problems:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"IAM policy check over the whole suite FAILED: {report(problems)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller collects a finished worker's recorded calls."""
    data = getattr(node, "workeroutput", {}).get(_WORKER_CALLS)
    if data:
        RECORDER.calls |= pickle.loads(base64.b64decode(data))  # our own worker's data
        node.config._policy_workers = getattr(node.config, "_policy_workers", 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line when the console's browser tests were skipped for want of Chromium (CI makes that a failure)."""
    for skipped in terminalreporter.stats.get("skipped", []):
        reason = skipped.longrepr[2] if isinstance(skipped.longrepr, tuple) else ""
        if "console browser tests skipped" in reason:
            terminalreporter.write_line(reason.removeprefix("Skipped: "), yellow=True)
            return
