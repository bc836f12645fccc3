"""Growing versions (issue 46 item 1): `import --onto NAME@VERSION` and the collect flow's `onto` make a
draft of the parent's rows and the new ones, the parent's files shared, not copied.

Real HH-RLHF rows, cut into a first night and a second night that repeats the first night's last rows
(the duplicates a nightly collection meets); the command line as a user runs it.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prefdata.data.store import Store

REPO = Path(__file__).resolve().parents[1]


def prefdata(*args: str, store: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


def version_of(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))


@pytest.fixture(scope="module")
def nights(shared_data, tmp_path_factory) -> dict[str, Path]:
    """hh rows 0-599 (night 1), 590-799 (night 2: its first ten rows are night 1's last ten), and
    both in one file, as JSON Lines."""
    lines = gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt").read().splitlines()
    folder = tmp_path_factory.mktemp("nights")
    files = {"one": lines[:600], "two": lines[590:800], "both": lines[:600] + lines[590:800]}
    for name, chosen in files.items():
        (folder / f"{name}.jsonl").write_text("\n".join(chosen) + "\n")
    return {name: folder / f"{name}.jsonl" for name in files}


def test_a_child_holds_the_parents_rows_then_the_new_ones_with_the_parents_files_shared(nights, tmp_path):
    store = tmp_path / "store"
    parent = version_of(prefdata("import", str(nights["one"]), "--name", "hh", store=store))
    grown = prefdata("import", str(nights["two"]), "--name", "hh", "--onto", parent, store=store)
    child = version_of(grown)
    assert f"onto {parent}: 810 pairs in all" in " ".join(grown.stdout.split())
    st = Store(str(store))
    assert st.verify(parent) == [] and st.verify(child) == []
    manifest = st.get(child).manifest
    assert manifest["lineage"]["parent"] == parent
    assert manifest["counts"]["rows"]["default"] == {"train": 810} and manifest["counts"]["read"] == 210

    # the same rows, in the same order, with the same ids as one import of both nights
    together = st.load(version_of(prefdata("import", str(nights["both"]), "--name", "together", store=store)))
    rows = st.load(child)
    assert rows.equals(together), "the child is what one import of every row would be"
    assert rows["id"].n_unique() == 810 and rows["id"].str.ends_with("-2").sum() == 10  # night 1's last ten again

    # the parent's shard is the child's first, by content: one file on disk, two names
    parent_file = next((Path(st.path(parent)) / "data").iterdir())
    child_files = sorted((Path(st.path(child)) / "data").iterdir())
    assert [f.name for f in child_files] == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]
    assert os.path.samefile(parent_file, child_files[0]) and parent_file.stat().st_nlink == 2
    new_bytes = child_files[1].stat().st_size
    assert new_bytes < parent_file.stat().st_size / 2  # the child's own disk is its 210 new rows'

    # the checklist sees one dataset: night 2's repeats of night 1 are exact duplicates of the parent's rows
    report = tmp_path / "r.json"
    prefdata("check", child, "--config", "small-data", "--json", str(report), store=store)
    [exact] = [c for c in json.loads(report.read_text())["checks"] if c["id"] == "exact_duplicates"]
    assert sorted(exact["offending"]) == sorted(rows.filter(rows["id"].str.ends_with("-2"))["id"].to_list())

    # a changed byte in the shared file is a changed file of both versions
    with open(parent_file, "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    assert st.verify(parent) and st.verify(child)


def test_a_big_night_streams_onto_its_parent_with_the_same_rows(nights, tmp_path):
    store = tmp_path / "store"
    parent = version_of(prefdata("import", str(nights["one"]), "--name", "hh", store=store))
    in_memory = version_of(prefdata("import", str(nights["two"]), "--name", "hh", "--onto", parent, store=store))
    streamed = version_of(prefdata("import", str(nights["two"]), "--name", "hh2", "--onto", parent,
                                   "--batch-rows", "64", store=store))
    st = Store(str(store))
    assert st.verify(streamed) == []
    assert st.load(streamed).equals(st.load(in_memory))
    assert sum(st.get(streamed).manifest["counts"]["rows"]["default"].values()) == 810


def test_new_rows_take_the_parents_columns_and_a_column_it_lacks_is_one_line(nights, tmp_path):
    store = tmp_path / "store"
    parent = version_of(prefdata("import", str(nights["one"]), "--name", "hh", store=store))
    plain = tmp_path / "plain.jsonl"  # trl rows: no prompt_messages, which HH's rows have
    plain.write_text("".join(json.dumps({"prompt": f"What is {k} + {k}?", "chosen": str(2 * k), "rejected": str(2 * k + 1)})
                             + "\n" for k in range(5)))
    child = version_of(prefdata("import", str(plain), "--name", "hh", "--onto", parent, store=store))
    rows = Store(str(store)).load(child)
    assert rows.height == 605 and rows["prompt_messages"].tail(5).null_count() == 5
    assert rows["prompt_messages"].head(600).null_count() == 0

    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"prompt": "Hi?", "chosen": "Hello.", "rejected": "No.", "category": "style"}) + "\n")
    refused = prefdata("import", str(extra), "--name", "hh", "--onto", parent, store=store)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "column(s) category" in refused.stderr and "lacks" in refused.stderr
    assert len(Store(str(store)).versions("hh")) == 2  # nothing written


def test_a_source_id_the_parent_uses_for_other_content_is_refused(tmp_path):
    store = tmp_path / "store"
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps({"id": f"r{k}", "prompt": f"Question {k}?", "chosen": "Yes.", "rejected": "No."})
                             + "\n" for k in range(4)))
    parent = version_of(prefdata("import", str(first), "--name", "ids", store=store))
    same = tmp_path / "same.jsonl"  # r1 again, the same pair: kept (exact_duplicates' to judge), r9 new
    same.write_text(json.dumps({"id": "r1", "prompt": "Question 1?", "chosen": "Yes.", "rejected": "No."}) + "\n"
                    + json.dumps({"id": "r9", "prompt": "Question 9?", "chosen": "Yes.", "rejected": "No."}) + "\n")
    child = version_of(prefdata("import", str(same), "--name", "ids", "--onto", parent, store=store))
    assert Store(str(store)).load(child)["id"].to_list() == ["r0", "r1", "r2", "r3", "r1", "r9"]
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"id": "r2", "prompt": "Something else?", "chosen": "Yes.", "rejected": "No."}) + "\n")
    refused = prefdata("import", str(other), "--name", "ids", "--onto", parent, store=store)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "reuse an id the parent has for other content (first: id 'r2')" in refused.stderr


def test_a_parent_that_fails_verify_is_never_grown(nights, tmp_path):
    store = tmp_path / "store"
    parent = version_of(prefdata("import", str(nights["one"]), "--name", "hh", store=store))
    card = Path(Store(str(store)).path(parent)) / "README.md"
    card.write_text(card.read_text() + "\nedited\n")
    refused = prefdata("import", str(nights["two"]), "--name", "hh", "--onto", parent, store=store)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"--onto {parent}: its files fail verify" in refused.stderr
    unknown = prefdata("import", str(nights["two"]), "--name", "hh", "--onto", "hh@ffffffffffff", store=store)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    alone = prefdata("import", str(nights["two"]), "--out", str(tmp_path / "o.jsonl"), "--onto", parent, store=store)
    assert alone.returncode == 2 and "--onto NAME@VERSION grows a stored version: give --name" in alone.stderr


def test_previous_is_the_newest_validated_version(nights, tmp_path):
    from prefdata.data.onto import resolve

    store = tmp_path / "store"
    first = version_of(prefdata("import", str(nights["one"]), "--name", "hh", store=store))
    st = Store(str(store))
    assert resolve(st, "hh", "previous") is None  # only a draft: the first night stands alone
    alone = version_of(prefdata("import", str(nights["two"]), "--name", "hh", "--onto", "previous", store=store))
    assert st.get(alone).manifest["lineage"]["parent"] is None
    st.set_status(first, "validated", report={"passed": True, "checks": []})
    assert resolve(st, "hh", "previous") == first
    grown = version_of(prefdata("import", str(nights["two"]), "--name", "hh", "--onto", "previous", store=store))
    assert st.get(grown).manifest["lineage"]["parent"] == first
