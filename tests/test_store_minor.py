"""Issue 44, the store's minor items: "latest" is never a tie, a store URL that cannot hold a store is
one line, odd folders in the store never break the listing, a full temporary folder says which one
and how to choose another, and a guessable key is refused. Commands run as real processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.data.store import KEY_ENV, KEY_FILE, Store, key_weakness

TIMEOUT = 120
ROWS = [{"prompt": f"question {i}", "chosen": f"good answer {i}", "rejected": f"bad answer {i}"} for i in range(20)]
REPORT = {"passed": True, "checks": []}


def cli(*args: str, store: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **({"PREFDATA_STORE": str(store)} if store else {}), **(env or {})}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=full,
                          timeout=TIMEOUT)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def imported(store: Path, name: str, rows: list[dict], env: dict | None = None) -> subprocess.CompletedProcess:
    src = store.parent / f"{name}-{len(rows)}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cli("import", str(src), "--name", name, store=store, env=env)


def ref_of(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


# -- (a) "latest" is the newest, never a tie broken by version id --------------------------------------


def test_latest_is_the_version_made_last_even_within_one_second(store_root):
    store = Store()
    made = []
    for k in range(4):  # made well within a second of each other: one-second dates tied them all
        from prefdata.data.importer import import_file, import_to_store

        src = store_root.parent / f"batch-{k}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in ROWS[k:]))
        made.append(import_to_store(import_file(src), "demo", store))
        assert store.get("demo").version == made[-1].version  # each new one is the latest at once
    stamps = [dt.datetime.fromisoformat(v.manifest["created_at"]) for v in made]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert all(v.manifest["created_at"].count(".") == 1 for v in made)  # microseconds are recorded
    assert [v.version for v in store.versions("demo")] == [v.version for v in made]
    shown = cli("show", "demo", store=store_root)
    assert shown.returncode == 0 and shown.stdout.split()[0] == made[-1].ref


@pytest.mark.parametrize(("older", "newer"), [
    ("2024-05-01T10:00:00+00:00", "2024-05-01T10:00:00.000001+00:00"),   # a whole second before its microseconds
    ("2024-05-01T10:00:00.999999+00:00", "2024-05-01T10:00:01+00:00"),   # an old date after a new one
    ("2024-05-01T12:00:00.500000+02:00", "2024-05-01T10:00:01+00:00"),   # another offset: compared as times
])
def test_old_and_new_dates_sort_as_times_not_by_version_id(store_root, older, newer):
    store = Store()
    from prefdata.data.importer import import_file, import_to_store

    versions = []
    for k in range(2):
        src = store_root.parent / f"v{k}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in ROWS[k:]))
        versions.append(import_to_store(import_file(src), "demo", store))
    # the newer date goes to the version whose id sorts first, so a tie broken by id would pick the other
    first, second = sorted(versions, key=lambda v: v.version)
    for v, when in ((first, newer), (second, older)):
        path = Path(store.path(v.ref)) / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["created_at"] = when
        path.write_text(json.dumps(manifest))
    assert store.get("demo").version == first.version
    assert [v.version for v in store.versions("demo")] == [second.version, first.version]


# -- (b) store URLs that cannot hold a store ---------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://example.invalid/store", "https://example.invalid/store", "memory://st",
                                 "zip://x.zip", "nosuch://bucket/store"])
def test_a_store_url_that_cannot_hold_a_store_is_one_line_exit_2(tmp_path, url):
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    for args in (["versions", "--store", url], ["import", str(src), "--name", "demo", "--store", url]):
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        line = one_line(done)
        assert line.startswith(f"prefdata: error: --store {url}: ") and "store URLs that work: a local folder" in line
        assert "s3://" in line
    assert "vanishes when the command ends" in one_line(cli("versions", "--store", "memory://st"))


def test_a_memory_store_is_for_one_process_that_asks_for_it(monkeypatch):
    with pytest.raises(UnusableInput, match="memory:// store vanishes"):
        Store("memory://prefdata-minor")
    monkeypatch.setenv(KEY_ENV, secrets.token_hex(32))  # no key file in shared (or memory) storage
    store = Store("memory://prefdata-minor", ephemeral=True)
    import polars as pl

    frame = pl.DataFrame(ROWS)
    v = store.create("mem", {"default": {"train": frame}}, counts={"read": 20, "kept": 20, "quarantined": 0},
                     lineage={"parent": None, "sources": []})
    assert store.verify(v.ref) == [] and store.get("mem").version == v.version


# -- (c) odd folders in the store ---------------------------------------------------------------------------


def test_odd_folders_are_no_versions_and_never_break_the_listing(store_root):
    good = ref_of(imported(store_root, "good", ROWS))
    other = ref_of(imported(store_root, "other", ROWS[:12]))
    folder = store_root / "good" / good.split("@")[1]
    shutil.copytree(folder, store_root / "good copy" / good.split("@")[1])  # a name no dataset has
    shutil.copytree(folder, store_root / "good" / "backup")               # an id no version has
    shutil.copytree(folder, store_root / "good" / "ABCDEF012345")         # not the store's id format either

    listed = cli("versions", store=store_root)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()[1:]}
    assert rows == {good: "draft", other: "draft"}, listed.stdout
    assert "good copy" not in listed.stdout and "backup" not in listed.stdout and "ABCDEF" not in listed.stdout
    for name in ("good", "other"):
        assert cli("versions", name, store=store_root).returncode == 0
    shown = cli("show", "good", store=store_root)
    assert shown.returncode == 0 and shown.stdout.split()[0] == good  # latest: the version, not the backup
    assert [v.ref for v in Store().versions()] == [good, other]
    assert cli("verify", "good", store=store_root).returncode == 0


# -- (d) no room for the pinned copy ------------------------------------------------------------------------

FULL_TMP = """
import errno, sys, tempfile
from prefdata.data import store

