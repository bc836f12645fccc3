"""A JSON file (an array of rows, `{"data": [...]}`, one object, JSON Lines saved as .json) is read
as a stream: the same rows whatever the block size, a value over the limit quarantined without
being held, a broken document one clear error (issue 22 items 1 and 2)."""

from __future__ import annotations

import gzip
import json

import pytest
from test_import_hardening import _import_with_peak

from prefdata.base.errors import UnusableInput
from prefdata.data import readers
from prefdata.data.importer import import_file, import_rows
from prefdata.data.readers import read_rows

GOOD = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}
DEEP = "[" * 500 + "]" * 500
ELEMENTS = [
    json.dumps(GOOD),
    '{"prompt": "q", "prompt": "r", "chosen": "a", "rejected": "b"}',       # duplicate_key
    DEEP,                                                                  # too_deep
    '"a string"', "12", "null", "[1, 2]",                                   # not_an_object
    '{"prompt": "lone \\ud800", "chosen": "a", "rejected": "b"}',           # invalid_utf8
    '{"prompt": "esc \\" \\\\ \\u00e9 ]}[{", "chosen": "a", "rejected": "b"}',  # brackets and escapes in text
    json.dumps({**GOOD, "chosen": "x" * 6000}),                            # row_too_large at limit 4096
    json.dumps({"prompt": "nested", "chosen": "a", "rejected": "b", "meta": {"k": [1, {"d": None}]}}),
    json.dumps({**GOOD, "rejected": "6"}),
]


def shapes(rows) -> list[tuple]:
    return [(r.number, r.error, r.data) for r in rows]


@pytest.mark.parametrize("wrapped", [False, True])
def test_the_rows_do_not_depend_on_the_block_size(tmp_path, monkeypatch, wrapped):
    array = "[\n  " + ",\n  ".join(ELEMENTS) + "\n]"
    path = tmp_path / "d.json"
    path.write_text('{"version": 1, "meta": {"a": [1, 2]}, "data": ' + array + ', "n": 3}' if wrapped else array)
    whole = shapes(read_rows(path, 4096))
    assert [e for _, e, _ in whole] == [None, "duplicate_key", "too_deep", "not_an_object", "not_an_object",
                                        "not_an_object", "not_an_object", "invalid_utf8", None, "row_too_large",
                                        None, None]
    assert whole[8][2]["prompt"] == 'esc " \\ é ]}[{'
    for block in (1, 2, 3, 7, 64, 1000):  # values cut anywhere between blocks: strings, escapes, numbers
        monkeypatch.setattr(readers._TextLines.__init__, "__defaults__", (block,))
        assert shapes(read_rows(path, 4096)) == whole, block


def test_an_import_of_a_json_array_equals_its_json_lines(tmp_path):
    rows = [GOOD, {**GOOD, "rejected": "6"}, {"prompt": "", "chosen": "a", "rejected": "b"}, GOOD]
    (tmp_path / "d.json").write_text(json.dumps(rows, indent=2))
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b = import_file(tmp_path / "d.json"), import_rows(tmp_path / "d.jsonl")
    assert a.pairs.equals(b.pairs) and [q["reason"] for q in a.quarantine] == ["empty_text:prompt"]
    assert a.row_by_row is None  # the batched path (tests/test_import_json_batched.py)


@pytest.mark.parametrize(("content", "expected"), [
    ('{"a": 1, "prompt": "q", "chosen": "x", "rejected": "y"}', [(1, None)]),             # one object: one row
    ('{"train": [' + json.dumps(GOOD) + '], "test": [' + json.dumps(GOOD) + ']}', [(1, None)]),  # two lists: one row
    ('{"data": []}', []),
    ("[]", []),
    (json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n", [(1, None), (2, None)]),         # JSON Lines as .json
])
def test_the_shapes_of_a_json_file(tmp_path, content, expected):
    path = tmp_path / "d.json"
    path.write_text(content)
    assert [(r.number, r.error) for r in read_rows(path)] == expected


@pytest.mark.parametrize(("content", "message"), [
    ("", r"not valid JSON \(Expecting value"),
    ('[{"prompt": "q"}, {"prompt": ', "not valid JSON"),
    ('[{"prompt": "q"} {"prompt": "r"}]', "expected ',' or ']' after element 1"),
    ('[{"prompt": "q"}] [1]', "more text after the array"),
    ('{"data": [], "data": []}', "repeated key 'data'"),
    ("12", "must hold an array of rows"),
    ('[{"prompt": "q", "chosen": tru}, {"a": 1}]', r"not valid JSON \(Expecting value at line 1"),
])
def test_a_broken_json_document_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UnusableInput, match=message) as info:
        list(read_rows(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["bomb.json.gz", "long.json"])
def test_a_huge_json_element_is_quarantined_without_being_held(tmp_path, name):
    """A text of 400 MB (in a few MB of gzip) or 50 MB inside an array's second element, between
    two good rows: that element is row_too_large, read past a block at a time."""
    size = (400 if name.endswith(".gz") else 50) << 20
    src = tmp_path / name
    with (gzip.open(src, "wb", compresslevel=1) if name.endswith(".gz") else open(src, "wb")) as handle:
        handle.write(b"[" + json.dumps(GOOD).encode() + b', {"prompt": "')
        block = b"a" * ((1 << 20) - 4) + b'\\"\\\\'  # escapes too: the scanner must not end the string at \\"
        for _ in range(size >> 20):
            handle.write(block)
        handle.write(b'", "chosen": "4", "rejected": "5"}, ' + json.dumps({**GOOD, "rejected": "6"}).encode() + b"]")
    done, peak = _import_with_peak(src, tmp_path / "o.jsonl")
    assert done.returncode == 0, done.stderr
    assert "read 3 = kept 2 + quarantined 1" in done.stdout
    [entry] = [json.loads(line) for line in (tmp_path / "o.quarantine.jsonl").read_text().splitlines()]
    assert entry["row"] == 2 and entry["reason"] == "row_too_large"
    assert peak < 1024, f"peak RSS {peak} MB for a {size >> 20} MB element"
