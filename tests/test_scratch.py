"""Temporary folders of a big `check FILE` (its shards) go with the process: on SIGTERM at once, and
after SIGKILL with the next run that makes one (issue 23: ~20 MB per 200k rows were left in /tmp)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

N = 200_000


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "pairs.parquet"
    i = pl.int_range(N, eager=True).cast(pl.String)
    pl.DataFrame({"prompt": "What is item " + i + "?", "chosen": "It is item " + i + ", the one asked about.",
                  "rejected": "No idea about " + i + "."}).write_parquet(path)
    return path


def _start_check(big_file: Path, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """`prefdata check FILE` in batches, with TMPDIR=tmp; returns once its shards folder exists."""
    proc = subprocess.Popen([sys.executable, "-m", "prefdata", "check", str(big_file), "--batch-rows", "20000"],
                            env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(tmp.glob(f"prefdata-shards-{proc.pid}-*"))
        if found and any(found[0].iterdir()):
            return proc, found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the check never wrote a shard")


def test_sigterm_removes_the_shards_and_exits_143(big_file, tmp_path):
    proc, shards = _start_check(big_file, tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # a bound so a hang fails (a loaded machine needed more than 10 s)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("prefdata: stopped by SIGTERM")
    assert not shards.exists() and not list(tmp_path.glob("prefdata-*"))


def test_a_killed_runs_shards_are_removed_by_the_next_run(big_file, tmp_path, monkeypatch):
    import tempfile

    from prefdata.base.scratch import scratch_dir

    proc, shards = _start_check(big_file, tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    assert shards.exists()  # SIGKILL: nothing could remove them
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    mine = scratch_dir("test")  # any run that makes a scratch folder sweeps the dead ones first
    assert not shards.exists() and mine.exists()
