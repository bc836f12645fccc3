"""JSON files (an array of rows, `{"data": [...]}`; plain, gzipped, zstd) on the batched path (issue 22
item 1): in every format, in one batch and in batches of 1, 2, 3 and 7 rows, the import gives what the
row-by-row reference gives (pairs, comparisons, votes, ids, quarantine reasons, details, raw rows and
row numbers, counts), in memory and streamed into the store; `check FILE` in shards gives the
in-memory run's results; and the import holds a batch of the file, not the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_batched import assert_same_results
from test_import_columnar import chat_rows
from test_import_comparisons_batched import assert_same_batched_in_memory, comparison_rows, with_ids
from test_import_hardening import _import_with_peak
from test_import_streamed import assert_same_version

from prefdata.data import jsonarray
from prefdata.data.importer import import_file, import_file_to_store, import_rows, import_to_store
from prefdata.data.readers import RawRow, read_rows
from prefdata.data.store import Store

SMALL_BATCHES = (1, 2, 3, 7)
CONTAINERS = ["p.json", "p.json.gz", "p.json.zst", "wrapped.json"]
# Elements the row reader cannot read (an element over 16 x --max-text-bytes characters, 2048 here at
# most, is row_too_large), each the row path's quarantine with its element's number.
READER_FAULTS = [
    '{"prompt": "q", "prompt": "r", "chosen": "a", "rejected": "b"}',  # duplicate_key
    "[" * 150 + "]" * 150,                                              # too_deep
    '"a string"', "12", "null", "[1, 2]",                                 # not_an_object
    '{"prompt": "lone \\ud800", "chosen": "a", "rejected": "b"}',         # invalid_utf8
    json.dumps({"prompt": "big", "chosen": "x" * 40_000, "rejected": "b"}),  # row_too_large
]
READER_REASONS = {"duplicate_key", "too_deep", "not_an_object", "invalid_utf8", "row_too_large"}


def write_array(rows: list[dict], path: Path, faults: list[str] = READER_FAULTS) -> Path:
    """The rows as a JSON array, an element a line, with `faults` spread among them (every third
    element); inside `{"version": 1, "data": [...]}` when the name starts with "wrapped"; gzipped or
    zstd-compressed as the name says."""
    elements = [json.dumps(row) for row in rows]
    for k, fault in enumerate(faults):
        elements.insert(min(3 * k + 1, len(elements)), fault)
    text = "[\n  " + ",\n  ".join(elements) + "\n]"
    if path.name.startswith("wrapped"):
        text = '{"version": 1, "data": ' + text + ', "note": "rows above"}'
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def assert_same_import(path: Path, folder: Path, batches: tuple[int, ...] = SMALL_BATCHES, **options) -> None:
    """The batched import, in one batch and in batches of `batches` rows, equals the row-by-row
    reference: in memory, and streamed into the store (a shard per batch) against the reference's version."""
    reference = assert_same_batched_in_memory(path, batches, **options)

    store = Store(str(folder / f"store-{path.name}"))
    whole = import_to_store(reference, "whole", store)
    for batch_rows in batches:
        result, streamed = import_file_to_store(path, f"streamed{batch_rows}", store, batch_rows=batch_rows, **options)
        assert result.row_by_row is None and result.summary() == reference.summary(), batch_rows
        assert result.pairs["id"].to_list() == reference.pairs["id"].to_list()
        shards = {int(f.rsplit("-of-", 1)[1].removesuffix(".parquet")) for f in streamed.manifest["files"] if "-of-" in f}
        assert max(shards) > 1, batch_rows  # in shards, a batch each (the votes table is one file)
        # every table, the counts, the schema, the lineage and quarantine.jsonl (the raw rows as written)
        assert_same_version(store, streamed.ref, whole.ref)


