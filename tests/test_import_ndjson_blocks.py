"""JSON Lines read a block at a time (prefdata.data.ndjson): a block after the first is parsed with
the columns polars inferred before it, and whatever that declaration cannot hold (a column that
appears later, a key written only as null, a value of another type) gives the same import as the
row-by-row reference. Small blocks put every such change at a block's edge."""

from __future__ import annotations

import json

import pytest
from test_import_columnar import ODD_LINES, assert_same_import, faulty_rows

from prefdata.data import columnar, ndjson
from prefdata.data.importer import import_file, import_rows

BLOCKS = (64, 700, 1 << 20)  # a line or two a block, several lines a block, the whole file


def write_lines(path, rows: list) -> None:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


def same_in_blocks(path, **options) -> None:
    for block in BLOCKS:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ndjson, "BLOCK_BYTES", block)
            assert_same_import(path, small_batches=(3,), **options)


def pair(i: int, **extra) -> dict:
    return {"prompt": f"question {i}", "chosen": f"good {i}", "rejected": f"bad {i}", **extra}


def test_columns_that_change_from_block_to_block(tmp_path):
    rows = [pair(i, category="news", score_chosen=7) for i in range(8)]       # integer scores, text categories
    rows += [pair(i, category=5, score_chosen=7.5) for i in range(8, 12)]     # a number as category; a fraction
    rows += [pair(12, category=None, split="test"), pair(13, score_rejected=None)]  # keys first seen later
    rows += [pair(14, category=3, prompt=""), pair(15, score_chosen=8, prompt="")]  # quarantined: raw as written
    rows += [pair(16, source="web", model_a=None), pair(17, rejected_model=4)]
    path = tmp_path / "changing.jsonl"
    write_lines(path, rows)
    same_in_blocks(path)
    raw = {q["row"]: q["raw"] for q in import_rows(path).quarantine}
    assert raw[15]["category"] == 3 and raw[16]["score_chosen"] == 8  # what the columnar path must show too


def test_faulty_and_odd_lines_in_small_blocks(tmp_path):
    path = tmp_path / "faults.jsonl"
    write_lines(path, faulty_rows())
    same_in_blocks(path, max_text_bytes=2048)
    lines = []
    for i, odd in enumerate(ODD_LINES):
        lines += [odd, json.dumps(pair(i, split="train"))]
    odd_path = tmp_path / "odd.jsonl"
    write_lines(odd_path, lines)
    same_in_blocks(odd_path, max_text_bytes=256)
    assert "duplicate_key" in import_file(odd_path, max_text_bytes=256).reasons


def test_a_declared_column_the_block_leaves_out_is_not_a_column(tmp_path):
    """A column the block before had and this block never writes is absent, as inference leaves it;
    one this block writes only as null is there with no type."""
    rows = [pair(i, category="a") for i in range(6)] + [pair(i) for i in range(6, 30)]
    rows += [pair(30, category=None)]
    path = tmp_path / "absent.jsonl"
    write_lines(path, rows)
    inferred = []  # the blocks polars had to infer the columns of: the first, and the last (a new key)
    learn = ndjson._Declared.learn
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ndjson, "BLOCK_BYTES", 400)
        patch.setattr(ndjson._Declared, "learn", lambda self, frame: inferred.append(frame.height) or learn(self, frame))
        frames = [frame for frame, _ in ndjson.batches(path, 1, 1 << 20, ("prompt", "chosen", "rejected"), ())]
    assert len(inferred) == 1  # the others were read with the columns declared (category null: one of them)
    columns = [set(f.columns) - {"__row"} for f in frames]
    assert columns[0] == {"prompt", "chosen", "rejected", "category"}
    assert columns[24] == {"prompt", "chosen", "rejected"}  # a block of lines 20-29 or so
    assert "category" in columns[30] and frames[30]["category"].dtype == ndjson.pl.Null
    same_in_blocks(path)


@pytest.mark.parametrize("batch_lines", [1, 2, 3, 5, 100])
@pytest.mark.parametrize("block", BLOCKS)
def test_lines_read_say_when_the_file_ends_and_count_as_count_lines(tmp_path, monkeypatch, batch_lines, block):
    """ndjson.batches reports, with each batch, the lines read and whether the file ends there: the
    columnar import counts lines apart only when it does not end in the first batch. Blank lines, a
    last line without a newline and a line over the limit count as count_lines counts them."""
    monkeypatch.setattr(ndjson, "BLOCK_BYTES", block)
    rows = [json.dumps(pair(i)) for i in range(4)]
    bodies = {
        "plain": "\n".join(rows) + "\n",
        "no last newline": "\n".join(rows),
        "blank lines": "\n" + rows[0] + "\n\n" + "\n".join(rows[1:]) + "\n\n",
        "a long line": rows[0] + "\n" + json.dumps(pair(9, source="x" * 3000)) + "\n" + rows[1] + "\n",
        "empty": "",
    }
    for name, body in bodies.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(body)
        total = ndjson.count_lines(path)
        read = ndjson.LinesRead()
        seen = []
        for _ in ndjson.batches(path, batch_lines, 1000, ("prompt", "chosen", "rejected"), (), read):
            seen.append((read.lines, read.ended))
        assert read.ended and read.lines == total, name
        assert [ended for _, ended in seen] == [False] * (len(seen) - 1) + [True] * bool(seen), name
        assert len(seen) == -(-total // batch_lines), name
        assert all(lines == min(k * batch_lines, total) for k, (lines, _) in enumerate(seen, 1)), name


@pytest.mark.parametrize("id_chunk", [1, 3, 100_000])
def test_ids_computed_while_the_blocks_parse_are_the_reference_ids(tmp_path, monkeypatch, id_chunk):
    """The import computes each block's ids on a worker while the next block parses
    (columnar._IdsAhead), sending them ID_CHUNK rows at a time: with batches that end inside a block,
    rows a batch moves to the row reader (a column typed differently in two blocks) and rows the
    converter quarantines, the ids are the reference's."""
    monkeypatch.setattr(columnar, "ID_CHUNK", id_chunk)
    taken = []  # the batches' ids, as the worker gave them
    take = columnar._IdsAhead.take
    monkeypatch.setattr(columnar._IdsAhead, "take", lambda self, rows: taken.append(take(self, rows)) or taken[-1])
    rows = [pair(i, category="news", score_chosen=7) for i in range(8)]
    rows += [pair(i, category=5, score_chosen=7.5) for i in range(8, 12)]  # a line a block: rows 9-12 are moved
    rows += [pair(i, category="news", score_chosen=7) for i in range(12, 18)] + faulty_rows()[:12]
    rows += [pair(9, prompt=""), pair(10, chosen="same", rejected="same"), pair(11)]
    path = tmp_path / "ahead.jsonl"
    write_lines(path, rows)
    same_in_blocks(path)
    assert taken  # the import used them
