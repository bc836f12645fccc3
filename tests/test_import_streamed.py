"""A big Parquet, JSON Lines or CSV file goes into the store a batch of rows at a time (issue 11: 10M
pairs on one machine; issue 22: JSON Lines and CSV, compressed or not): the version holds exactly
what the one-batch import stores, in shards."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from bench.realistic import make_realistic_pairs
from prefdata.data.delimited import count_lines
from prefdata.data.importer import import_file, import_file_to_store, import_to_store
from prefdata.data.store import Store


def realistic_file(tmp_path: Path, n: int = 3_000, suffix: str = "parquet", **columns) -> Path:
    frame = make_realistic_pairs(n, seed=3)[0]
    return write(frame.with_columns(**{k: pl.Series(v) for k, v in columns.items()}), tmp_path / f"pairs.{suffix}")


def write(frame: pl.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        frame.write_parquet(path, row_group_size=500)
    elif path.suffix == ".gz":
        path.write_bytes(gzip.compress(frame.write_ndjson().encode(), mtime=0))
    elif path.suffix == ".zst":
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(frame.write_ndjson().encode()))
    elif path.suffix == ".csv":
        frame.write_csv(path)
    else:
        frame.write_ndjson(path)
    return path


SUFFIXES = ["parquet", "jsonl", "jsonl.gz", "jsonl.zst", "csv"]


def assert_same_version(store: Store, streamed: str, whole: str) -> None:
    a, b = store.get(streamed), store.get(whole)
    for config in b.manifest["counts"]["rows"]:
        assert_frame_equal(store.load(streamed, config), store.load(whole, config))
    assert a.manifest["counts"] == b.manifest["counts"]
    assert a.manifest["schema"] == b.manifest["schema"]
    assert a.manifest["lineage"] == b.manifest["lineage"]
    quarantine = [f for f in b.manifest["files"] if f == "quarantine.jsonl"]
    for rel in quarantine:
        assert store.read_text(streamed, rel) == store.read_text(whole, rel)
    assert store.verify(streamed) == []


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_streamed_version_equals_the_one_batch_import(tmp_path, suffix):
    n = 3_000
    # source ids with a conflict across batches (row 2,900 reuses row 10's id for other text), an
    # empty prompt and a split column: every cross-row rule and the quarantine cross batch borders
    ids = [f"r{i}" for i in range(n)]
    ids[2_900] = "r10"
    splits = ["test" if i % 10 == 0 else "train" for i in range(n)]
    path = realistic_file(tmp_path, n, suffix, id=ids, split=splits)
    store = Store(str(tmp_path / "store"))
    whole = import_to_store(import_file(path), "whole", store)
    result, streamed = import_file_to_store(path, "streamed", store, batch_rows=700)

    data_files = [f for f in streamed.manifest["files"] if f.startswith("data/train-")]
    # batches of 700 lines: a CSV record's text may span several (its newlines are the text's)
    n = 5 if suffix != "csv" else -(-count_lines(path) // 700)
    assert len(data_files) == n and data_files[0] == f"data/train-00000-of-{n:05d}.parquet"
    assert_same_version(store, streamed.ref, whole.ref)
    assert result.summary() == import_file(path).summary()
    assert result.reasons.get("duplicate_id_conflict") == 1
    assert result.pairs.columns == ["id"]  # the text went into the shards


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_streamed_content_ids_number_repeats_across_batches(tmp_path, suffix):
    frame = make_realistic_pairs(1_000, seed=5)[0].drop("id")
    repeated = pl.concat([frame, frame.head(300), frame.slice(100, 50)])  # repeats in later batches
    path = write(repeated, tmp_path / f"no-ids.{suffix}")
    store = Store(str(tmp_path / "store"))
    whole = import_to_store(import_file(path), "whole", store)
    _, streamed = import_file_to_store(path, "streamed", store, batch_rows=256)
    assert_same_version(store, streamed.ref, whole.ref)
    ids = store.load(streamed.ref)["id"]
    assert ids.n_unique() == ids.len() and ids.str.ends_with("-3").sum() >= 50  # rows 100-149, third time


@pytest.mark.parametrize("suffix", ["jsonl", "jsonl.gz"])
def test_lines_are_counted_apart_only_for_a_file_of_several_batches(tmp_path, monkeypatch, suffix):
    """import and check FILE parse a JSON Lines file's first batch before choosing the in-memory or
    the batched import: a file that ends in it (most files) is never read again to count its lines
    (a pass over 1.4 GB, or a second decompression); a longer one is counted once per command."""
    from prefdata.data import ndjson
    from prefdata.data.importer import import_file_to_shards

    counted: list[Path] = []
    count_lines = ndjson.count_lines
    monkeypatch.setattr(ndjson, "count_lines", lambda path: counted.append(path) or count_lines(path))
    path = realistic_file(tmp_path, 500, suffix)
    result, version = import_file_to_store(path, "n", Store(str(tmp_path / "store")))
    checked, shard_paths = import_file_to_shards(path)
    assert counted == [] and shard_paths is None and result.kept == 500 - len(result.quarantine)
    assert checked.summary() == result.summary()
    batched, shard_paths = import_file_to_shards(path, batch_rows=200)
    assert counted == [path] and len(shard_paths) == 3
    assert batched.summary() == result.summary()


@pytest.mark.parametrize("suffix", ["parquet", "jsonl.gz"])
def test_cli_import_batch_rows(tmp_path, suffix):
    path = realistic_file(tmp_path, 2_000, suffix)
    env = {**os.environ, "PREFDATA_STORE": str(tmp_path / "store")}
    cmd = [sys.executable, "-m", "prefdata", "import", str(path), "--name", "big"]
    streamed = subprocess.run([*cmd, "--batch-rows", "600", "--json", str(tmp_path / "s.json")],
                              capture_output=True, text=True, env=env, timeout=300)
    assert streamed.returncode == 0, streamed.stderr
    whole = subprocess.run([*cmd, "--json", str(tmp_path / "w.json")], capture_output=True, text=True, env=env,
                           timeout=300)
    assert whole.returncode == 0, whole.stderr
    s, w = (json.loads((tmp_path / f).read_text()) for f in ("s.json", "w.json"))
    assert s["version"] != w["version"]  # other files (4 shards), same content
    where = ("version", "quarantine_file")  # in the version's folder
    assert {k: v for k, v in s.items() if k not in where} == {k: v for k, v in w.items() if k not in where}
    assert_same_version(Store(str(tmp_path / "store")), s["version"], w["version"])


def test_the_lineage_sha256_is_of_the_file_as_imported_even_when_hashed_ahead(tmp_path):
    """import hashes the source in a thread while it parses (importer.hash_ahead): the lineage holds
    the file's sha256; a file rewritten after that thread started is hashed again, not given the
    digest of what it held before."""
    import hashlib

    from prefdata.data import importer

    path = realistic_file(tmp_path, 400, "jsonl")
    store = Store(str(tmp_path / "store"))
    result, _ = import_file_to_store(path, "p", store)
    assert result.sources[0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert str(path) not in importer._AHEAD  # taken, not left behind

    importer.hash_ahead(path)
    importer._AHEAD[str(path)][0].join()
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:200]))  # another size: another stamp
    result = import_file(path)
    assert result.read == 200
    assert result.sources[0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_hash_ahead_leaves_files_that_never_end_alone():
    from prefdata.data import importer

    importer.hash_ahead(Path("/dev/zero"))
    assert "/dev/zero" not in importer._AHEAD


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r", b""])
def test_lines_are_counted_as_the_readers_number_them_whatever_the_block_size(tmp_path, monkeypatch, block, ending):
    """count_lines reads into one buffer of BLOCK_BYTES: a "\\r\\n" cut by two reads is one line end,
    and a last line without an end counts, as the row readers number the lines."""
    from prefdata.data import delimited, ndjson

    monkeypatch.setattr(ndjson, "BLOCK_BYTES", block)
    monkeypatch.setattr(delimited, "BLOCK_BYTES", block)
    body = b"a" + ending + b"bb" + ending + b"ccc"
    path = tmp_path / "f.jsonl"
    for data, lines in ((body, 3 if ending else 1), (body + ending, 3 if ending else 1)):
        path.write_bytes(data)
        assert delimited.count_lines(path) == lines, (data, block)
        path.write_bytes(gzip.compress(data))
        assert delimited.count_lines(path) == lines, (data, block)
    newline_lines = body.count(b"\n") + (not body.endswith(b"\n"))
    path.write_bytes(body)
    assert ndjson.count_lines(path) == newline_lines
