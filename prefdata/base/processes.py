"""Servers a command starts must not outlive it, and a stopped command must end in seconds.

    die_with_parent       Popen's preexec_fn: Linux sends the child SIGTERM when the process that
                          started it ends, however it ends (kill -9 included), so no server is
                          left behind; elsewhere a no-op
    own_session()         Popen keywords for a server in a session of its own: a signal to the
                          command's process group (`timeout`, a job scheduler, Ctrl-C in a shell)
                          does not reach it, so the command can still report to it while it stops
    register(stop)        a child's stop(), for the deadline below (the `with` that started it
                          stops it on a normal exit)
    deadline_after_signal a SIGTERM or SIGINT lets the command unwind as usual (its `finally`
                          blocks, the flow's crash report); if it has not ended `grace_s` later
                          (a generate() call in a task thread cannot be interrupted), the
                          registered children are stopped and the process exits with 143 or 130

Imports nothing of prefdata's; the standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Callable

PR_SET_PDEATHSIG = 1
_stops: list[Callable[[], None]] = []
_armed = threading.Event()


# Looked up here, in the parent: the child runs die_with_parent between fork and exec, where the
# parent's other threads are gone but not their locks, so a lookup there (dlopen takes the loader's
# lock) could wait forever, and Popen with it.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
_SIGTERM = int(signal.SIGTERM)


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent thread ends (Linux prctl)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)


def own_session() -> dict:
    return {"start_new_session": True, "preexec_fn": die_with_parent}


def register(stop: Callable[[], None]) -> Callable[[], None]:
    _stops.append(stop)
    return stop


def unregister(stop: Callable[[], None]) -> None:
    if stop in _stops:
        _stops.remove(stop)


def _stop_children() -> None:
    for stop in reversed(list(_stops)):
        try:
            stop()
        except Exception:  # noqa: BLE001 - the next child must still be stopped
            pass


def deadline_after_signal(grace_s: float, message: Callable[[int], str]) -> None:
    """From now on, the first SIGTERM or SIGINT starts a `grace_s` clock (whoever handles the signal:
    Prefect's flow engine installs handlers of its own while a flow runs). Main thread only: it uses
    signal.set_wakeup_fd, which reports every signal, whatever handler runs."""
    if threading.current_thread() is not threading.main_thread() or _armed.is_set():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        return
    _armed.set()

    def watch() -> None:
        while True:
            got = os.read(read_fd, 1)
            if got and got[0] in (signal.SIGTERM, signal.SIGINT):
                break
        signum = got[0]
        threading.Event().wait(grace_s)  # the normal unwinding usually ends the process before this
        _stop_children()
        sys.stderr.write(message(signum) + "\n")
        sys.stderr.flush()
        os._exit(128 + signum)

    threading.Thread(target=watch, name="prefdata-stop-deadline", daemon=True).start()
