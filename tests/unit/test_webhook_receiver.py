"""local/webhook_receiver.py under a burst: the receiver `make run` starts and P3's webhook row measures."""

from __future__ import annotations

import socket
from contextlib import ExitStack

from local.webhook_receiver import WebhookReceiver, new_secret


def test_connections_arriving_together_are_all_taken_by_the_kernel_before_the_server_accepts_one() -> None:
    # socketserver's default backlog (5) dropped the SYNs of a burst past it: each such POST came 1 s or 3 s
    # late (the sender's SYN retries), which P3 measured as the webhook's lateness
    receiver = WebhookReceiver(new_secret())   # not started: nothing accepts, the listen backlog holds them all
    host, port = receiver._server.server_address[:2]
    try:
        with ExitStack() as stack:
            for _ in range(64):
                stack.enter_context(socket.create_connection((str(host), int(port)), timeout=0.5))
    finally:
        receiver._server.server_close()
