"""What a command's terminal shows when a flow fails: Prefect prints a failing flow's traceback
before the command can print its one line; for the failures the command reports itself (a
PrefdataError: bad input, a gate saying no) that traceback is noise that reads as a crash, so the
console leaves it out. Any other exception keeps it. A real flow run on Prefect's ephemeral server,
in a process of its own (logging is set up once per process)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import os, sys
os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING"
from prefect import flow
from prefdata.base.errors import GateFailed
from prefdata.commands.console import quiet_reported_failures

if sys.argv[1] == "quiet":
    quiet_reported_failures()

@flow(name="refuses")
def refuses():
    raise GateFailed("demo@v1 failed its checklist")

@flow(name="crashes")
def crashes():
    raise RuntimeError("a bug")

for run in (refuses, crashes):
    try:
        run()
    except Exception as exc:
        print("raised", type(exc).__name__, file=sys.stderr)
"""


def run(mode: str, tmp_path) -> str:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / mode), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr


def test_a_reported_failure_leaves_out_prefects_traceback_and_a_crash_keeps_it(tmp_path):
    loud, quiet = run("loud", tmp_path), run("quiet", tmp_path)
    # without the filter, Prefect prints both tracebacks (what the filter is for)
    assert "GateFailed: demo@v1 failed its checklist" in loud and "RuntimeError: a bug" in loud
    assert "GateFailed" not in quiet.replace("raised GateFailed", "")
    assert "Traceback (most recent call last)" in quiet and "RuntimeError: a bug" in quiet
    assert "raised GateFailed" in quiet and "raised RuntimeError" in quiet  # the flows still raise
