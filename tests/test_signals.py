"""Stopping a running command (issue 21, item 5): SIGTERM or SIGINT ends `prefdata collect` in
seconds with 143 or 130 and one line saying what was kept, and nothing it started outlives it, not
even after a kill -9: the Prefect server it starts runs in a session of its own (a signal to the
command's process group leaves it up for the flow's crash report) and dies with the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

SLOW_RULE = '''
import time


def slow(prompt, completion):
    """A verifier that takes its time: the judge stage is still running when the signal comes."""
    time.sleep(0.5)
    return float(len(completion) % 3)
'''


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory) -> Path:
    """One Prefect home for the module's runs: its database is created (and migrated) once."""
    return tmp_path_factory.mktemp("prefect")


def collect_until_judging(tmp_path: Path, prefect_home: Path) -> tuple[subprocess.Popen, list, Path]:
    """`prefdata collect` on the demo world with a slow verifier, in a process group of its own (as a
    shell runs a job), up to its judge stage; with the processes it started by then."""
    (tmp_path / "slow_rules.py").write_text(SLOW_RULE)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    (tmp_path / "registry.toml").write_text('[verifiers]\nslow = "slow_rules:slow"\n')  # prefdata/base/registry.py
    env.update(PYTHONPATH=str(tmp_path), PREFECT_HOME=str(prefect_home), PREFDATA_REGISTRY=str(tmp_path / "registry.toml"))
    err = tmp_path / "stderr.txt"
    process = subprocess.Popen(
        [sys.executable, "-m", "prefdata", "collect", "--prompts", "world", "--n", "4", "--policy", "world",
         "--judge", "rule:slow", "--name", "stopped", "--store", str(tmp_path / "store"),
         "--cache-dir", str(tmp_path / "cache"), "--queue-dir", str(tmp_path / "queues")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err.open("w"), start_new_session=True)
    deadline = time.monotonic() + 240
    while "progress: judge" not in err.read_text():
        assert process.poll() is None, err.read_text()[-2000:]
        assert time.monotonic() < deadline, "collect never reached its judge stage"
        time.sleep(0.2)
    children = psutil.Process(process.pid).children(recursive=True)
    assert any("prefect.server.api.server:create_app" in " ".join(c.cmdline()) for c in children)
    return process, children, err


def survivors(children: list, wait_s: float = 10.0) -> list[str]:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return [" ".join(c.cmdline()[:6]) for c in alive]


@pytest.mark.parametrize("signum, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_a_signal_to_the_group_stops_collect_with_one_line_and_no_survivor(tmp_path, prefect_home, signum, code,
                                                                          name):
    process, children, err = collect_until_judging(tmp_path, prefect_home)
    os.killpg(process.pid, signum)  # what `timeout`, a scheduler or Ctrl-C in a shell sends
    try:
        process.wait(timeout=30)  # a bound so a hang fails the test; the command's own deadline is 6 s
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    last = err.read_text().strip().splitlines()[-1]
    assert process.returncode == code, err.read_text()[-2000:]
    assert "Traceback" not in err.read_text() and "Error logging to API" not in err.read_text()
    assert last == (f"prefdata: stopped by {name} (the sampled and judged chunks that finished are in the cache "
                    "(--cache-dir): the same command resumes from them; the store keeps no half-written version)")
    assert survivors(children) == []
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").rglob("manifest.json"))


def test_a_killed_collect_leaves_no_server_behind(tmp_path, prefect_home):
    """kill -9 runs no handler at all: the kernel stops the server (PR_SET_PDEATHSIG)."""
    process, children, _ = collect_until_judging(tmp_path, prefect_home)
    process.kill()
    process.wait(timeout=30)
    assert survivors(children) == []