def pair_rows() -> list[dict]:
    """trl rows: every fault the converter finds, and the values a frame could read otherwise than
    the row path (a number or a bool where the row path keeps a text, a score written as text...)."""
    return [
        {"prompt": "q1", "chosen": "a", "rejected": "b", "split": "train", "category": "c", "score_chosen": 7,
         "score_rejected": 2.5},
        {"prompt": "q2", "chosen": "a", "rejected": "b", "category": 5, "source": True,
         "score_chosen": None},  # a number and a bool kept as their text ("5", "True"); a score written null
        {"prompt": "q3", "chosen": "a", "rejected": "b", "annotators": ["x", "y"], "meta": {"k": [1, None]}},
        {"prompt": "q4", "chosen": "a", "rejected": "b", "tags": ["z" * 200, "z" * 200]},  # text_too_large:tags
        {"prompt": "q5", "chosen": "a", "rejected": "b", "notes": "n" * 300},  # text_too_large:notes
        {"prompt": 5, "chosen": "a", "rejected": "b"},                # wrong_type:prompt
        {"prompt": "q6", "chosen": True, "rejected": "b"},             # wrong_type:chosen
        {"prompt": "q7", "chosen": "a", "rejected": 1.5},              # wrong_type:rejected
        {"chosen": "a", "rejected": "b"},                              # missing_field:prompt
        {"prompt": "q8", "chosen": None, "rejected": "b"},             # missing_field:chosen
        {"prompt": " \u3000\t", "chosen": "a", "rejected": "b"},       # empty_text:prompt
        {"prompt": "q9", "chosen": "same", "rejected": "same"},        # identical_responses
        {"prompt": "q10", "chosen": "y" * 300, "rejected": "b"},       # text_too_large:chosen
        {"prompt": "q11", "chosen": "é" * 150, "rejected": "b"},       # 300 bytes in 150 characters
        {"prompt": "q12", "chosen": "a", "rejected": "c", "split": "../x"},       # invalid_split
        {"prompt": "q13", "chosen": "a", "rejected": "d", "split": 2024},         # a number: the split "2024"
        {"prompt": "q14", "chosen": "a", "rejected": "e", "score_chosen": "1.5"},  # numeric text: 1.5
        {"prompt": "q15", "chosen": "a", "rejected": "f", "score_chosen": "abc"},  # wrong_type:score_chosen
        {"prompt": "q16", "chosen": "a", "rejected": "g", "score_chosen": False},  # a bool is no score
        {"prompt": "q17", "chosen": "a", "rejected": "h", "score_rejected": float("inf")},  # Infinity
        {"prompt": "q18", "chosen": "a", "rejected": "i", "score_rejected": float("nan")},  # NaN: missing
        {"prompt": "Straße ＦＵＬＬ 🙂", "chosen": "café", "rejected": "cafe\u0301"},
        {"prompt": "q1", "chosen": "a", "rejected": "b"},              # q1's pair again: a numbered id
        {"prompt": "Q1 ", "chosen": "A", "rejected": "b"},             # and once normalised
    ]


PAIR_REASONS = {"wrong_type:prompt", "wrong_type:chosen", "wrong_type:rejected", "missing_field:prompt",
                "missing_field:chosen", "empty_text:prompt", "identical_responses", "text_too_large:chosen",
                "text_too_large:notes", "text_too_large:tags", "invalid_split", "wrong_type:score_chosen",
                "wrong_type:score_rejected"}


@pytest.mark.parametrize("name", CONTAINERS)
def test_trl_pairs_with_every_fault(tmp_path, name):
    path = write_array(pair_rows(), tmp_path / name)
    assert_same_import(path, tmp_path, max_text_bytes=256)
    result = import_file(path, max_text_bytes=256)
    assert set(result.reasons) == PAIR_REASONS | READER_REASONS
    assert [q["row"] for q in result.quarantine if q["reason"] == "duplicate_key"] == [2]  # the element's number
    kept = {row["prompt"]: row for row in reversed(result.pairs.rows(named=True))}  # a prompt's first row
    assert (kept["q2"]["category"], kept["q2"]["source"], kept["q13"]["split"]) == ("5", "True", "2024")
    assert (kept["q1"]["score_chosen"], kept["q14"]["score_chosen"], kept["q18"]["score_rejected"]) == (7.0, 1.5, None)
    assert kept["q3"]["annotators"] == '["x", "y"]'
    assert result.pairs["id"].str.ends_with("-3").sum() == 1  # q1, then q1 again, then "Q1 " "A"


