"""The four jobs as production runs them (issue 43, item 1), with README's commands as written: a real
Prefect server on 127.0.0.1, the process work pool, `prefect deploy --all` of prefect.yaml, a real
`prefect worker` subprocess, and the chain a team relies on: the nightly collect, then the publish
gate, then the training the validated version starts. Then the same chain under `prefdata serve`.
Everything started is stopped by its own process group, and checked gone.

Neither chain sets PREFDATA_STORE or names a store: the deployments' runs, `prefdata run` and
`prefdata versions` meet in the project folder's `.prefdata/store`, as a user's would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Two optimizer steps: the chain is the point here, not the model (README's run trains the config's).
TRAIN = "train={deployment: train/train, method: dpo, base_model: world, config: {max_steps: 2}, wait: true}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(folder: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "PREFDATA_STORE", "PREFDATA_REGISTRY") and not k.startswith("PYTEST")}
    # PWD as a shell sets it: prefect.yaml's pull step runs the flows in `{{ $PWD }}` of `prefect deploy`
    env.update(PWD=str(folder), PREFECT_HOME=str(folder / ".prefect-home"), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
               PREFECT_RUNNER_POLL_FREQUENCY="2", PREFECT_WORKER_QUERY_SECONDS="2")
    return env


class Started:
    """Long-running commands in process groups of their own, each stopped (SIGINT, then SIGKILL) and
    checked gone, children included, when the test ends."""

    def __init__(self, folder: Path, env: dict):
        self.folder, self.env, self.groups, self.outputs = folder, env, [], {}

    def start(self, name: str, *argv: str) -> list[str]:
        process = subprocess.Popen(list(argv), cwd=self.folder, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        output: list[str] = []
        threading.Thread(target=lambda: output.extend(process.stdout), daemon=True).start()
        self.groups.append(process)
        self.outputs[name] = output
        return output

    def wait_for(self, name: str, text: str, timeout: float = 240) -> None:
        process = self.groups[list(self.outputs).index(name)]
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.outputs[name]):
            assert process.poll() is None and time.monotonic() < deadline, "".join(self.outputs[name])
            time.sleep(0.5)

    def stop(self) -> None:
        for process in reversed(self.groups):
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:
                continue
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            deadline = time.monotonic() + 30
            while _group_alive(process.pid):  # its children too (a worker's flow runs, a server's services)
                if time.monotonic() > deadline:
                    os.killpg(process.pid, signal.SIGKILL)
                    pytest.fail(f"process group {process.pid} outlived its leader by 30 s")
                time.sleep(0.2)

    def log(self) -> str:
        return "\n".join(f"--- {name}\n" + "".join(out[-60:]) for name, out in self.outputs.items())


def _group_alive(pgid: int) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def healthy(api: str, started: Started, timeout: float = 240) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{api}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, started.log()
        time.sleep(1)


def command(folder: Path, env: dict, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def versions(folder: Path, env: dict) -> dict[str, str]:
    out = command(folder, env, str(BIN / "prefdata"), "versions", "world-arithmetic")
    assert out.returncode == 0, out.stdout + out.stderr
    return {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()[1:] if "@" in line}


def run_chain(folder: Path, env: dict, started: Started) -> None:
    """collect/nightly, then publish/nightly, which starts train/train on the version it validates."""
    prefdata = str(BIN / "prefdata")
    collected = command(folder, env, prefdata, "run", "collect/nightly", "--wait", "--timeout", "500")
    assert collected.returncode == 0 and "Completed" in collected.stdout, collected.stdout + collected.stderr + started.log()
    assert "Running" in collected.stdout  # each state as it came, not only the last
    (draft,) = [ref for ref, status in versions(folder, env).items() if status == "draft"]

    published = command(folder, env, prefdata, "run", "publish/nightly", "--param", TRAIN, "--wait", "--timeout", "500")
    assert published.returncode == 0, published.stdout + published.stderr + started.log()
    assert versions(folder, env) == {draft: "validated"}
    cards = list((folder / ".prefdata" / "runs").glob("dpo-*/prefdata_train.json"))
    assert len(cards) == 1, started.log()
    card = json.loads(cards[0].read_text())
    assert card["dataset"] == draft and card["method"] == "dpo" and card["metrics"]["steps"] == 2
    assert draft in (cards[0].parent / "README.md").read_text()  # the model card names its version


def test_the_chain_on_a_prefect_server_a_work_pool_and_a_worker(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    env = base_env(folder)
    started = Started(folder, env)
    port = free_port()
    try:
        started.start("server", str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port))
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
        healthy(env["PREFECT_API_URL"], started)  # its banner comes before it listens
        pool = command(folder, env, str(BIN / "prefect"), "work-pool", "create", "prefdata-local", "--type", "process")
        assert pool.returncode == 0, pool.stdout + pool.stderr
        deployed = command(folder, env, str(BIN / "prefect"), "--no-prompt", "deploy", "--all",
                           "--prefect-file", str(REPO / "prefect.yaml"))
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        for name in ("collect/nightly", "publish/nightly", "validate/on-demand", "train/train"):
            assert name in deployed.stdout
        started.start("worker", str(BIN / "prefect"), "worker", "start", "--pool", "prefdata-local")
        started.wait_for("worker", "started")
        run_chain(folder, env, started)
    finally:
        started.stop()


def test_the_same_chain_under_prefdata_serve(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    env = base_env(folder)
    env.pop("PREFECT_HOME")  # prefdata's own default, .prefdata/prefect in the folder, as README runs it
    started = Started(folder, env)
    try:
        started.start("serve", str(BIN / "prefdata"), "serve", "--file", str(REPO / "prefect.yaml"))
        started.wait_for("serve", "being served")
        run_chain(folder, env, started)
    finally:
        started.stop()
