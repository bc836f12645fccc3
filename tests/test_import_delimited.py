"""CSV and TSV (plain, gzipped, zstd) through the columnar path give exactly what the row-by-row
reference gives: kept rows, ids, quarantine reasons, details and row numbers, in one batch and in
batches that cut the file unevenly (issue 22 items 1 and 2)."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from prefdata.data.columnar import BATCH_ROWS, convert_columnar
from prefdata.data.importer import import_file, import_file_to_store, import_rows, import_to_store
from prefdata.data.store import Store

HEADER = ["id", "prompt", "chosen", "rejected", "score_chosen", "score_rejected", "split", "category"]


def assert_same_import(path: Path, batches: tuple[int, ...] = (1, 3, 7), **options) -> None:
    """The columnar import, in one batch and in batches of `batches` lines (the cross-row rules
    carried from batch to batch), equals the row-by-row reference."""
    why: list[str] = []
    assert convert_columnar(path, options.get("fmt", "auto"), options.get("max_text_bytes", 1 << 20), why) is not None, why
    reference = import_rows(path, **options)
    for batch_rows in (BATCH_ROWS, *batches):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("prefdata.data.columnar.BATCH_ROWS", batch_rows)
            if batch_rows != BATCH_ROWS:  # a batch's records become frames a few at a time
                patch.setattr("prefdata.data.delimited.CHUNK_ROWS", 2)
            fast = import_file(path, **options)
        assert fast.row_by_row is None, fast.row_by_row
        assert_frame_equal(fast.pairs, reference.pairs)
        assert fast.quarantine == reference.quarantine, batch_rows
        assert fast.summary() == reference.summary()
        assert fast.sources == reference.sources


def hostile_records(with_ids: bool = True) -> list[list[str]]:
    """~20 records a CSV writer writes, each a trap for a reader (the comments say which)."""
    rows = [
        ["q1", "plain", "a", "b", "1.5", "2", "train", "c1"],
        ["q2", 'quotes "inside", and commas', 'he said ""hi""', "b", "", "", "train", ""],  # empty score: missing
        ["q3", "two\nlines", "a\r\nwindows newline", "b\rlone cr", "3", "-1e3", "test", "c2"],
        ["q4", "   ", "a", "b", "1", "1", "train", "c1"],                # blank prompt
        ["q5", "same", "x", "x", "1", "1", "train", "c1"],                # chosen == rejected
        ["q6", "big", "y" * 300, "b", "1", "1", "train", "c1"],           # over max_text_bytes (256)
        ["q7", "score", "a", "b", "abc", "1", "train", "c1"],             # wrong_type:score_chosen
        ["q8", "score", "a", "c", "inf", "1", "train", "c1"],             # infinite: wrong_type
        ["q9", "score", "a", "d", "nan", " 2 ", "train", "c1"],           # NaN is missing; " 2 " is 2.0
        ["q10", "score", "a", "e", "1e400", "1_000", "train", "c1"],      # overflows to inf; 1_000 is float()'s
        ["q11", "split", "a", "b", "1", "1", "", "c1"],                    # empty split: invalid_split
        ["q12", "split", "a", "f", "1", "1", "../x", "c1"],
        ["q13", "dup", "a", "b", "1", "1", "train", "c1"],
        ["q13", "dup", "a", "b", "1", "1", "train", "c1"],                # the same id, the same content: kept
        ["q13", "other", "a", "b", "1", "1", "train", "c1"],              # the same id, other content: conflict
        ["q14", "dup", "a", "b", "1", "1", "train", "c1"],                # repeated content, own id
        ["q15", "unicode ＦＵＬＬ Straße 🙂", "café", "cafe\u0301", "1", "1", "train", "c1"],
        ["q16", "\u3000", "a", "b", "1", "1", "train", "c1"],            # blank in Unicode spaces only
        ["q17", "nul \x00 byte", "a", "b", "1", "1", "train", "c1"],
    ]
    if not with_ids:
        rows = [["", *row[1:]] for row in rows]
    return rows


def write_csv(path: Path, records: list[list[str]], delimiter: str = ",", header: list[str] = HEADER,
              extra: bytes = b"") -> Path:
    out = io.StringIO(newline="")
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(records)
    data = out.getvalue().encode() + extra
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    elif path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


# raw lines the writer would never write, each a record the row reader reads its own way
ODD = (b"q20,short row,a\n"                              # too few fields: malformed_csv_row
       b"q21,long row,a,b,1,1,train,c1,extra\n"          # too many
       b"\n"                                             # blank: not a record, but a line
       b"q22,\"quoted then\"text,a,b,1,1,train,c1\n"     # strict=False reads on after the quote
       b"q23,mid\"quote,a,b,1,1,train,c1\n"              # a quote inside an unquoted field is text
       b"q24,bad \xff byte,a,b,1,1,train,c1\n"           # not UTF-8: invalid_utf8
       b"q25,\"" + b"z" * 5000 + b"\",a,b,1,1,train,c1\n"  # over 16 x 256: row_too_large
       b"q26,\"open quote over\nlines,a,b,1,1,train,c1\n"
       b"q27,after,a,b,1,1,train,c1\r\n"                 # the quote above closes here
       b"q28,last line without newline,a,b,1,1,train,c1")


@pytest.mark.parametrize("name", ["h.csv", "h.csv.gz", "h.csv.zst", "h.tsv"])
def test_hostile_csv_with_ids(tmp_path, name):
    delimiter = "\t" if name.endswith(".tsv") else ","
    odd = ODD.replace(b",", b"\t") if delimiter == "\t" else ODD
    path = write_csv(tmp_path / name, hostile_records(), delimiter, extra=odd)
    assert_same_import(path, max_text_bytes=256)
    result = import_file(path, max_text_bytes=256)
    assert {"malformed_csv_row", "invalid_utf8", "row_too_large", "empty_text:prompt", "identical_responses",
            "text_too_large:chosen", "wrong_type:score_chosen", "invalid_split", "duplicate_id_conflict"} <= set(result.reasons)
    rows = {q["row"]: q["reason"] for q in result.quarantine}
    # line numbers as an editor shows them: the header is line 1, q2's record spans lines 3-4, and
    # q3's lone "\r" (the writer does not quote it) ends a line and cuts that record in two
    assert rows[4] == rows[7] == "malformed_csv_row" and rows[8] == "empty_text:prompt"
    assert rows[29] == "invalid_utf8" and rows[30] == "row_too_large"
    assert result.pairs.filter(pl.col("id") == "q23")["prompt"].to_list() == ['mid"quote']
    assert result.pairs.filter(pl.col("id") == "q9")["score_rejected"].to_list() == [2.0]


@pytest.mark.parametrize("name", ["n.csv", "n.tsv.gz"])
def test_hostile_csv_without_ids_numbers_repeats(tmp_path, name):
    delimiter = "\t" if ".tsv" in name else ","
    records = [row[1:] for row in hostile_records(with_ids=False)] * 2  # every content twice: numbered ids
    path = write_csv(tmp_path / name, records, delimiter, header=HEADER[1:])
    assert_same_import(path, max_text_bytes=256, batches=(1, 4, 13))
    ids = import_file(path, max_text_bytes=256).pairs["id"]
    assert ids.str.ends_with("-2").sum() >= 5 and ids.n_unique() == ids.len()


def test_hh_rlhf_transcripts_as_csv(tmp_path):
    turns = [["\n\nHuman: hi\n\nAssistant: a", "\n\nHuman: hi\n\nAssistant: b"],
             ["\n\nHuman: hi\n\nAssistant: a", "\n\nHuman: hi\n\nAssistant: a"],    # identical
             ["\n\nHuman: hi\n\nAssistant: a", "\n\nHuman: bye\n\nAssistant: b"],   # no shared prompt
             ["\n\nHuman: x, \"y\"\n\nAssistant: a", "\n\nHuman: x, \"y\"\n\nAssistant:a"],  # identical once split
             ["\n\nHuman: q\n\nAssistant: one", "\n\nHuman: q\n\nAssistant: two"]] * 3
    path = write_csv(tmp_path / "hh.csv", turns, header=["chosen", "rejected"])
    assert_same_import(path, batches=(1, 5, 11))
    assert import_file(path).format == "hh-rlhf"


def test_realistic_pairs_as_csv_in_uneven_batches(tmp_path):
    from bench.realistic import make_realistic_pairs

    frame = make_realistic_pairs(400, seed=2)[0]
    frame.write_csv(tmp_path / "r.csv")
    assert_same_import(tmp_path / "r.csv", batches=(97, 250))


@pytest.mark.parametrize("name", ["s.csv", "s.csv.gz"])
def test_streamed_csv_version_equals_the_one_batch_import(tmp_path, name):
    from bench.realistic import make_realistic_pairs

    frame = make_realistic_pairs(1_200, seed=4)[0]
    ids = frame["id"].to_list()
    ids[1_100] = ids[7]  # a conflict across batches
    frame = frame.with_columns(id=pl.Series(ids), split=pl.Series(["test" if i % 9 else "train" for i in range(1_200)]))
    records = [[str(v) if v is not None else "" for v in row] for row in frame.rows()]
    path = write_csv(tmp_path / name, records, header=frame.columns)
    store = Store(str(tmp_path / "store"))
    whole = import_to_store(import_file(path), "whole", store)
    result, streamed = import_file_to_store(path, "streamed", store, batch_rows=500)
    assert result.row_by_row is None
    assert len([f for f in streamed.manifest["files"] if f.startswith("data/")]) > 1
    a, b = store.get(streamed.ref), store.get(whole.ref)
    for config in b.manifest["counts"]["rows"]:
        assert_frame_equal(store.load(streamed.ref, config), store.load(whole.ref, config))
    assert a.manifest["counts"] == b.manifest["counts"] and a.manifest["schema"] == b.manifest["schema"]
    assert store.read_text(streamed.ref, "quarantine.jsonl") == store.read_text(whole.ref, "quarantine.jsonl")
    assert result.reasons == {"duplicate_id_conflict": 1, **{k: v for k, v in import_rows(path).reasons.items()
                                                           if k != "duplicate_id_conflict"}}


def test_csv_files_the_columnar_path_leaves_to_the_row_path_say_why(tmp_path):
    mixed = write_csv(tmp_path / "mixed.csv", [["a", "q", "x", "y"], ["", "q", "x", "z"]], header=HEADER[:4])
    assert "some rows have an id" in import_file(mixed).row_by_row  # a blank id is no id
    model = write_csv(tmp_path / "model.csv", [["q", "x", "y", "m"]], header=["prompt", "chosen", "rejected", "model"])
    assert "model column" in import_file(model).row_by_row
    comparisons = write_csv(tmp_path / "c.csv", [["q", "x", "y", "a"]], header=["prompt", "response_a", "response_b", "label"])
    assert import_file(comparisons).row_by_row is None  # batched too: tests/test_import_comparisons_batched.py
    for path in (mixed, model, comparisons):
        reference = import_rows(path)
        result = import_file(path)
        assert_frame_equal(result.pairs, reference.pairs) and result.quarantine == reference.quarantine


def test_a_quoted_field_that_never_closes_is_one_bounded_record(tmp_path):
    """An open quote swallows the rest of the file into one field: over the limit, it is one
    row_too_large record read past in pieces, and the rows before it are kept."""
    path = tmp_path / "open.csv"
    path.write_bytes(b"prompt,chosen,rejected\nq,a,b\nq,\"never closed\n" + b"line, of text\n" * 2000)
    for result in (import_file(path, max_text_bytes=1000), import_rows(path, max_text_bytes=1000)):
        assert (result.read, result.kept) == (2, 1)
        assert [(q["row"], q["reason"]) for q in result.quarantine] == [(3, "row_too_large")]
        assert "the record is 28016 characters, over the 16000 allowed" in result.quarantine[0]["detail"]