def pairs_with_ids() -> list[dict]:
    """Source ids of every kind: text, an integer ("1"), a fraction, PandaLM's `idx`; an id reused
    for the same content (both kept) and for other content (duplicate_id_conflict), twice, one of
    them an integer against its text."""
    rows = [{"id": f"r{i}", **row} for i, row in enumerate(pair_rows())]
    rows[1]["id"], rows[15]["id"] = 1, 2.5
    rows[2] = {"idx": "r2", **{k: v for k, v in rows[2].items() if k != "id"}}
    rows[-3]["id"] = "1"   # the unicode row takes row 2's id, written as text: other content
    rows[-2]["id"] = "r0"  # q1's pair again under q1's id: the same content, kept
    rows[-1]["id"] = "r0"  # "Q1 " "A": the same pair once normalised, but other text: a conflict
    return rows


def test_trl_pairs_with_source_ids(tmp_path):
    path = write_array(pairs_with_ids(), tmp_path / "ids.json")
    assert_same_import(path, tmp_path, max_text_bytes=256)
    result = import_file(path, max_text_bytes=256)
    assert result.reasons["duplicate_id_conflict"] == 2
    assert {"1", "2.5", "r2"} <= set(result.pairs["id"].to_list())


def hh_rows() -> list[dict]:
    def said(human: str, assistant: str) -> str:
        return f"\n\nHuman: {human}\n\nAssistant: {assistant}"

    return [
        {"chosen": said("hi", "a"), "rejected": said("hi", "b"), "split": "train", "score_chosen": 2,
         "score_rejected": None},  # the only score_rejected, written null: still a column (the row path's)
        {"chosen": said("hi", "a"), "rejected": said("hi", "a")},                  # identical_responses
        {"chosen": said("hi", "a"), "rejected": said("bye", "b")},                 # hh_no_shared_prompt
        {"chosen": said("x", "a"), "rejected": said("x", "") + "a"},               # identical once split
        {"chosen": said("q", "one"), "rejected": 5},                               # wrong_type:rejected
        {"chosen": said("q", "one")},                                              # missing_field:rejected
        {"chosen": said("q", "w" * 300), "rejected": said("q", "two")},            # text_too_large:chosen
        {"chosen": said("q", "one"), "rejected": said("q", "two"), "category": 3, "split": "../x"},
        {"chosen": said("Straße", "ja"), "rejected": said("Straße", "nein"), "category": "de"},
        {"chosen": said("hi", "a"), "rejected": said("hi", "b")},                  # a repeat: numbered
    ]


def test_hh_rlhf_transcripts(tmp_path):
    path = write_array(hh_rows(), tmp_path / "hh.json.gz")
    assert_same_import(path, tmp_path, max_text_bytes=256)
    result = import_file(path, max_text_bytes=256)
    assert result.format == "hh-rlhf"
    assert {"identical_responses", "hh_no_shared_prompt", "wrong_type:rejected", "missing_field:rejected",
            "text_too_large:chosen", "invalid_split"} | READER_REASONS <= set(result.reasons)


