"""A writer of the store who cannot read its key, against `publish` and `train`: the audit's attack.

The attacker watches the version's data folder with inotify and swaps other bytes into the data file
the moment a reader closes it (no timing luck needed), then puts the original back. Whatever publish
signs and whatever train trains on must be the bytes whose hashes the manifest names, so the swap
must change nothing: the bad draft is rejected, and training reads the version's own pairs.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from prefdata.data.store import Store

IN_CLOSE_NOWRITE = 0x10
DATA = "train-00000-of-00001.parquet"
# chosen 60 words, rejected 2: every pair fails length_ratio (ratio <= 2); the clean twin has equal sides
BAD = [{"prompt": f"question number {i}?", "chosen": " ".join(["long"] * 60) + f" {i}", "rejected": f"no {i}"}
       for i in range(200)]
CLEAN = [{"prompt": f"question number {i}?", "chosen": f"yes it is {i}", "rejected": f"no it is {i}"} for i in range(200)]


class SwapOnFirstRead:
    """Replaces `path`'s bytes with `other`'s the first time a reader closes it (inotify
    IN_CLOSE_NOWRITE on its folder), in a thread; `restore()` puts the original bytes back."""

    def __init__(self, path: Path, other: Path):
        if not sys.platform.startswith("linux"):
            pytest.skip("inotify is Linux's")
        self.path, self.other, self.original = path, other, path.read_bytes()
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0 and libc.inotify_add_watch(self.fd, str(path.parent).encode(), IN_CLOSE_NOWRITE) >= 0
        self.swapped = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            data, offset = os.read(self.fd, 65536), 0
            while offset < len(data):
                _wd, _mask, _cookie, size = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16: offset + 16 + size].rstrip(b"\0").decode()
                offset += 16 + size
                if name == self.path.name and not self.swapped.is_set():
                    self.path.write_bytes(self.other.read_bytes())  # in place: the same inode, other bytes
                    self.swapped.set()

    def restore(self) -> None:
        self.stop.set()
        self.thread.join()
        os.close(self.fd)
        self.path.write_bytes(self.original)


def _version(store: Path, name: str, rows: list[dict]) -> str:
    src = store.parent / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = _cli("import", str(src), "--name", name, store=store)
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


def _cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _data_file(store: Path, ref: str) -> Path:
    return Path(Store(str(store)).path(ref)) / "data" / DATA


@pytest.fixture()
def only_length_ratio(tmp_path) -> Path:
    """A checklist whose one live check is length_ratio: the clean twin passes it, the bad draft does not."""
    from prefdata.checks.checklist import _registry

    config = tmp_path / "length-ratio-only.yaml"
    config.write_text("checks:\n" + "".join(f"  {c}: {{waive: this test is about length_ratio}}\n"
                                            for c in _registry() if c != "length_ratio"))
    return config


def test_publish_signs_the_bytes_it_checked_whatever_is_swapped_in(store_root, only_length_ratio):
    bad, clean = _version(store_root, "bad", BAD), _version(store_root, "clean", CLEAN)
    assert _cli("publish", clean, "--config", str(only_length_ratio), store=store_root).returncode == 0

    attacker = SwapOnFirstRead(_data_file(store_root, bad), _data_file(store_root, clean))
    try:
        published = _cli("publish", bad, "--config", str(only_length_ratio), store=store_root)
    finally:
        attacker.restore()
    assert attacker.swapped.is_set(), "the attacker never saw the data file read"
    assert published.returncode == 1 and "length_ratio" in published.stderr, published.stdout + published.stderr
    v = Store(str(store_root)).get(bad)
    assert v.status == "rejected"
    [length] = [c for c in v.manifest["check_report"]["checks"] if c["id"] == "length_ratio"]
    assert length["status"] == "fail" and length["metric"] == 1.0  # all 200 of the bad draft's pairs
    assert _cli("verify", bad, store=store_root).returncode == 0  # the original bytes, under a true signature


def test_a_swap_before_the_read_is_refused_not_checked(store_root, only_length_ratio):
    bad, clean = _version(store_root, "bad", BAD), _version(store_root, "clean", CLEAN)
    path = _data_file(store_root, bad)
    shutil.copyfile(_data_file(store_root, clean), path)  # the file differs from its manifest from the start
    published = _cli("publish", bad, "--config", str(only_length_ratio), store=store_root)
    assert published.returncode == 1 and "fails verification (changed: data/" in published.stderr
    assert Store(str(store_root)).get(bad).status == "draft"


def test_training_reads_the_validated_bytes_whatever_is_swapped_in(store_root, only_length_ratio):
    good_rows = [{**r, "chosen": f"{r['chosen']} indeed"} for r in CLEAN]
    good, other = _version(store_root, "good", good_rows), _version(store_root, "other", CLEAN)
    assert _cli("publish", good, "--config", str(only_length_ratio), store=store_root).returncode == 0

    # the trainers' data path (trainers.data.load_validated), in its own process as `train` runs it
    script = ("import json, sys; from prefdata.trainers.data import load_validated; "
              "d = load_validated(sys.argv[1]); print(json.dumps(sorted(r['chosen'] for r in d.train + d.eval)))")
    attacker = SwapOnFirstRead(_data_file(store_root, good), _data_file(store_root, other))
    try:
        loaded = subprocess.run([sys.executable, "-c", script, good], capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PREFDATA_STORE": str(store_root)})
    finally:
        attacker.restore()
    assert attacker.swapped.is_set() and loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == sorted(r["chosen"] for r in good_rows)
