"""The columnar import gives exactly what the row-by-row reference gives: kept rows, ids, quarantine
reasons, details and row numbers (issue 11)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from prefdata.data.columnar import BATCH_ROWS, convert_columnar, digests, normalised
from prefdata.data.importer import import_file, import_rows
from prefdata.data.records import _digest, normalise_series, pair_id, prompt_id


def assert_same_import(path: Path, *, columnar_runs: bool = True, small_batches: tuple[int, ...] = (5, 1), **options) -> None:
    """The columnar import, in one batch and in batches of 5 and of 1 row (the cross-row rules carried
    from batch to batch), equals the row-by-row reference."""
    if columnar_runs:  # the file is one the columnar path takes, not one it hands back
        assert convert_columnar(path, options.get("fmt", "auto"), options.get("max_text_bytes", 1 << 20)) is not None
    reference = import_rows(path, **options)
    for batch_rows in (BATCH_ROWS, *small_batches):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("prefdata.data.columnar.BATCH_ROWS", batch_rows)
            fast = import_file(path, **options)
        assert_frame_equal(fast.pairs, reference.pairs)
        assert fast.quarantine == reference.quarantine
        assert fast.summary() == reference.summary()
        assert fast.sources == reference.sources


UNICODE = ["Straße", "STRASSE", "İstanbul", "ıi", "ＦＵＬＬ width", "café", "cafe\u0301", "ﬁne", "ΣΑΣ", "a\u3000b",
           "x\x1cy", "\u00a0lead", "emoji 🙂", "日本語のテキスト"]


def faulty_rows() -> list[dict]:
    rows = []
    for i, text in enumerate(UNICODE):  # the normaliser's hard cases, in every text field
        rows.append({"prompt": f"{text} q{i % 5}", "chosen": f"{text} good", "rejected": f"bad {i}"})
        rows.append({"prompt": f"  {text.upper()}   q{i % 5} ", "chosen": f"{text} GOOD", "rejected": f"BAD  {i}"})
    rows += [
        {"prompt": "", "chosen": "a", "rejected": "b"},                 # empty prompt
        {"prompt": "   \t", "chosen": "a", "rejected": "b"},            # blank prompt
        {"prompt": "\u3000\u2003", "chosen": "a", "rejected": "b"},     # blank in Unicode spaces only
        {"prompt": "\x1c\x1d", "chosen": "a", "rejected": "b"},         # Python's str.strip counts these
        {"prompt": "\u200b", "chosen": "a", "rejected": "b"},           # zero-width space: not blank
        {"prompt": None, "chosen": "a", "rejected": "b"},               # missing
        {"prompt": "p", "chosen": None, "rejected": "b"},
        {"prompt": "p", "chosen": "", "rejected": "b"},                 # empty response: kept
        {"prompt": "p", "chosen": "same", "rejected": "same"},          # identical
        {"prompt": "p", "chosen": "Same", "rejected": "same"},          # differ in case only: kept
        {"prompt": "p", "chosen": "x" * 3000, "rejected": "b"},         # too large (max_text_bytes 2048)
        {"prompt": "p", "chosen": "é" * 1500, "rejected": "b"},         # 3000 bytes in 1500 characters
        {"prompt": "p", "chosen": "a", "rejected": "b", "split": "../x"},
        {"prompt": "p", "chosen": "a", "rejected": "c", "split": "train\n"},  # Python's `$` lets this pass
        {"prompt": "p", "chosen": "a", "rejected": "d", "split": "test"},
        {"prompt": "p", "chosen": "a", "rejected": "e", "score_chosen": float("inf")},
        {"prompt": "p", "chosen": "a", "rejected": "f", "score_chosen": float("nan"), "score_rejected": 2.0},
    ]
    rows += [{"prompt": "dup", "chosen": "a", "rejected": "b"}] * 3  # repeats: numbered ids
    rows += [{"prompt": "DUP ", "chosen": "A", "rejected": "b"}]     # the same pair after normalising
    return rows


def write(rows: list[dict], path: Path, **columns) -> Path:
    frame = pl.DataFrame(rows, schema={"prompt": pl.String, "chosen": pl.String, "rejected": pl.String,
                                       "split": pl.String, "score_chosen": pl.Float64, "score_rejected": pl.Float64})
    frame.with_columns(**{k: pl.Series(v) for k, v in columns.items()}).write_parquet(path)
    return path


@pytest.mark.parametrize("chunk", [100_000, 7])
def test_faults_without_ids(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr("prefdata.data.columnar.ID_CHUNK", chunk)  # 7: ids computed over many slices
    rows = faulty_rows()
    path = write(rows, tmp_path / "faults.parquet", category=[f"c{i % 3}" if i % 4 else None for i in range(len(rows))])
    assert_same_import(path, max_text_bytes=2048)
    result = import_file(path, max_text_bytes=2048)
    assert set(result.reasons) == {"empty_text:prompt", "missing_field:prompt", "missing_field:chosen",
                                   "identical_responses", "text_too_large:chosen", "invalid_split",
                                   "wrong_type:score_chosen"}
    ids = result.pairs["id"].to_list()
    base = pair_id("dup", "a", "b")
    assert ids[-4:] == [base, f"{base}-2", f"{base}-3", f"{base}-4"]


def test_faults_with_source_ids_repeats_and_conflicts(tmp_path):
    rows = faulty_rows()
    ids = [f"r{i}" for i in range(len(rows))]
    ids[3] = ids[1]          # same id, other content: conflict
    ids[-1] = ids[-2]        # same id, the same content after normalising but not as written: conflict
    ids[-3] = ids[-4]        # same id, same content: both kept
    path = write(rows, tmp_path / "ids.parquet", id=ids)
    assert_same_import(path, max_text_bytes=2048)
    assert import_file(path, max_text_bytes=2048).reasons["duplicate_id_conflict"] == 2


def test_integer_ids_and_a_blank_id_fall_back_or_match(tmp_path):
    rows = [{"prompt": f"q{i}", "chosen": "a", "rejected": f"b{i}"} for i in range(4)]
    assert_same_import(write(rows, tmp_path / "int.parquet", id=[10, 11, 11, 12]))
    # a blank id is no id: with others present the row path settles it (the columnar path steps aside)
    mixed = write(rows, tmp_path / "mixed.parquet", id=["a", " ", "c", "d"])
    assert convert_columnar(mixed, "auto", 1 << 20) is None
    assert_same_import(mixed, columnar_runs=False)


def test_wrong_type_columns(tmp_path):
    pl.DataFrame({"prompt": ["a", "b"], "chosen": [1, None], "rejected": ["x", "y"],
                  "score_chosen": [1, 2]}).write_parquet(tmp_path / "ints.parquet")
    assert_same_import(tmp_path / "ints.parquet")
    assert import_file(tmp_path / "ints.parquet").reasons == {"wrong_type:chosen": 1, "missing_field:chosen": 1}


def test_hh_rlhf_and_pandalm_pairs_as_trl_parquet(tmp_path, shared_data):
    """Real text (HH's red-team dialogues, PandaLM's multilingual answers) through both paths."""
    hh = import_rows(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")
    hh.pairs.select("prompt", "chosen", "rejected").write_parquet(tmp_path / "hh.parquet")
    assert_same_import(tmp_path / "hh.parquet", small_batches=(997,))  # real files: a few batches
    pandalm = import_rows(shared_data / "pandalm" / "testset-v1.json")
    pandalm.pairs.select("id", "prompt", "chosen", "rejected", "chosen_model", "rejected_model") \
        .write_parquet(tmp_path / "pandalm.parquet")
    assert_same_import(tmp_path / "pandalm.parquet", small_batches=(333,))
    # and the ids are the ones the row path gave the original files
    assert import_file(tmp_path / "hh.parquet").pairs["pair_id"].to_list() == hh.pairs["pair_id"].to_list()


def test_hh_rlhf_transcripts_as_parquet(tmp_path, shared_data):
    rows = [json.loads(line) for line in gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt")]
    rows += [
        {"chosen": "\n\nHuman: hi\n\nAssistant: a", "rejected": "\n\nHuman: hi\n\nAssistant: a"},   # identical
        {"chosen": "\n\nHuman: hi\n\nAssistant: a", "rejected": "\n\nHuman: bye\n\nAssistant: b"},  # no shared prompt
        {"chosen": "\n\nHuman: hi\n\nAssistant: a", "rejected": "\n\nHuman: hi\n\nAssistant:a"},   # identical once split
        {"chosen": "  ", "rejected": "\n\nHuman: hi\n\nAssistant: b"},                               # blank transcript
        {"chosen": None, "rejected": "\n\nHuman: hi\n\nAssistant: b"},
    ]
    pl.DataFrame(rows, schema={"chosen": pl.String, "rejected": pl.String}).write_parquet(tmp_path / "hh.parquet")
    assert_same_import(tmp_path / "hh.parquet", small_batches=(997, 41))  # dozens of batches: rules carried across
    result = import_file(tmp_path / "hh.parquet")
    assert result.format == "hh-rlhf" and result.kept == 2312
    assert result.reasons == {"identical_responses": 2, "hh_no_shared_prompt": 1, "empty_text:chosen": 1,
                              "missing_field:chosen": 1}


def test_files_the_columnar_path_leaves_to_the_row_path(tmp_path, shared_data):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b", "model": "m"}]
    pl.DataFrame(rows).write_parquet(tmp_path / "model.parquet")
    (tmp_path / "d.parquet.gz").write_bytes(gzip.compress((tmp_path / "model.parquet").read_bytes()))
    (tmp_path / "d.jsonl").write_text(json.dumps(rows[0]) + "\n")
    for name in ("model.parquet", "d.parquet.gz", "d.jsonl"):
        assert convert_columnar(tmp_path / name, "auto", 1 << 20) is None
        assert_same_import(tmp_path / name, columnar_runs=False)


def test_bad_utf8_in_a_parquet_text_column_goes_row_by_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    chosen = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(b"\0\0\0\0\1\0\0\0\3\0\0\0\4\0\0\0"),
                                                    pa.py_buffer(b"x\xffyz")])
    pq.write_table(pa.table({"prompt": ["a", "b", "c"], "chosen": chosen, "rejected": ["r", "s", "t"]}),
                   tmp_path / "bad.parquet")
    assert convert_columnar(tmp_path / "bad.parquet", "auto", 1 << 20) is None  # polars refuses the column
    assert_same_import(tmp_path / "bad.parquet", columnar_runs=False)
    assert import_file(tmp_path / "bad.parquet").reasons == {"invalid_utf8": 1}


def test_vectorised_digests_are_records_digests():
    texts = pl.Series(["", "a", "é", "日本", "x" * 10_000])
    assert digests(texts).to_list() == [_digest(t) for t in texts]
    assert digests(texts, texts.reverse()).to_list() == [_digest(a, b) for a, b in zip(texts, texts.reverse())]
    assert digests(pl.Series(["2+2?"])).to_list() == [prompt_id("2+2?")]  # already normal text


def test_normalised_once_per_run_is_normalise_series():
    # runs of repeats (adjacent), repeats apart, nulls first and in a row, a slice, and nothing
    texts = pl.Series([None, None, "A  b", "A  b", "a b", "Straße", None, "A  b", "ＡＢ", "ＡＢ", "", ""])
    for part in (texts, texts.slice(1, 9), texts.slice(3, 1), texts.slice(0, 0), texts.reverse()):
        assert normalised(part).to_list() == normalise_series(part).to_list()


def test_vectorised_digests_on_slices_nulls_and_both_threads():
    # enough rows for the two hashing threads; a slice (Arrow offset), nulls hashed as ""; none at all
    texts = pl.Series(["", "a", None, "é" * 1500, "日本", "x" * 3000] * 4000)
    part = texts.slice(5, 20_001)
    assert digests(part, part.reverse()).to_list() == [_digest(a or "", b or "") for a, b in zip(part, part.reverse())]
    assert digests(pl.Series([], dtype=pl.String)).to_list() == []


def test_votes_with_a_columnar_import(tmp_path):
    rows = [{"id": "p1", "prompt": "q", "chosen": "a", "rejected": "b"}]
    pl.DataFrame(rows).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "v.csv").write_text("pair_id,annotator,vote\np1,ann,a\nnope,ann,b\n")
    fast = import_file(tmp_path / "d.parquet", votes=tmp_path / "v.csv")
    reference = import_rows(tmp_path / "d.parquet", votes=tmp_path / "v.csv")
    assert fast.quarantine == reference.quarantine and fast.summary() == reference.summary()
    assert_frame_equal(fast.votes, reference.votes)


@pytest.mark.parametrize("fmt", ["trl", "auto"])
def test_forced_format(tmp_path, fmt):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}]
    pl.DataFrame(rows).write_parquet(tmp_path / "d.parquet")
    assert_same_import(tmp_path / "d.parquet", fmt=fmt)


@pytest.mark.parametrize(("column", "values", "dtype"), [
    ("score_chosen", [1.1, float("inf")], pl.Float32),
    ("score_chosen", [2**63 + 1, 3], pl.UInt64),      # floats as Python's float(int) rounds them
    ("score_chosen", [None, None], pl.Null),
    ("category", [1, None], pl.Int8),                 # an integer category is its decimal text
    ("prompt", [1.5, None], pl.Decimal(5, 2)),        # not text: wrong_type / missing
    ("score_chosen", [1.5, None], pl.Decimal(5, 2)),  # left to the row path (parse_score refuses Decimal)
])
def test_column_types(tmp_path, column, values, dtype):
    from decimal import Decimal

    if dtype == pl.Decimal(5, 2):
        values = [None if v is None else Decimal(str(v)) for v in values]
    frame = pl.DataFrame({"prompt": ["a", "b"], "chosen": ["x", "y"], "rejected": ["r", "s"]})
    frame.with_columns(pl.Series(column, values, dtype=dtype)).write_parquet(tmp_path / "t.parquet")
    assert_same_import(tmp_path / "t.parquet", columnar_runs=not (column == "score_chosen" and dtype == pl.Decimal(5, 2)))


# -- JSON Lines: the same import, a batch of lines at a time (prefdata.data.ndjson) ------------------

def write_jsonl(rows: list[dict], path: Path, **columns) -> Path:
    for name, values in columns.items():
        rows = [{**row, name: value} for row, value in zip(rows, values)]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    path.write_bytes(compressed(text.encode(), path))
    return path


def compressed(data: bytes, path: Path) -> bytes:
    """`data` as the name says: gzip (.gz), zstd (.zst; two frames, as `zstd -c a b` writes) or plain."""
    if path.suffix == ".gz":
        return gzip.compress(data, mtime=0)
    if path.suffix == ".zst":
        import zstandard

        half = len(data) // 2
        return b"".join(zstandard.ZstdCompressor(write_checksum=True).compress(part) for part in (data[:half], data[half:]))
    return data


@pytest.mark.parametrize("name", ["faults.jsonl", "faults.jsonl.gz", "faults.jsonl.zst"])
def test_jsonl_faults_without_ids(tmp_path, name):
    rows = faulty_rows()
    path = write_jsonl(rows, tmp_path / name, category=[f"c{i % 3}" if i % 4 else None for i in range(len(rows))])
    assert_same_import(path, max_text_bytes=2048)
    assert import_file(path, max_text_bytes=2048).reasons["wrong_type:score_chosen"] == 1  # Infinity


def test_jsonl_faults_with_source_ids_repeats_and_conflicts(tmp_path):
    rows = faulty_rows()
    ids = [f"r{i}" for i in range(len(rows))]
    ids[3], ids[-1], ids[-3] = ids[1], ids[-2], ids[-4]
    path = write_jsonl(rows, tmp_path / "ids.jsonl", id=ids)
    assert_same_import(path, max_text_bytes=2048)
    assert import_file(path, max_text_bytes=2048).reasons["duplicate_id_conflict"] == 2


# Lines polars would read differently from the row reader, each beside an ordinary one.
ODD_LINES = [
    "",                                                                   # blank: not a row
    "   \t ",                                                             # blank too
    'not json',                                                           # invalid_json
    '[1, 2]',                                                             # not_an_object
    '"a string"',
    '{"prompt": "q", "chosen": "a", "rejected": "b"} trailing',           # extra data
    '{"prompt": "q", "prompt": "r", "chosen": "a", "rejected": "b"}',     # duplicate_key
    '{"prompt": "lone \\ud800", "chosen": "a", "rejected": "b"}',         # a lone surrogate
    '{"prompt": "pair \\ud83d\\ude00", "chosen": "a", "rejected": "b"}',  # a surrogate pair: fine
    '{"prompt": 5, "chosen": "a", "rejected": "b"}',                      # a number as text
    '{"prompt": true, "chosen": "a", "rejected": "b"}',
    '{"prompt": {"x": 1}, "chosen": "a", "rejected": "b"}',
    '{"prompt": null, "chosen": "a", "rejected": "b"}',
    '{"prompt": "s", "chosen": "a", "rejected": "b", "score_chosen": "1.5"}',  # a score as text
    '{"prompt": "n", "chosen": "a", "rejected": "b", "score_chosen": NaN}',
    '{"prompt": "u", "chosen": "a", "rejected": "b", "score_chosen": true, "score_rejected": [1]}',
    '{"prompt": "t", "chosen": "a", "rejected": "b", "split": null, "score_rejected": null}',
    '{"pr\\u006fmpt": "escaped key", "chosen": "a", "rejected": "b"}',
    '{"prompt": "quotes JSON: {\\"prompt\\": 5}", "chosen": "a", "rejected": "b"}',
    '{"prompt": "x" , "chosen" : "spaced" ,"rejected":"b"}',
    '{}',
    '{"chosen": "a", "rejected": "b"}',                                   # missing_field:prompt
    '{"prompt": "big", "chosen": "' + "y" * 5000 + '", "rejected": "b"}',  # row_too_large at 256 text bytes
    '{"prompt": "crlf", "chosen": "a", "rejected": "b"}\r',
]


@pytest.mark.parametrize("name", ["odd.jsonl", "odd.jsonl.gz", "odd.jsonl.zst"])
def test_jsonl_lines_polars_reads_differently_go_through_the_row_reader(tmp_path, name):
    lines = []
    for i, odd in enumerate(ODD_LINES):
        lines += [odd, json.dumps({"prompt": f"q{i}", "chosen": "a", "rejected": f"b{i}", "split": "train"})]
    text = ("\ufeff" + "\n".join(lines)).encode()[:-1] + b"\xff\n" + b'{"prompt": "last", "chosen": "a", "rejected": "b"}'
    path = tmp_path / name
    path.write_bytes(compressed(text, path))
    assert_same_import(path, max_text_bytes=256, small_batches=(7, 2, 1))
    reasons = import_file(path, max_text_bytes=256).reasons
    for reason in ("invalid_json", "not_an_object", "duplicate_key", "invalid_utf8", "row_too_large",
                   "wrong_type:prompt", "missing_field:prompt"):
        assert reason in reasons, reason


def test_jsonl_real_files_through_both_paths(tmp_path, shared_data):
    """HH-RLHF as it ships (.jsonl.gz, transcripts), and as TRL pairs, in a few batches."""
    assert_same_import(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", small_batches=(997,))
    hh = import_rows(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")
    write_jsonl(hh.pairs.select("prompt", "chosen", "rejected").to_dicts(), tmp_path / "pairs.jsonl")
    assert_same_import(tmp_path / "pairs.jsonl", small_batches=(333,))


def test_jsonl_nested_values_go_through_the_row_reader_and_model_columns_to_the_row_path(tmp_path):
    nested = write_jsonl([{"prompt": "q", "chosen": "a", "rejected": "b", "meta": {"k": [1]}},
                          {"prompt": "r", "chosen": "a", "rejected": "b", "meta": None}], tmp_path / "n.jsonl")
    assert_same_import(nested)  # the line with an object is read by the row reader, in its place
    named = write_jsonl([{"prompt": "q", "chosen": "a", "rejected": "b", "model": "m"}], tmp_path / "m.jsonl")
    assert convert_columnar(named, "auto", 1 << 20) is None  # `model` names both sides: the row path's rule
    assert_same_import(named, columnar_runs=False)


def test_a_file_imported_row_by_row_says_why(tmp_path):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}]
    parquet = write(rows, tmp_path / "d.parquet")
    (tmp_path / "d.parquet.gz").write_bytes(gzip.compress(parquet.read_bytes()))
    assert "not a compressed Parquet file" in import_file(tmp_path / "d.parquet.gz").row_by_row
    named = write_jsonl([{**rows[0], "model": "m"}], tmp_path / "m.jsonl")
    assert "model column" in import_file(named).row_by_row
    mixed = write(rows * 2, tmp_path / "mixed.parquet", id=["a", None])
    assert "some rows have an id" in import_file(mixed).row_by_row
    assert import_file(write_jsonl(rows, tmp_path / "fast.jsonl")).row_by_row is None


# -- trl-chat: every row through the reference converter, a batch at a time --------------------------

def chat_rows() -> list[dict]:
    user = {"role": "user", "content": "What is 2+2?"}

    def said(text: str) -> list[dict]:
        return [{"role": "assistant", "content": text}]

    rows = [
        {"prompt": [user], "chosen": said("4"), "rejected": said("5")},
        {"chosen": [user, *said("4")], "rejected": [user, *said("5")]},                     # implicit prompt
        {"prompt": "What is 2+2?", "chosen": [user, *said("4")], "rejected": [user, *said("6")],
         "score_chosen": 9, "score_rejected": None, "category": "math"},                     # text prompt, whole conversations
        {"prompt": [user], "chosen": "4", "rejected": said("5")},                          # wrong_type:chosen
        {"prompt": [user], "chosen": said("same"), "rejected": said("same")},              # identical
        {"chosen": said("a"), "rejected": said("b")},                                      # no prompt, nothing shared
        {"prompt": [{"role": "user", "content": "   "}], "chosen": said("a"), "rejected": said("b")},  # blank prompt
        {"prompt": [user], "chosen": [{"role": "assistant"}], "rejected": said("5")},     # a message without content
        {"prompt": [user], "chosen": said("x" * 3000), "rejected": said("5")},           # too large at 2048
        {"prompt": [user], "chosen": said("4"), "rejected": said("5")},                    # a repeat: numbered id
        {"prompt": [user], "chosen": said("4"), "rejected": said("5"), "split": "../x"},
    ]
    return rows * 2


@pytest.mark.parametrize("name", ["chat.jsonl", "chat.jsonl.gz"])
def test_trl_chat_jsonl_in_batches(tmp_path, name):
    path = write_jsonl(chat_rows(), tmp_path / name)
    assert_same_import(path, max_text_bytes=2048, small_batches=(7, 3, 1))
    result = import_file(path, max_text_bytes=2048)
    assert result.format == "trl-chat" and result.row_by_row is None
    assert {"wrong_type:chosen", "identical_responses", "missing_field:prompt", "empty_text:prompt",
            "text_too_large:chosen", "invalid_split"} <= set(result.reasons)
    assert "prompt_messages" in result.pairs.columns


def test_trl_chat_jsonl_streamed_into_the_store(tmp_path):
    from prefdata.data.importer import import_file_to_store, import_to_store
    from prefdata.data.store import Store

    # (not the row whose split is refused: a streamed version's shards keep a column only quarantined rows give)
    path = write_jsonl([r for r in chat_rows() if "split" not in r] * 5, tmp_path / "chat.jsonl")
    store = Store(str(tmp_path / "store"))
    whole = import_to_store(import_file(path), "whole", store)
    result, streamed = import_file_to_store(path, "streamed", store, batch_rows=9)
    assert result.row_by_row is None and len([f for f in streamed.manifest["files"] if f.startswith("data/")]) > 1
    for config in store.get(whole.ref).manifest["counts"]["rows"]:
        assert_frame_equal(store.load(streamed.ref, config), store.load(whole.ref, config))
    assert store.read_text(streamed.ref, "quarantine.jsonl") == store.read_text(whole.ref, "quarantine.jsonl")


@pytest.mark.parametrize("name", ["flat.parquet", "flat.csv"])
def test_trl_chat_forced_on_flat_files(tmp_path, name):
    """--format trl-chat on text columns: every row is the converter's wrong_type, in every batch."""
    frame = pl.DataFrame({"prompt": ["q", "r", "s"], "chosen": ["a", "b", "c"], "rejected": ["x", "y", "z"],
                          "category": ["k", None, "m"]})
    path = tmp_path / name
    frame.write_parquet(path) if name.endswith(".parquet") else frame.write_csv(path)
    assert_same_import(path, fmt="trl-chat", small_batches=(2, 1))
    assert import_file(path, fmt="trl-chat").reasons == {"wrong_type:chosen": 3}


def test_trl_chat_with_a_model_column_goes_row_by_row_and_says_why(tmp_path):
    rows = [{**row, "model": "m"} for row in chat_rows()[:3]]
    path = write_jsonl(rows, tmp_path / "m.jsonl")
    result, reference = import_file(path), import_rows(path)
    assert "model column" in result.row_by_row
    assert_frame_equal(result.pairs, reference.pairs)