real_open = open

class Full:  # a file in the temporary folder, on a disk that has no room left
    def __init__(self, handle):
        self.handle = handle
    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    def close(self):
        self.handle.close()
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.close()

def opening(path, mode="r", *args, **kwargs):
    handle = real_open(path, mode, *args, **kwargs)
    if "w" in mode and str(path).startswith(tempfile.gettempdir()):
        return Full(handle)
    return handle

store.open = opening
from prefdata.commands.cli import main
main(sys.argv[1:])
"""


def test_a_full_temporary_folder_names_itself_and_tmpdir(store_root, tmp_path):
    ref = ref_of(imported(store_root, "demo", ROWS))
    validated = ref_of(imported(store_root, "ready", ROWS[:15]))
    Store().set_status(validated, "validated", report=REPORT)
    tmp = tmp_path / "small-tmp"
    tmp.mkdir()
    env = {**os.environ, "PREFDATA_STORE": str(store_root), "TMPDIR": str(tmp)}
    for args, what in ((["publish", ref], ref), (["train", "dpo", validated, "--base-model", "/nonexistent"], validated)):
        done = subprocess.run([sys.executable, "-c", FULL_TMP, *args], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT)
        assert done.returncode == 4, done.stderr
        line = one_line(done)
        assert f"no space left in the temporary folder {tmp} for the private copy of {what}" in line
        assert "point TMPDIR at a folder with room" in line
        assert list(tmp.iterdir()) == []  # the partial copy is removed
    assert Store().get(ref).status == "draft"


# -- (e) a guessable key -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["a" * 32, "c1" * 32, "0123456789" * 4, "abcdefgh" * 8, "ab" * 15 + "abc"])
def test_a_guessable_key_is_refused_in_one_line(store_root, key):
    done = imported(store_root, "demo", ROWS, env={KEY_ENV: key})
    assert done.returncode == 2
    line = one_line(done)
    assert f"{KEY_ENV} is too weak" in line and "secrets.token_hex(32)" in line and key not in line
    assert not (store_root / "demo").exists() or not list((store_root / "demo").glob("*/manifest.json"))


def test_a_guessable_key_file_is_refused_too(store_root):
    ref = ref_of(imported(store_root, "demo", ROWS))
    key_file = store_root / KEY_FILE
    key_file.write_text("b" * 64 + "\n")
    done = cli("verify", ref, store=store_root)
    assert done.returncode == 2 and "is too weak" in one_line(done) and str(key_file) in done.stderr


def test_random_keys_pass_the_floor():
    for _ in range(2000):
        assert key_weakness(secrets.token_hex(16)) is None
        assert key_weakness(secrets.token_hex(32)) is None
        assert key_weakness(secrets.token_urlsafe(32)) is None
    assert "too short" in key_weakness("x1" * 10)