def test_real_hh_rlhf_transcripts_as_a_json_array(tmp_path, shared_data):
    rows = [row.data for row in read_rows(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")]
    path = write_array(rows, tmp_path / "hh.json", faults=[])
    assert_same_import(path, tmp_path, batches=(997, 1500))
    assert import_file(path).format == "hh-rlhf"


def test_trl_chat_in_batches(tmp_path):
    # (a kept row gives the split too: a streamed version's shards keep a column only quarantined rows give)
    rows = chat_rows() + [{**chat_rows()[0], "split": "train"}]
    path = write_array(rows, tmp_path / "chat.json")
    assert_same_import(path, tmp_path, max_text_bytes=256)
    result = import_file(path, max_text_bytes=256)
    assert result.format == "trl-chat" and "prompt_messages" in result.pairs.columns
    assert {"wrong_type:chosen", "identical_responses", "missing_field:prompt", "empty_text:prompt",
            "text_too_large:chosen", "invalid_split"} | READER_REASONS <= set(result.reasons)


@pytest.mark.parametrize("name", ["c.json", "c.json.gz", "wrapped.json"])
def test_comparisons(tmp_path, name):
    path = write_array(comparison_rows(), tmp_path / name)
    assert_same_import(path, tmp_path, max_text_bytes=2048)
    result = import_file(path, max_text_bytes=2048)
    assert {"identical_responses", "invalid_vote", "text_too_large:response_a", "invalid_split"} | READER_REASONS <= set(
        result.reasons)
    assert {"tie", "no_majority"} <= set(result.unresolved)


def test_comparisons_with_source_ids_and_a_votes_file(tmp_path):
    path = write_array(with_ids(comparison_rows()), tmp_path / "ids.json")
    votes = tmp_path / "votes.csv"
    votes.write_text("pair_id,annotator,vote\nc3,ann9,a\nc0,ann9,a\nnope,ann9,a\nc3,ann9,b\n")
    assert_same_import(path, tmp_path, max_text_bytes=2048)
    assert_same_import(path, tmp_path / "votes", max_text_bytes=2048, votes=votes)
    result = import_file(path, max_text_bytes=2048, votes=votes)
    assert result.reasons["duplicate_id_conflict"] == 1 and result.votes_quarantined == 2


def test_pandalm_as_it_ships(tmp_path, shared_data):
    """PandaLM's human-annotated test set is a JSON array: read where it lies, majority and Dawid-Skene."""
    path = shared_data / "pandalm" / "testset-v1.json"
    for aggregate in ("majority", "dawid-skene"):
        assert_same_import(path, tmp_path / aggregate, batches=(250, 333), aggregate=aggregate)
    result = import_file(path)
    # PandaLM README's majority counts: 105 ties, 422 + 472 pairs, less the 6 rows with a `true` response
    assert result.unresolved == {"tie": 105} and result.pairs.height == 888 and result.quarantined == 6


def test_which_rows_the_frame_holds():
    """The frame takes the rows whose values it holds as the row path reads them; the others, and
    the rows the reader could not read, go to the reference converter."""
    good = {"id": 3, "prompt": "q", "chosen": "a", "rejected": "b", "score_chosen": 1, "category": 2.5,
            "meta": {"k": [1]}, "note": "short"}
    others = [{**good, "prompt": 5}, {**good, "split": 7}, {**good, "score_chosen": "1"},
              {**good, "score_chosen": True}, {**good, "score_chosen": 10 ** 400}, {**good, "category": [1]},
              {**good, "id": {"a": 1}}, {**good, "note": "n" * 100}, {**good, "tags": []}]
    rows = [RawRow(1, good)] + [RawRow(k, row) for k, row in enumerate(others, start=2)]
    rows.append(RawRow(len(rows) + 1, None, "not_an_object", "got int"))
    framed, rest = jsonarray.split(rows, max_text_bytes=256)
    assert [r.number for r in framed] == [1] and len(rest) == len(rows) - 1
    frame = jsonarray.frame(framed)
    assert frame.row(0, named=True) == {"__row": 1, "id": "3", "prompt": "q", "chosen": "a", "rejected": "b",
                                        "category": "2.5", "score_chosen": 1.0}


def test_shapes_that_still_go_row_by_row_say_why(tmp_path):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "r", "chosen": "a", "rejected": "b"}]
    named = write_array([{**rows[0], "model": "m"}, rows[1]], tmp_path / "model.json", faults=[])
    mixed = write_array([{**rows[0], "id": "x"}, rows[1]], tmp_path / "mixed.json", faults=[])
    for path, why in ((named, "a model column (the row path applies its rule)"),
                      (mixed, "some rows have an id and some have not")):
        result, reference = import_file(path), import_rows(path)
        assert result.row_by_row == why
        assert_frame_equal(result.pairs, reference.pairs)


