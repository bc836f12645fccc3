"""The comparisons format on the batched path (prefdata/data/comparison_batches.py; issue 22 item 1):
JSON Lines, CSV and Parquet comparisons files, in one batch and in batches of 1, 2, 3 and 7 rows,
give what the row-by-row reference gives (pairs, comparisons, votes, ids, quarantine reasons, details
and row numbers, counts), in memory, streamed into the store and checked in shards; a container
the path does not take says why in one line."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from prefdata.data.columnar import BATCH_ROWS, convert_columnar
from prefdata.data.importer import ImportResult, import_file, import_file_to_store, import_rows, import_to_store
from prefdata.data.store import Store

SMALL_BATCHES = (1, 2, 3, 7)


def comparison_rows() -> list[dict]:
    """Comparisons with every label source and every fault a row can have."""
    return [
        {"prompt": "q1", "response_a": "A", "response_b": "B", "annotator1": "a", "annotator2": "a", "annotator3": "b"},
        {"prompt": "q2", "response_a": "A", "response_b": "B", "annotator1": "tie", "annotator2": "tie"},  # tie
        {"prompt": "q3", "response_a": "A", "response_b": "B", "annotator1": "a", "annotator2": "b"},  # no majority
        {"prompt": "q4", "response_a": "A", "response_b": "B", "label": "b", "category": "math"},  # a label column
        {"prompt": "q5", "response_a": "A", "response_b": "B", "label": "a", "annotator1": "b"},  # votes over the label
        {"prompt": "q6", "response_a": "same", "response_b": "same", "annotator1": "a"},  # identical_responses
        {"prompt": "q7", "response_a": "A", "annotator1": "a"},  # missing_field:response_b
        {"response_a": "A", "response_b": "B", "label": "a"},  # no prompt, no instruction
        {"prompt": 5, "response_a": "A", "response_b": "B"},  # wrong_type:prompt (text in CSV and Parquet)
        # PandaLM's convention: instruction + input, response1/2, votes 1/2/0, cmp_key naming both models
        {"instruction": "Rewrite it.", "input": "the text", "response1": "X", "response2": "Y", "annotator1": 1,
         "annotator2": 1, "annotator3": 0},
        {"instruction": "Say hi.", "input": "", "response1": "hi", "response2": "hello", "annotator1": 2,
         "cmp_key": "m1_m2"},
        {"instruction": "   ", "input": "", "response1": "x", "response2": "y", "label": "a"},  # empty_text:prompt
        {"prompt": "q8", "response_a": "A", "response_b": "B", "annotator1": "maybe"},  # invalid_vote
        {"prompt": "q9", "response_a": "x" * 3000, "response_b": "B", "label": "a"},  # text_too_large (2048)
        {"prompt": "q10", "response_a": "A", "response_b": "B", "label": "a", "split": "../x"},  # invalid_split
        {"prompt": "q11", "response_a": "A", "response_b": "B", "label": "b", "model_a": "m1", "model_b": "m2",
         "score_chosen": None},  # models follow their responses; a score written as null is still a column
        {"prompt": "q12", "response_a": "A", "response_b": "B", "label": "tie", "source": "a tie's"},  # a column only a tie has
        {"prompt": "Q1 ", "response_a": "a", "response_b": "B", "annotator1": "b"},  # q1 again once normalised: numbered id
        {"prompt": "q13", "response_a": "B", "response_b": "A", "label": "a", "split": "test"},
    ]


def with_ids(rows: list[dict]) -> list[dict]:
    """Source ids: the last row repeats the first one's id and content (their votes pool), row 2 takes
    row 1's id for other content (duplicate_id_conflict), row 5's id is blank (a content id)."""
    ids = [f"c{i}" for i in range(len(rows))]
    ids[2], ids[5] = ids[1], " "
    return [{"id": i, **row} for i, row in zip(ids, rows)] + [{"id": "c0", **rows[0], "annotator1": "b",
                                                               "annotator2": "b"}]


def write(rows: list[dict], path: Path) -> Path:
    """JSON Lines as given (a key a row leaves out is absent), CSV (every value text, absent ones
    empty, but the split: "train", since an empty split is invalid_split) or Parquet (text columns,
    scores as floats), gzipped when the name says .gz."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if ".jsonl" in path.name:
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    elif ".csv" in path.name:
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(columns)
            given = [{"split": "train", **row} if "split" in columns else row for row in rows]
            writer.writerows([["" if row.get(c) is None else str(row[c]) for c in columns] for row in given])
        data = path.read_bytes()
    else:
        schema = {c: pl.Float64 if c.startswith("score_") else pl.String for c in columns}
        pl.DataFrame([{c: row.get(c) if row.get(c) is None or c.startswith("score_") else str(row[c])
                       for c in columns} for row in rows], schema=schema).write_parquet(path)
        return path
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return path


