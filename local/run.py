"""`make run`: the whole app offline on one command (see docs/offline.md).

moto's server on 127.0.0.1:$LOCAL_AWS_PORT, every resource of the `local`
stage provisioned, the API on 127.0.0.1:$LOCAL_API_PORT and every event handler
app.py registers running, until Ctrl-C or SIGTERM.

Stopping is bounded, even under load: the runtime's threads get
STOP_THREADS_SECONDS (a handler still running is abandoned: every thread is a
daemon), moto's server is stopped, "stopped" is printed and the process ends
with ``os._exit`` once stdout and stderr are flushed (nothing offline needs the
interpreter's exit handlers, and a daemon thread holding a lock must not keep
the process alive).  A watchdog ends the process after STOP_DEADLINE_SECONDS
whatever happens, and a second Ctrl-C ends it at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType

from local.stage import PROJECT_DIR, LocalSettings, LocalSettingsError, start_local_stage

STOP_THREADS_SECONDS = 0.5   # for the runtime's threads together
STOP_DEADLINE_SECONDS = 4.0  # from the signal to the end of the process, whatever happens
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # SIGINT too: a shell may start us with it ignored


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    end_process(128 + signum)


def main() -> int:
    try:
        settings = LocalSettings.from_env(os.environ)
        stage = start_local_stage(settings, run_file=PROJECT_DIR / settings.run_file)  # for chalice local
    except LocalSettingsError as exc:
        print(f"make run: {exc}", file=sys.stderr)
        return 2
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    print(stage.banner(), flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # until Ctrl-C or SIGTERM
        while True:
            # Short sleeps, not one endless wait: Python runs signal handlers in this thread only, and
            # a signal the kernel hands to a busy thread would not wake an endless wait.
            time.sleep(0.2)
    for signum in STOP_SIGNALS:  # a second signal while stopping ends the process at once
        signal.signal(signum, _exit_at_once)
    watchdog = threading.Timer(STOP_DEADLINE_SECONDS, give_up)
    watchdog.daemon = True
    watchdog.start()
    print("\nstopping...", flush=True)
    stage.stop(STOP_THREADS_SECONDS)
    # One write, on a line of its own: a handler thread still finishing may be between a print's text and
    # its newline, and the line must read exactly "stopped".
    sys.stdout.write("\nstopped\n")
    sys.stdout.flush()
    return 0


def end_process(code: int) -> None:
    """Flush what was printed and end the process now: no thread (a handler's own, a daemon holding the
    logging lock, an executor joined at exit) can keep it alive after a stop."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def give_up() -> None:
    """The watchdog: the stop took too long.  stdout itself may be what blocks (a full pipe), so the
    last words are written by another thread, given a moment, and the process ends either way."""
    words = f"stop: still not done after {STOP_DEADLINE_SECONDS:g}s; exiting\n".encode()
    threading.Thread(target=os.write, args=(2, words), daemon=True).start()
    time.sleep(0.1)
    os._exit(1)


if __name__ == "__main__":
    exit_code = 1
    try:
        exit_code = main()
    finally:  # even if printing failed (a closed pipe): the process ends here
        end_process(exit_code)