def test_check_file_in_shards(tmp_path, monkeypatch):
    """`check FILE` of a JSON array bigger than a batch: the checks read the shards, with the
    in-memory run's results."""
    from bench.realistic import make_realistic_pairs
    from prefdata.checks.checklist import default_config, run_checklist
    from prefdata.gate.runner import load_inputs

    frame = make_realistic_pairs(1_200, seed=7)[0]
    frame = frame.with_columns(split=pl.Series(["test" if i % 9 == 0 else "train" for i in range(frame.height)]))
    path = write_array(frame.to_dicts(), tmp_path / "pairs.json", faults=READER_FAULTS[:3])
    whole_inputs, _ = load_inputs(str(path))
    monkeypatch.setattr("prefdata.data.importer.BATCH_ROWS", 400)
    inputs, info = load_inputs(str(path))
    assert whole_inputs.shards is None and len(inputs.shards.paths) == 4  # 1,203 elements
    assert info["import"] == import_rows(path).summary()
    whole = run_checklist(whole_inputs, default_config())
    batched = run_checklist(inputs, default_config())
    assert {"exact_duplicates", "degenerate_pairs"} <= {r.id for r in whole if r.status == "fail"}
    assert_same_results(batched, whole)


def test_check_pandalm_in_shards(shared_data, monkeypatch):
    """`check FILE` of PandaLM's JSON array in batches of 300: the comparisons' labels, models and
    votes beside the shards, with the in-memory run's results."""
    from prefdata.checks.checklist import default_config, run_checklist
    from prefdata.gate.runner import load_inputs

    path = shared_data / "pandalm" / "testset-v1.json"
    whole_inputs, _ = load_inputs(str(path))
    monkeypatch.setattr("prefdata.data.importer.BATCH_ROWS", 300)
    inputs, info = load_inputs(str(path))
    assert whole_inputs.shards is None and len(inputs.shards.paths) == 4
    assert info["import"] == import_rows(path).summary()
    assert_frame_equal(inputs.votes, whole_inputs.votes)
    whole = run_checklist(whole_inputs, default_config())
    assert {r.id: r.status for r in whole}["same_policy"] == "fail"  # two models per pair, from cmp_key
    assert_same_results(run_checklist(inputs, default_config()), whole)


def test_the_import_holds_a_batch_not_the_file(tmp_path):
    """A JSON array of 229 MB (8,000 rows of 30 KB) into the store, 100 rows at a time: the peak is
    the process's own (~150 MB) and a few batches; imported in one batch, the same file takes ~1.3 GB."""
    src = tmp_path / "big.json"
    with src.open("w") as out:
        out.write("[")
        for i in range(8_000):
            row = {"prompt": f"question {i} " + "w" * 10_000, "chosen": f"good {i} " + "x" * 10_000,
                   "rejected": f"bad {i} " + "y" * 10_000, "score_chosen": i}
            out.write(("," if i else "") + json.dumps(row))
        out.write(', "not a row"]')
    done, peak = _import_with_peak(src, None, "--name", "big", "--batch-rows", "100", "--store", str(tmp_path / "store"))
    assert done.returncode == 0, done.stderr
    assert "read 8001 = kept 8000 + quarantined 1" in done.stdout
    version = Store(str(tmp_path / "store")).versions("big")[0]
    assert "data/train-00080-of-00081.parquet" in version.manifest["files"]
    assert peak < 320, f"peak RSS {peak} MB for a {src.stat().st_size >> 20} MB file in batches of 100 rows"
