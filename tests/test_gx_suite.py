"""The GX suite on small hand-made frames: real Great Expectations runs through a Checkpoint.

Each run_expectations call costs a fraction of a second once GX is imported, so the frames are run
once per module (fixtures) and the tests read the results.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from prefdata.checks import gx_suite
from prefdata.checks.gx_suite import EMPTY_SIDE_RATIO, length_ratios, run_expectations

CATEGORIES = ["chat", "code"]
ALL_IDS = {
    "gx.not_null.id", "gx.not_null.prompt", "gx.not_null.chosen", "gx.not_null.rejected",
    "gx.unique.id", "gx.length.prompt", "gx.length.chosen", "gx.length.rejected",
    "gx.length_ratio", "gx.row_count", "gx.category_set",
}


def _frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["id", "prompt", "chosen", "rejected", "category"], orient="row")


CLEAN = _frame([
    ("p1", "What is 2+2?", "It is 4.", "It's 5.", "chat"),
    ("p2", "Write hello world", "print('hi')", "echo hi", "code"),
    ("p3", "Name a colour", "Blue", "Teal", "chat"),
])
DIRTY = _frame([
    ("ok", "What is 2+2?", "It is 4.", "It's 5.", "chat"),
    ("nullprompt", None, "Fine answer", "Fine reply", "chat"),
    ("dup", "Name a colour", "Blue", "Teal", "chat"),
    ("dup", "Name a shape", "Square", "Circle", "code"),
    ("ratio5", "Explain", "a" * 50, "b" * 10, "code"),  # 50 / 10 = 5x
    ("badcat", "Translate", "Bonjour", "Salut", "poetry"),
])


@pytest.fixture(scope="module")
def clean_results():
    return {r.id: r for r in run_expectations(CLEAN, categories=CATEGORIES)}


@pytest.fixture(scope="module")
def dirty_run(tmp_path_factory):
    docs = tmp_path_factory.mktemp("gx_docs")
    return {r.id: r for r in run_expectations(DIRTY, categories=CATEGORIES, docs_dir=docs)}, docs


def test_clean_frame_passes_every_expectation(clean_results):
    assert set(clean_results) == ALL_IDS
    assert {r.status for r in clean_results.values()} == {"pass"}
    assert all(r.offending == () for r in clean_results.values())
    assert clean_results["gx.row_count"].metric == 3.0
    assert clean_results["gx.length_ratio"].threshold == 2.0


def test_dirty_frame_fails_exactly_the_matching_expectations(dirty_run):
    results, _ = dirty_run
    failed = {cid: r.offending for cid, r in results.items() if r.status != "pass"}
    assert failed == {
        "gx.not_null.prompt": ("nullprompt",),
        "gx.unique.id": ("dup", "dup"),  # both rows sharing the id: the offending list counts rows
        "gx.length_ratio": ("ratio5",),
        "gx.category_set": ("badcat",),
    }
    assert {r.status for cid, r in results.items() if cid in failed} == {"fail"}


def test_metrics_counts_and_messages(dirty_run):
    results, _ = dirty_run
    assert results["gx.unique.id"].details["n_offending"] == 2  # both rows sharing the id
    assert all(len(r.offending) == r.details["n_offending"] for r in results.values() if "n_offending" in r.details)
    assert results["gx.unique.id"].metric == pytest.approx(2 / 6)
    assert results["gx.not_null.prompt"].metric == pytest.approx(1 / 6)
    assert results["gx.length_ratio"].metric == pytest.approx(1 / 6)
    assert results["gx.row_count"].metric == 6.0
    assert "1 of 6 rows" in results["gx.length_ratio"].message
    json.dumps([r.to_json() for r in results.values()])  # report.json must be able to carry it


def test_data_docs_written(dirty_run):
    _, docs = dirty_run
    assert (docs / "index.html").is_file()
    assert list(docs.glob("validations/**/*.html"))


def test_bounds_row_count_and_empty_sides():
    frame = _frame([
        ("long", "x" * 30, "abc", "abd", "chat"),
        ("empty_prompt", "", "abc", "abd", "chat"),
        ("empty_side", "Say nothing", "", "anything", "chat"),
    ])
    results = {r.id: r for r in run_expectations(frame, max_text_chars=20, min_rows=10)}
    assert "gx.category_set" not in results  # no categories given: no category rule
    assert results["gx.length.prompt"].offending == ("long", "empty_prompt")
    assert results["gx.length.prompt"].threshold == 20.0
    assert results["gx.length.chosen"].status == "pass"  # an empty response is allowed here...
    assert results["gx.length_ratio"].offending == ("empty_side",)  # ...the ratio rule catches it
    assert (results["gx.row_count"].status, results["gx.row_count"].metric) == ("fail", 3.0)


def test_length_ratios_in_polars():
    frame = pl.DataFrame({"chosen": ["aaaa", "", "", None, "ab"], "rejected": ["aa", "x", "", "x", "abcd"]})
    assert length_ratios(frame).to_list() == [2.0, EMPTY_SIDE_RATIO, EMPTY_SIDE_RATIO, None, 2.0]


def test_category_rule_needs_the_column():
    results = run_expectations(CLEAN.drop("category"), categories=CATEGORIES)
    assert {r.id for r in results} == ALL_IDS - {"gx.category_set"}


def test_missing_columns_and_gx_failures_become_one_error(monkeypatch):
    [missing] = run_expectations(CLEAN.drop("rejected"))
    assert (missing.id, missing.status) == ("gx", "error")
    assert "rejected" in missing.message

    def boom(*args, **kwargs):
        raise RuntimeError("conversion exploded\nsecond line of traceback noise")

    monkeypatch.setattr(gx_suite, "_to_pandas", boom)
    [error] = run_expectations(CLEAN)
    assert (error.id, error.status) == ("gx", "error")
    assert error.message == "RuntimeError: conversion exploded"


def test_gx_validates_derived_numbers_not_a_copy_of_the_text(monkeypatch):
    """GX gets lengths, ratio, id and category codes (numbers): no column of text crosses into pandas,
    and the same expectations fail on the same rows as on the text itself."""
    handed = []
    to_pandas = gx_suite._to_pandas

    def spy(*args, **kwargs):
        handed.append(to_pandas(*args, **kwargs))
        return handed[-1]

    monkeypatch.setattr(gx_suite, "_to_pandas", spy)
    results = {r.id: r for r in run_expectations(DIRTY, categories=CATEGORIES)}
    [frame] = handed
    assert len(frame) == DIRTY.height
    assert all(dtype.kind in "iufb" for dtype in frame.dtypes), frame.dtypes  # numbers only
    assert frame.index.dtype.kind in "iu"
    failed = {cid: r.offending for cid, r in results.items() if r.status != "pass"}
    assert failed == {"gx.not_null.prompt": ("nullprompt",), "gx.unique.id": ("dup", "dup"),
                      "gx.length_ratio": ("ratio5",), "gx.category_set": ("badcat",)}
    assert results["gx.unique.id"].details["n_offending"] == 2
    assert results["gx.not_null.prompt"].details["kwargs"]["column"] == "prompt_chars"


def test_null_ids_and_lengths_beyond_the_bound():
    frame = _frame([
        (None, "Hi", "abc", "abd", "chat"),
        ("big", "Hi", "y" * 25, "z" * 25, "chat"),
        ("x", "Hi", "abc", "abd", "chat"),
    ])
    results = {r.id: r for r in run_expectations(frame, max_text_chars=20)}
    assert results["gx.not_null.id"].offending == ("<null id>",)
    assert results["gx.length.chosen"].offending == ("big",) and results["gx.length.rejected"].offending == ("big",)
    assert results["gx.unique.id"].status == "pass"  # a null id is not a duplicate (GX skips nulls)


def test_prewarm_imports_gx_once_on_a_thread_and_the_suite_runs_after_it():
    """`prefdata check` starts GX's import before reading its data (gx_suite.prewarm): one thread per
    process however often it is called, the module loaded, and the suite's results as without it."""
    import subprocess
    import sys

    script = (
        "import sys, threading, polars as pl\n"
        "from prefdata.checks import gx_suite\n"
        "assert 'great_expectations' not in sys.modules\n"
        "gx_suite.prewarm(); gx_suite.prewarm()\n"
        "threads = [t for t in threading.enumerate() if t.name == 'gx-import']\n"
        "assert len(gx_suite._PREWARM) == 1 and len(threads) <= 1\n"
        "results = gx_suite.run_expectations(pl.DataFrame({'id': ['a', 'a'], 'prompt': ['p', 'q'],\n"
        "                                                  'chosen': ['x', 'y'], 'rejected': ['xx', 'yyy']}))\n"
        "assert 'great_expectations' in sys.modules and not gx_suite._PREWARM[0].is_alive()\n"
        "print(sorted((r.id, r.status, r.offending) for r in results if r.status != 'pass'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == ("[('gx.length_ratio', 'fail', ('a',)), ('gx.unique.id', 'fail', ('a', 'a'))]")