def assert_same_batched_in_memory(path: Path, batches: tuple[int, ...], **options) -> ImportResult:
    """The batched import in memory, in one batch and in batches of `batches` rows, equals the
    row-by-row reference (every table, the quarantine, the summary, the sources); the reference."""
    why: list[str] = []
    assert convert_columnar(path, options.get("fmt", "auto"), options.get("max_text_bytes", 1 << 20), why) is not None, why
    reference = import_rows(path, **options)
    for batch_rows in (BATCH_ROWS, *batches):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("prefdata.data.columnar.BATCH_ROWS", batch_rows)
            fast = import_file(path, **options)
        assert fast.row_by_row is None, fast.row_by_row
        for table in ("pairs", "comparisons", "votes"):
            mine, theirs = getattr(fast, table), getattr(reference, table)
            assert (mine is None) == (theirs is None), table
            if theirs is not None:
                assert_frame_equal(mine, theirs)
        assert fast.quarantine == reference.quarantine, batch_rows
        assert fast.summary() == reference.summary()
        assert fast.sources == reference.sources
    return reference


def assert_same_import(path: Path, batches: tuple[int, ...] = SMALL_BATCHES, **options) -> None:
    """The batched import, in one batch and in batches of `batches` rows (lines), equals the row-by-row
    reference: in memory, and streamed into the store (a shard per batch) against the reference's version."""
    reference = assert_same_batched_in_memory(path, batches, **options)

    store = Store(str(path.parent / f"store-{path.name}"))
    whole = import_to_store(reference, "whole", store)
    for batch_rows in batches:
        result, streamed = import_file_to_store(path, f"streamed{batch_rows}", store, batch_rows=batch_rows, **options)
        assert result.row_by_row is None and result.summary() == reference.summary(), batch_rows
        assert result.pairs["id"].to_list() == reference.pairs["id"].to_list()
        assert_same_version(store, streamed.ref, whole.ref, sharded=True)


def assert_same_version(store: Store, streamed: str, whole: str, sharded: bool) -> None:
    a, b = store.get(streamed), store.get(whole)
    assert a.manifest["counts"]["rows"] == b.manifest["counts"]["rows"]
    for config in b.manifest["counts"]["rows"]:
        assert_frame_equal(store.load(streamed, config), store.load(whole, config))
    assert a.manifest["counts"] == b.manifest["counts"]
    assert a.manifest["schema"] == b.manifest["schema"]
    assert a.manifest["lineage"] == b.manifest["lineage"]
    assert ("quarantine.jsonl" in a.manifest["files"]) == ("quarantine.jsonl" in b.manifest["files"])
    if "quarantine.jsonl" in b.manifest["files"]:
        assert store.read_text(streamed, "quarantine.jsonl") == store.read_text(whole, "quarantine.jsonl")
    shards = [f for f in a.manifest["files"] if f.startswith("comparisons/")]
    assert (len(shards) > 1) == sharded, shards
    assert store.verify(streamed) == []


@pytest.mark.parametrize("name", ["c.jsonl", "c.jsonl.gz", "c.csv", "c.parquet"])
def test_comparisons_without_ids(tmp_path, name):
    path = write(comparison_rows(), tmp_path / name)
    assert_same_import(path, max_text_bytes=2048)
    result = import_file(path, max_text_bytes=2048)
    assert {"identical_responses", "invalid_vote", "text_too_large:response_a", "invalid_split"} <= set(result.reasons)
    assert {"tie", "no_majority"} <= set(result.unresolved)
    assert result.pairs["id"].str.ends_with("-2").sum() == 1  # "Q1 " is q1's pair, numbered
    if ".csv" not in name:  # (in CSV every row has every column: an empty source is a source)
        assert "source" in result.comparisons.columns and "source" not in result.pairs.columns


@pytest.mark.parametrize("name", ["ids.jsonl", "ids.csv", "ids.parquet"])
def test_comparisons_with_source_ids_pooled_votes_and_conflicts(tmp_path, name):
    """Votes pool over the rows of one id, however far apart (here the first and the last row, in
    other batches but for the largest), and a blank id among source ids is the content id."""
    rows = with_ids(comparison_rows())
    path = write(rows, tmp_path / name)
    assert_same_import(path, max_text_bytes=2048)
    result = import_file(path, max_text_bytes=2048)
    assert result.reasons["duplicate_id_conflict"] == 1
    c0 = result.comparisons.filter(pl.col("id") == "c0")
    # the first row alone says a (a a b); with the last row's b b b, both rows say b
    assert c0.height == 2 and c0["label"].to_list() == ["b", "b"]
    assert result.votes.filter(pl.col("pair_id") == "c0").height == 6


