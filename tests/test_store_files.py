"""Issue 44 item 2: the store reads only the regular files it expects, and side inputs are read with a
bound. A symlink to /dev/zero, a FIFO or a grown file inside a version is named and refused at once
(never hashed forever, copied until the disk is full, or waited on), a damaged version leaves its
siblings working, and a --card or --reference-prompts that is no regular file is one line, exit 2.

Every command runs as a real process with a timeout: a regression fails here instead of hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.base.files import read_side_file
from prefdata.data.store import MAX_MANIFEST_BYTES, Store

ROWS = [{"prompt": f"question {i}", "chosen": f"good answer {i}", "rejected": f"bad {i}"} for i in range(20)]
SHARD = "data/train-00000-of-00001.parquet"
TIMEOUT = 60  # each command here takes a second or two; one that hangs or reads forever fails instead


def cli(*args: str, store: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PREFDATA_STORE": str(store), **(env or {})}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=full,
                          timeout=TIMEOUT)


def imported(store: Path, rows: list[dict] = ROWS) -> str:
    src = store.parent / f"pairs-{len(rows)}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = cli("import", str(src), "--name", "demo", store=store)
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def replace_with(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "oversized":  # sparse: past the bound without writing it
        with open(path, "wb") as handle:
            handle.truncate(MAX_MANIFEST_BYTES + 1)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "fifo"])
def test_a_shard_that_is_no_regular_file_is_named_by_verify_and_refused_by_publish(store_root, tmp_path, kind):
    ref = imported(store_root)
    replace_with(Path(Store().path(ref)) / SHARD, kind)

    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1
    assert f"damaged: {SHARD} is {'a symlink' if kind.startswith('symlink') else 'a FIFO'}" in verified.stdout

    tmp = tmp_path / "tmp"  # publish's private copy goes here: nothing may be copied from /dev/zero
    tmp.mkdir()
    published = cli("publish", ref, store=store_root, env={"TMPDIR": str(tmp)})
    assert published.returncode == 1 and SHARD in one_line(published) and "fails verification" in published.stderr
    assert list(tmp.iterdir()) == []
    checked = cli("check", ref, store=store_root)  # reads the version's tables without a copy
    assert checked.returncode == 1 and SHARD in one_line(checked)


def test_a_symlinked_folder_in_a_version_is_not_walked(store_root, tmp_path):
    ref = imported(store_root)
    folder = Path(Store().path(ref))
    (folder / "data").rename(tmp_path / "elsewhere")
    (folder / "data").symlink_to(tmp_path / "elsewhere")  # the same bytes, outside the store
    problems = Store().verify(ref)
    assert f"missing: {SHARD}" in problems and "extra: data (a symlink)" in problems, problems


def test_a_grown_shard_is_told_by_its_size_without_reading_it(store_root):
    ref = imported(store_root)
    shard = Path(Store().path(ref)) / SHARD
    recorded = shard.stat().st_size
    with open(shard, "ab") as handle:
        handle.write(b"appended")
    verified = cli("verify", ref, store=store_root)
    assert verified.returncode == 1
    assert f"changed: {SHARD} ({recorded + 8} bytes, manifest says {recorded})" in verified.stdout
    with pytest.raises(GateFailed, match="its manifest says"):
        Store().load(ref)


@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero", "oversized"])
def test_a_sibling_manifest_that_is_no_regular_file_leaves_the_other_versions_working(store_root, kind):
    good = imported(store_root)
    bad = imported(store_root, ROWS[:15])
    replace_with(Path(Store().path(bad)) / "manifest.json", kind)

    listed = cli("versions", store=store_root)
    assert listed.returncode == 0, listed.stderr
    assert f"{bad}  damaged!" in listed.stdout and f"{good}  draft" in listed.stdout
    assert cli("show", good, store=store_root).returncode == 0
    assert cli("show", "demo", store=store_root).returncode == 0  # latest: the readable one
    assert cli("verify", good, store=store_root).returncode == 0
    reason = {"fifo": "it is a FIFO (named pipe)", "symlink to /dev/zero": "it is a symlink",
              "oversized": "it is larger than 16 MiB"}[kind]
    verified = cli("verify", bad, store=store_root)
    assert verified.returncode == 1 and f"manifest.json is damaged: {reason}" in verified.stdout
    shown = cli("show", bad, store=store_root)
    assert shown.returncode == 1 and reason in one_line(shown)


# -- side inputs -------------------------------------------------------------------------------------

@pytest.fixture
def pairs_file(tmp_path) -> Path:
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return src


def test_check_refuses_a_card_that_is_dev_zero_in_one_line(store_root, pairs_file):
    done = cli("check", str(pairs_file), "--card", "/dev/zero", store=store_root)
    assert done.returncode == 2
    assert one_line(done) == ("prefdata: error: --card /dev/zero is a character device, not a regular file: pass the "
                              "path of a regular file (save a stream to a file first)")
    imported_ = cli("import", str(pairs_file), "--name", "demo", "--card", "/dev/zero", store=store_root)
    assert imported_.returncode == 2 and "--card /dev/zero is a character device" in one_line(imported_)


def test_check_refuses_reference_prompts_that_are_a_fifo_in_one_line(store_root, pairs_file, tmp_path):
    fifo = tmp_path / "prompts.txt"
    os.mkfifo(fifo)  # nobody ever writes to it: an open would wait forever
    done = cli("check", str(pairs_file), "--reference-prompts", str(fifo), store=store_root)
    assert done.returncode == 2 and f"--reference-prompts {fifo} is a FIFO (named pipe)" in one_line(done)


def test_a_side_file_is_a_regular_file_or_a_link_to_one_and_bounded(tmp_path):
    card = tmp_path / "card.md"
    card.write_text("# a card\n")
    link = tmp_path / "link.md"
    link.symlink_to(card)  # a user's symlink to a regular file is fine
    assert read_side_file(link, "--card") == "# a card\n"
    with pytest.raises(UnusableInput, match="--card .* is a folder, not a regular file"):
        read_side_file(tmp_path, "--card")
    with pytest.raises(UnusableInput, match="no such file"):
        read_side_file(tmp_path / "absent.md", "--card")
    card.write_bytes(b"x" * (1 << 20))
    with pytest.raises(UnusableInput, match="is larger than 0.5 MiB"):
        read_side_file(card, "--card", limit=1 << 19)
    card.write_bytes(b"\xff\xfe")
    with pytest.raises(UnusableInput, match="not UTF-8"):
        read_side_file(card, "--card")
