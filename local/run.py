"""`make run`: the whole app offline on one command (see README.md, Offline).

moto's server on 127.0.0.1:$LOCAL_AWS_PORT, every resource of the `local`
stage provisioned, the API on 127.0.0.1:$LOCAL_API_PORT and every event handler
app.py registers running, until Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from local.stage import LocalSettings, LocalSettingsError, start_local_stage


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    try:
        settings = LocalSettings.from_env(os.environ)
        stage = start_local_stage(settings)
    except LocalSettingsError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 2
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a shell may start us with it ignored
        signal.signal(signum, _interrupt)
    print(stage.banner(), flush=True)
    try:
        threading.Event().wait()  # until Ctrl-C (KeyboardInterrupt) or SIGTERM
    except KeyboardInterrupt:
        print("\nstopping...", flush=True)
    finally:
        stage.stop()
    print("stopped", flush=True)
    return 0


def lingering() -> list[threading.Thread]:
    """Threads other than this one that would keep the interpreter alive (not daemons)."""
    return [t for t in threading.enumerate()
            if t is not threading.current_thread() and not t.daemon and t.is_alive()]


def exit_now(code: int) -> None:
    """Exit even if a handler started a thread of its own that is still running: stop() already
    waited its bounded time, and Ctrl-C must end the process."""
    if lingering():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    exit_now(main())