@pytest.mark.parametrize("name", ["ids.jsonl", "ids.parquet"])
def test_comparisons_with_a_votes_file(tmp_path, name):
    """Long votes (--votes) label the comparisons of every batch; its bad rows are quarantined after
    the data's, as the row path does."""
    path = write(with_ids(comparison_rows()), tmp_path / name)
    votes = tmp_path / "votes.csv"
    votes.write_text("pair_id,annotator,vote\n"
                     "c3,ann9,a\n"       # q4 had a label column b: its votes decide
                     "c16,ann9,a\n"      # q12, a tie by its label: now a pair
                     "c0,ann9,a\n"       # a vote beside the two rows' own
                     "nope,ann9,a\n"     # unknown_pair_id
                     "c3,ann9,b\n"       # conflicting_vote
                     "c3,ann9,a\n"       # duplicate_vote
                     "c4,,a\n"           # missing_field:annotator
                     "c4,ann8,\n"        # missing_field:vote
                     "c4,ann8,zzz\n")    # invalid_vote
    for aggregate in ("majority", "dawid-skene"):
        assert_same_import(path, max_text_bytes=2048, votes=votes, aggregate=aggregate)
    result = import_file(path, max_text_bytes=2048, votes=votes)
    assert result.votes_read == result.votes_kept + result.votes_quarantined and result.votes_quarantined == 6
    labels = dict(result.comparisons.select("id", "label").iter_rows())
    assert labels["c3"] == "a" and labels["c16"] == "a"


def test_pandalm_in_every_container(tmp_path, shared_data):
    """PandaLM's human-annotated test set (999 rows, three wide votes each, `true` where six
    responses belong) as JSON Lines, CSV and Parquet, majority and Dawid-Skene."""
    rows = json.loads((shared_data / "pandalm" / "testset-v1.json").read_text())
    for name in ("pandalm.jsonl.gz", "pandalm.csv", "pandalm.parquet"):
        path = write(rows, tmp_path / name)
        for aggregate in ("majority", "dawid-skene"):
            assert_same_import(path, batches=(250, 333), aggregate=aggregate)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("prefdata.data.columnar.BATCH_ROWS", 7)
            assert_same_in_memory(path, aggregate="dawid-skene")
    result = import_file(tmp_path / "pandalm.jsonl.gz")
    # PandaLM README's majority counts: 105 ties, 422 + 472 pairs, less the 6 rows with a `true` response
    assert result.unresolved == {"tie": 105} and result.pairs.height == 888 and result.quarantined == 6
    assert set(result.pairs.columns) >= {"chosen_model", "rejected_model"}  # from cmp_key, as the winner goes


def assert_same_in_memory(path: Path, **options) -> None:
    fast, reference = import_file(path, **options), import_rows(path, **options)
    assert fast.row_by_row is None
    assert_frame_equal(fast.pairs, reference.pairs) and assert_frame_equal(fast.comparisons, reference.comparisons)
    assert fast.quarantine == reference.quarantine


def test_a_one_batch_file_is_the_in_memory_version(tmp_path):
    path = write(comparison_rows(), tmp_path / "c.jsonl")
    store = Store(str(tmp_path / "store"))
    whole = import_to_store(import_rows(path), "whole", store)
    _, same = import_file_to_store(path, "same", store)
    assert_same_version(store, same.ref, whole.ref, sharded=False)


def test_containers_without_a_batched_path_say_why(tmp_path):
    """(A JSON array takes the batched path: tests/test_import_json_batched.py.)"""
    parquet = write(comparison_rows()[:3], tmp_path / "c.parquet")
    (tmp_path / "c.parquet.gz").write_bytes(gzip.compress(parquet.read_bytes()))
    assert "not a compressed Parquet file" in import_file(tmp_path / "c.parquet.gz").row_by_row
    assert_frame_equal(import_file(tmp_path / "c.parquet.gz").comparisons, import_rows(tmp_path / "c.parquet.gz").comparisons)


def test_check_file_in_shards_reads_the_comparisons(tmp_path, shared_data, monkeypatch):
    """`check FILE` of a comparisons file bigger than a batch: the pairs in shards, the comparisons'
    labels and models (no texts) and the votes beside them, with the in-memory run's results."""
    from prefdata.checks.checklist import default_config, run_checklist
    from prefdata.gate.runner import load_inputs

    rows = json.loads((shared_data / "pandalm" / "testset-v1.json").read_text())
    path = write(rows, tmp_path / "pandalm.jsonl")
    whole_inputs, _ = load_inputs(str(path))
    monkeypatch.setattr("prefdata.data.importer.BATCH_ROWS", 300)
    inputs, info = load_inputs(str(path))
    assert whole_inputs.shards is None and len(inputs.shards.paths) == 4
    assert info["import"] == import_rows(path).summary()
    assert "response_a" not in inputs.comparisons.columns
    assert_frame_equal(inputs.votes, whole_inputs.votes)
    whole = {r.id: r for r in run_checklist(whole_inputs, default_config())}
    batched = {r.id: r for r in run_checklist(inputs, default_config())}
    assert list(batched) == list(whole)
    for check_id, r in whole.items():
        mine = batched[check_id]
        assert (mine.status, mine.metric, mine.offending) == (r.status, r.metric, r.offending), check_id
    # the checks that read the comparisons and votes ran on them: both models of every pair, the annotators
    assert whole["same_policy"].status == "fail" and whole["agreement"].status != "skip"
