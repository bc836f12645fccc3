"""A temporary Prefect API server for one command (`collect`, `demo`), where no PREFECT_API_URL is set.

Prefect's own temporary server (its "ephemeral" mode) runs as a child in the command's process
group: a SIGTERM to the group (`timeout`, a job scheduler, a shell's Ctrl-C) killed it together with
the command, whose flow engine then spent many minutes retrying its crash report against a dead
server. This one is the same app started the same way (uvicorn, prefect.server.api.server:
create_app, the database in PREFECT_HOME), but in a session of its own that group signals do not
reach, and tied to the command: stopped by pid when the command ends, and by the kernel
(PR_SET_PDEATHSIG) if the command is killed outright.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from prefdata.base.errors import PrefdataError
from prefdata.collect.local_serve import free_port
from prefdata.base.processes import own_session, register, unregister

STARTUP_TIMEOUT_S = 120.0  # a loaded 2-core machine has needed more than Prefect's default 20 s
_STARTED_HERE: set[str] = set()  # the API URLs of the temporary servers this process runs now


def on_temporary_server() -> bool:
    """Whether the API in use is a temporary server this process started (temporary_api)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() in _STARTED_HERE


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _drain_prefect_workers() -> None:
    """Send the logs and events still queued while the server is up (as prefect_test_harness does):
    stopped first, the server would leave "Error logging to API" behind the command's last line."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        try:
            result = APILogWorker.instance().drain()
            if inspect.isawaitable(result):
                await result
        except RuntimeError:  # never started
            pass
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    try:
        run_coro_as_sync(drain())
    except Exception:  # noqa: BLE001 - a log line lost on the way out must not mask the command's outcome
        pass


@contextmanager
def temporary_api() -> Iterator[str]:
    """PREFECT_API_URL while the block runs: the one already set (environment, profile or a test
    harness), or a temporary server's."""
    import prefect
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if PREFECT_API_URL.value():
        yield PREFECT_API_URL.value()
        return

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
           **get_current_settings().to_environment_variables(exclude_unset=True)}
    log = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would stall the server
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
         "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port), "--log-level", "error",
         "--lifespan", "on"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, **own_session())

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    register(stop)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _healthy(url):
            if process.poll() is not None:
                log.seek(0)
                error = log.read().decode(errors="replace").strip().splitlines()[-1:]
                raise PrefdataError(f"the temporary Prefect server exited with {process.returncode}"
                                    f"{': ' + error[0] if error else ''}")
            if time.monotonic() > deadline:
                raise PrefdataError(f"the temporary Prefect server did not answer in {STARTUP_TIMEOUT_S:.0f} s; "
                                    "start one (`prefect server start`) and set PREFECT_API_URL")
            time.sleep(0.2)
        os.environ["PREFECT_API_URL"] = url  # for worker processes (Dask) too
        _STARTED_HERE.add(url)
        try:
            with temporary_settings({PREFECT_API_URL: url}):
                try:
                    yield url
                finally:
                    _drain_prefect_workers()
        finally:
            os.environ.pop("PREFECT_API_URL", None)
            _STARTED_HERE.discard(url)
    finally:
        stop()
        unregister(stop)
        log.close()
