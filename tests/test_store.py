"""The versioned store: content addressing, tamper detection, HF layout, concurrency, name safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.data.importer import import_file, import_to_store
from prefdata.data.store import Store


def make_version(store: Store, name: str, rows: list[dict]):
    src = Path(store.root).parent / f"{name}-{len(rows)}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = import_file(src)
    return import_to_store(result, name, store)


ROWS = [{"prompt": f"question {i}", "chosen": f"good answer {i}", "rejected": f"bad {i}"} for i in range(20)]


def test_same_content_same_version_and_verify(store_root):
    store = Store()
    v1 = make_version(store, "demo", ROWS)
    v2 = make_version(store, "demo", ROWS)
    assert v1.version == v2.version and len(store.versions("demo")) == 1
    assert store.verify(v1.ref) == []
    assert store.get("demo").version == v1.version == store.get(f"demo@{v1.version[:6]}").version
    v3 = make_version(store, "demo", ROWS[:10])
    assert v3.version != v1.version and store.get("demo@latest").version == v3.version


def test_hf_load_dataset_reads_the_version_folder(store_root, shared_data):
    import datasets

    store = Store()
    result = import_file(shared_data / "pandalm" / "testset-v1.json")
    v = import_to_store(result, "pandalm", store)
    folder = store.path(v.ref)
    pairs = datasets.load_dataset(folder, split="train")
    assert pairs.num_rows == 888 and {"prompt", "chosen", "rejected"} <= set(pairs.column_names)
    assert datasets.load_dataset(folder, "votes", split="train").num_rows == 2979
    assert datasets.load_dataset(folder, "comparisons", split="train").num_rows == 993
    assert datasets.load_dataset(folder, "sft", split="train").num_rows == 888
    assert store.load(v.ref, "votes").height == 2979


def test_tampering_is_detected(store_root):
    store = Store()
    v = make_version(store, "demo", ROWS)
    folder = Path(store.path(v.ref))
    parquet = folder / "data" / "train-00000-of-00001.parquet"
    data = bytearray(parquet.read_bytes())
    data[len(data) // 2] ^= 0xFF
    parquet.write_bytes(bytes(data))
    assert any(p.startswith("changed: data/train") for p in store.verify(v.ref))

    # A forger who also fixes the manifest's hash is caught: the version id is a hash of the hashes.
    manifest = json.loads((folder / "manifest.json").read_text())
    import hashlib

    manifest["files"]["data/train-00000-of-00001.parquet"]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert any(p.startswith("manifest:") for p in store.verify(v.ref))

    (folder / "sft" / "train-00000-of-00001.parquet").unlink()
    (folder / "extra.txt").write_text("sneaked in")
    problems = store.verify(v.ref)
    assert "missing: sft/train-00000-of-00001.parquet" in problems and "extra: extra.txt" in problems


def test_status_moves_once_and_validated_is_final(store_root):
    store = Store()
    v = make_version(store, "demo", ROWS)
    assert v.status == "draft"
    store.set_status(v.ref, "rejected", report={"passed": False, "checks": []})
    v = store.set_status(v.ref, "validated", report={"passed": True, "checks": []})
    assert v.status == "validated" and [h["status"] for h in v.manifest["status_history"]] == ["draft", "rejected", "validated"]
    with pytest.raises(GateFailed):
        store.set_status(v.ref, "rejected")
    assert store.verify(v.ref) == []  # status changes never touch the content


@pytest.mark.parametrize("bad", ["../escape", "/abs", "a/b", "..", "", "x@y/../z"])
def test_names_that_escape_the_root_are_refused(store_root, bad):
    with pytest.raises(UnusableInput):
        Store().get(bad)


def test_fsspec_url_store(shared_data, monkeypatch):
    import secrets

    store = Store("memory://prefdata-test-store", ephemeral=True)  # memory:// only where vanishing is meant
    result = import_file(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")
    # no key file in shared storage (whoever reads the bucket would read it): the key comes from the
    # environment, and a version is signed from its creation, so importing needs it already
    monkeypatch.delenv("PREFDATA_STORE_KEY", raising=False)
    with pytest.raises(UnusableInput, match="PREFDATA_STORE_KEY"):
        import_to_store(result, "hh", store)
    monkeypatch.setenv("PREFDATA_STORE_KEY", secrets.token_hex(32))
    v = import_to_store(result, "hh", store)
    assert store.verify(v.ref) == []
    assert store.load(v.ref).height == 2312
    assert store.set_status(v.ref, "validated").status == "validated"
    assert store.verify(v.ref) == [] and not store.fs.exists(f"{store.root}/.prefdata-key")


def test_concurrent_publishes_leave_only_whole_versions(store_root, tmp_path):
    """Four processes import into one name at once: two with the same content, two different."""
    sources = []
    for k, rows in enumerate([ROWS, ROWS, ROWS[:7], ROWS[3:]]):
        src = tmp_path / f"src{k}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        sources.append(src)
    env = {**os.environ, "PREFDATA_STORE": str(store_root)}
    procs = [subprocess.Popen([sys.executable, "-m", "prefdata", "import", str(s), "--name", "race"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for s in sources]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    store = Store(str(store_root))
    found = store.versions("race")
    assert len(found) == 3
    for v in found:
        assert store.verify(v.ref) == []
    leftovers = [p for p in (store_root / "race").iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []

    # and concurrent status writers never corrupt the manifest
    target = found[0].ref
    writers = [subprocess.Popen([sys.executable, "-c",
                                 "from prefdata.data.store import Store; import sys; Store(sys.argv[1]).set_status(sys.argv[2], 'rejected', note=sys.argv[3])",
                                 str(store_root), target, str(i)]) for i in range(4)]
    assert [w.wait(timeout=120) for w in writers] == [0] * 4
    history = store.get(target).manifest["status_history"]
    assert sorted(h.get("note") for h in history[1:]) == ["0", "1", "2", "3"]


def test_load_stacks_splits(store_root, tmp_path):
    rows = [dict(r, split="test" if i < 5 else "train") for i, r in enumerate(ROWS)]
    v = make_version(Store(), "split", rows)
    store = Store()
    assert store.load(v.ref).height == 20
    assert store.load(v.ref, split="test").height == 5
    assert isinstance(store.load(v.ref, "sft"), pl.DataFrame)


def test_parquet_files_written_together_are_whole_and_hashed(store_root, tmp_path):
    # data/test, data/train and sft/train are encoded two at a time: each file must hold exactly its
    # table, zstd-compressed, with the manifest's sha256 and size of the bytes on disk
    import hashlib

    import pyarrow.parquet as pq

    rows = [dict(r, split="test" if i % 3 == 0 else "train") for i, r in enumerate(ROWS)]
    store = Store()
    v = make_version(store, "together", rows)
    folder = Path(store.path(v.ref))
    parquet = {rel: meta for rel, meta in v.manifest["files"].items() if rel.endswith(".parquet")}
    assert sorted(parquet) == ["data/test-00000-of-00001.parquet", "data/train-00000-of-00001.parquet",
                               "sft/train-00000-of-00001.parquet"]
    for rel, meta in parquet.items():
        data = (folder / rel).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (meta["sha256"], meta["bytes"])
        assert pq.ParquetFile(folder / rel).metadata.row_group(0).column(0).compression == "ZSTD"
    train = store.load(v.ref, split="train")
    assert store.load(v.ref, split="test")["prompt"].to_list() == [r["prompt"] for r in rows if r["split"] == "test"]
    assert store.load(v.ref, "sft")["completion"].to_list() == train["chosen"].to_list()
    assert store.verify(v.ref) == []


def test_quarantine_streams_from_any_iterable_with_the_same_bytes(store_root):
    """A writer with more rejected rows than memory (filter over shards) hands the store a generator:
    the file, its hash and so the version are those of the same entries given as a list, and an empty
    generator writes no quarantine, as an empty list does not."""
    store = Store()
    frame = pl.DataFrame({"prompt": ["p"], "chosen": ["a"], "rejected": ["b"], "id": ["x"]})
    entries = [{"id": f"r{i}", "reason": "check:length_ratio", "detail": "naïve \u2028 text", "row": None,
                "raw": {"prompt": "p" * i, "n": i}} for i in range(25_000)]  # more than one write's worth
    counts = {"read": 1 + len(entries), "kept": 1, "quarantined": len(entries)}
    lineage = {"parent": None, "sources": [], "flow_run": None, "components": {}}

    def write(name: str, quarantine):
        return store.create_sharded(name, [{"default": {"train": frame}}],
                                    lambda: ({}, quarantine, counts, lineage))

    listed, streamed = write("listed", entries), write("streamed", (e for e in entries))
    assert streamed.manifest["files"]["quarantine.jsonl"] == listed.manifest["files"]["quarantine.jsonl"]
    assert write("listed", (e for e in entries)).version == listed.version  # the name is in the card
    lines = store.read_text(streamed.ref, "quarantine.jsonl").split("\n")[:-1]  # not splitlines: U+2028 is in a line
    assert [json.loads(line) for line in lines] == entries
    empty = write("empty", iter(()))
    assert "quarantine.jsonl" not in empty.manifest["files"]
    assert empty.version == write("empty", []).version
    assert store.verify(streamed.ref) == []
