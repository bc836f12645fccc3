"""A real `transformers serve` on 127.0.0.1, started and stopped by its own pid (the demo, tests, benchmarks).

    with TransformersServe(log_path="serve.log") as server:
        server.base_url  # "http://127.0.0.1:PORT/v1"; models load on demand: request model=<local path>

The command (transformers 5.x; check `transformers serve --help` when upgrading):

    HF_HUB_OFFLINE=1 <venv>/bin/transformers serve --host 127.0.0.1 --port PORT --device cpu

Offline, so a model name that is not a local path fails instead of downloading. Readiness is
GET /health answering 200. Stopping sends SIGTERM to that one process (uvicorn shuts down cleanly),
and SIGKILL only if it has not exited after 10 seconds.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prefdata.base.errors import PrefdataError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(port: int, extra_flags: list[str] | tuple = ()) -> list[str]:
    cli = Path(sys.executable).parent / "transformers"
    return [str(cli), "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", *extra_flags]


class TransformersServe:
    def __init__(self, log_path: str | Path, port: int | None = None, ready_timeout: float = 120.0,
                 extra_env: dict[str, str] | None = None, extra_flags: list[str] | tuple = ()):
        self.port, self.extra_flags = port or free_port(), list(extra_flags)
        self.log_path, self.ready_timeout = Path(log_path), ready_timeout
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", **(extra_env or {})}
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "TransformersServe":
        self._log = self.log_path.open("wb")
        if not Path(serve_command(self.port)[0]).is_file():
            raise PrefdataError("the `transformers` command is missing: pip install 'transformers[serving]'")
        from prefdata.base.processes import own_session, register

        # its own session: a signal to the command's process group leaves the judge up while the
        # command stops; it ends with the command (stop(), or the kernel if the command is killed)
        self.process = subprocess.Popen(serve_command(self.port, self.extra_flags), stdout=self._log,
                                        stderr=subprocess.STDOUT, env=self.env, **own_session())
        register(self.stop)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrefdataError(f"transformers serve exited with {self.process.returncode} (log: {self.log_path}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise PrefdataError(f"transformers serve did not answer /health in {self.ready_timeout:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        from prefdata.base.processes import unregister

        unregister(self.stop)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # this pid only
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if getattr(self, "_log", None):
            self._log.close()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "TransformersServe":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
