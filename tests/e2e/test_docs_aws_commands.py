"""Every `aws` command the docs show (README.md and docs/*.md: code blocks and inline code), run as a reader
runs it, with the README's variables and `aws` function, reaches moto's server on this machine, never AWS.

Each command runs in bash with the README's setup lines and the assignments of its own code block before it
(port 4566 made the test server's), the pinned AWS CLI of .venv, and every proxy variable pointing at a
loopback port where nothing listens, loopback itself excepted (NO_PROXY): a connection to anywhere else fails
loudly ("Failed to connect to proxy URL").  A command may fail for its own reasons (a placeholder ARN, a
table moto does not have); it may not leave the loopback."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from local.aws import MotoServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED_ENDPOINT = "127.0.0.1:4566"
WAIT_SECONDS = 30.0
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(aws [a-z0-9-]+ [a-z0-9-]+[^`]*)`")
SETUP = re.compile(r"^(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=|^aws\(\)")
ANSWERED = re.compile(r'"(?:POST|GET) / HTTP/1\.1" \d{3}')  # urllib3's line of an answer
LEFT_LOOPBACK = re.compile(r"Failed to connect to proxy|ProxyConnectionError|amazonaws\.com", re.IGNORECASE)


@dataclass(frozen=True)
class Shown:
    page: str
    command: str
    setup: tuple[str, ...]  # the assignments (and functions) of its code block


def logical_lines(block: str) -> Iterator[str]:
    """The block's commands: a line continued by a final backslash or by an open quote joins the next."""
    pending = ""
    for line in block.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending.replace("\\\n", " "), comments=True)
        except ValueError:  # an open quote
            continue
        if pending.endswith("\\"):
            continue
        yield pending.strip()
        pending = ""


def shown_commands() -> list[Shown]:
    found = []
    for page in PAGES:
        text = page.read_text()
        name = str(page.relative_to(ROOT))
        for block in FENCE.findall(text):
            lines = list(logical_lines(block))
            setup = tuple(line for line in lines if SETUP.match(line))
            found += [Shown(name, line, setup) for line in lines if line.startswith("aws ")]
        found += [Shown(name, command, ()) for command in INLINE.findall(FENCE.sub("", text))]
    return found


def readme_setup() -> tuple[str, ...]:
    """The README's variables and `aws` function: the setup of its block that sets AWS_ENDPOINT_URL."""
    [setup] = {shown.setup for shown in shown_commands()
               if shown.page == "README.md" and any("AWS_ENDPOINT_URL=" in line for line in shown.setup)}
    return setup


COMMANDS = shown_commands()


def dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port  # closed again: nothing listens there


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer(port=0).start()
    yield server
    server.stop()


def run(script: str, endpoint: str) -> str:
    """What the script printed (stdout and stderr); a waiter (`aws dynamodb wait`, which polls for minutes) is
    stopped once its first call's answer came back (or after WAIT_SECONDS)."""
    proxy = f"http://127.0.0.1:{dead_port()}"
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(ROOT / ".local" / "no-home"),
           "LANG": "C.UTF-8", "AWS_MAX_ATTEMPTS": "1",
           **{name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")},
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    process = subprocess.Popen(["bash", "-c", script.replace(DOCUMENTED_ENDPOINT, endpoint)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    answered = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if ANSWERED.search(line) and " wait " in script:
                answered.set()
        answered.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    answered.wait(WAIT_SECONDS)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    reader.join(timeout=10)
    return "".join(lines)


def test_the_docs_show_aws_commands_of_several_services_sqs_among_them() -> None:
    services = {shown.command.split()[1] for shown in COMMANDS}
    assert {"dynamodb", "sqs"} <= services, services
    assert any(line.startswith("aws()") for line in readme_setup())


@pytest.mark.parametrize("shown", COMMANDS, ids=[f"{s.page}:{s.command[:60]}" for s in COMMANDS])
def test_every_aws_command_the_docs_show_stays_on_this_machine(moto: MotoServer, shown: Shown) -> None:
    endpoint = moto.endpoint.removeprefix("http://")
    script = "\n".join([*readme_setup(), *shown.setup, "aws --debug " + shown.command.removeprefix("aws ")])
    output = run(script, endpoint)
    assert not LEFT_LOOPBACK.search(output), f"{shown.page}: {shown.command}\n{output[-3000:]}"
    connections = re.findall(r"Starting new HTTPS? connection \(\d+\): ([^:\s]+)", output)
    assert all(host in ("127.0.0.1", "localhost") for host in connections), (shown.command, connections)


def test_a_command_that_leaves_the_loopback_is_seen(moto: MotoServer) -> None:
    setup = [line for line in readme_setup() if not line.startswith("aws()")]  # the variables alone
    assert LEFT_LOOPBACK.search(run("\n".join([*setup, "aws --debug sqs list-queues"]),
                                    moto.endpoint.removeprefix("http://")))
