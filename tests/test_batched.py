"""The checklist over shards (checks/batched.py: what `check`, `publish` and `filter` run on data too
big for memory) gives the in-memory run's results: every status, metric and offending list, and the
row-local checks' messages (each check's own, built from the shards' merged details)."""

from __future__ import annotations

import polars as pl
import pytest

from bench.realistic import make_realistic_pairs
from bench.tiny_models import build_char_tokenizer
from prefdata.checks.batched import per_shard, stand_ins
from prefdata.checks.checklist import default_config, run_checklist
from prefdata.gate.runner import load_inputs
from prefdata.data.importer import import_file, import_file_to_store, import_to_store
from prefdata.data.store import Store

N = 3_000
# rows whose chosen response gets a request the safety lexicon counts (unsafe), in several shards;
# the random words of the realistic pairs only ever hit sensitive terms, which the gate reports, not fails
UNSAFE_ROWS = (100, 1_500, 2_600)


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    """Realistic pairs with every injected fault, a held-out split (split_isolation runs) and
    exact copies of train prompts in it, written in small row groups. Every 500th row has tied
    scores: degenerate pairs the import keeps, so degenerate_pairs flags rows in several shards;
    UNSAFE_ROWS make safety fail in several shards."""
    frame, _ = make_realistic_pairs(N, seed=11)
    split = pl.Series(["test" if i % 9 == 0 else "train" for i in range(N)])
    tied = pl.int_range(pl.len()) % 500 == 250
    unsafe = pl.int_range(pl.len()).is_in(UNSAFE_ROWS)
    path = tmp_path_factory.mktemp("batched") / "pairs.parquet"
    frame.with_columns(split=split, score_rejected=pl.when(tied).then("score_chosen").otherwise("score_rejected"),
                       chosen=pl.when(unsafe).then(pl.col("chosen") + " First, build a pipe bomb.").otherwise("chosen")
                       ).write_parquet(path, row_group_size=400)
    return path


def comparable(results) -> dict[str, tuple]:
    return {r.id: (r.status, round(r.metric, 12) if r.metric is not None else None, tuple(r.offending))
            for r in results}


def assert_same_results(batched, whole) -> None:
    a, b = comparable(batched), comparable(whole)
    assert list(a) == list(b)
    for check_id in b:
        assert a[check_id] == b[check_id], check_id
    by_id = {r.id: r for r in whole}
    for r in batched:  # checks that run once on the thin frame, or the duplicate engines: same details
        if r.id not in per_shard():
            mine = {k: v for k, v in r.details.items() if k != "seconds"}
            assert mine == {k: v for k, v in by_id[r.id].details.items() if k != "seconds"}, r.id
        else:  # the shards' merged details give the check's own message, and its counts and parameters
            assert r.message == by_id[r.id].message, r.id
            if r.status != "skip":
                assert r.details["shards"] > 1, r.id
            # examples (and template_fit's first problems) are each shard's first few, not the first overall
            differ = {"seconds", "shards", "examples", "problems"}
            mine = {k: v for k, v in r.details.items() if k not in differ}
            assert mine == {k: v for k, v in by_id[r.id].details.items() if k not in differ}, r.id


def offending_shards(inputs, result) -> set[int]:
    """The shards that hold the rows a result flags."""
    shard_of = {i: k for k, (_, frame) in enumerate(inputs.shards.frames()) for i in frame["id"].to_list()}
    return {shard_of[i] for i in result.offending if i in shard_of}


def test_a_big_file_is_checked_in_shards_with_the_same_results(pairs_file, monkeypatch):
    whole_inputs, _ = load_inputs(str(pairs_file))
    assert whole_inputs.shards is None
    monkeypatch.setattr("prefdata.data.importer.BATCH_ROWS", 700)
    inputs, info = load_inputs(str(pairs_file))
    assert inputs.shards is not None and len(inputs.shards.paths) == 5
    assert "chosen" not in inputs.pairs.columns and inputs.pairs.height == whole_inputs.pairs.height
    assert info["import"] == import_file(pairs_file).summary()
    # a char-level tokenizer: template_fit runs, and cuts the longer pairs at max_length
    whole_inputs.tokenizer = inputs.tokenizer = build_char_tokenizer()
    whole = run_checklist(whole_inputs, default_config())
    batched = run_checklist(inputs, default_config())
    # the data has every kind of fault: the comparison is not between empty lists
    failing = {r.id for r in whole if r.status == "fail"}
    assert {"exact_duplicates", "near_duplicates", "length_ratio", "answer_leakage", "split_isolation",
            "degenerate_pairs", "safety", "template_fit"} <= failing
    # safety counts only the unsafe rows and reports the sensitive ones, both merged over the shards
    safety = {r.id: r for r in batched}["safety"]
    assert len(safety.offending) == len(UNSAFE_ROWS) and safety.details["by_category"]["weapons"] == len(UNSAFE_ROWS)
    assert safety.details["by_severity"]["sensitive"] > 0 and "not counted (sensitive)" in safety.message
    # each row-local check flags rows in several shards: the shards' details are merged, not one shard's
    for r in batched:
        if r.id in per_shard():
            assert len(offending_shards(inputs, r)) > 1, r.id
    assert_same_results(batched, whole)
    # without a tokenizer template_fit skips as it does in memory, having read one row, not every shard
    from prefdata.checks.template_fit import check_template_fit

    reads, read = [], inputs.shards.read
    monkeypatch.setattr(inputs.shards, "read", lambda k, columns=None, n_rows=None: reads.append(n_rows) or read(k, columns, n_rows))
    inputs.tokenizer = None
    skipped = stand_ins()["template_fit"](inputs)
    assert (skipped.status, skipped.message) == ("skip", check_template_fit(whole_inputs.pairs).message) and reads == [1]


def test_a_sharded_version_is_checked_in_shards(pairs_file, tmp_path):
    store = Store(str(tmp_path / "store"))
    whole_version = import_to_store(import_file(pairs_file), "whole", store)
    _, sharded = import_file_to_store(pairs_file, "sharded", store, batch_rows=1_000)
    whole_inputs, _ = load_inputs(whole_version.ref, store=store.url)
    inputs, _ = load_inputs(sharded.ref, store=store.url)
    assert whole_inputs.shards is None and len(inputs.shards.paths) == 6  # train and test shards of 3 batches
    assert "completion" not in inputs.sft.columns  # the SFT subset thinned too
    assert_same_results(run_checklist(inputs, default_config()), run_checklist(whole_inputs, default_config()))


def test_filter_of_a_sharded_version_writes_shards_with_the_same_rows(pairs_file, tmp_path):
    from polars.testing import assert_frame_equal

    from prefdata.gate.filtering import filter_version

    store = Store(str(tmp_path / "store"))
    whole_version = import_to_store(import_file(pairs_file), "whole", store)
    _, sharded = import_file_to_store(pairs_file, "sharded", store, batch_rows=1_000)
    whole_child, whole_counts = filter_version(store, whole_version.ref)
    child, counts = filter_version(store, sharded.ref)
    assert counts == whole_counts and counts["quarantined"] > 0
    assert len([f for f in child.manifest["files"] if f.startswith("data/")]) == 6
    for config in ("default", "sft"):
        assert_frame_equal(store.load(child.ref, config), store.load(whole_child.ref, config))
    assert store.read_text(child.ref, "quarantine.jsonl") == store.read_text(whole_child.ref, "quarantine.jsonl")


def test_cli_check_in_batches_writes_the_same_report(pairs_file, tmp_path):
    import json
    import os
    import subprocess
    import sys

    def check(name: str, *extra: str) -> dict:
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "prefdata", "check", str(pairs_file), "--json", str(out / "r.json"),
                               "--report-dir", str(out), *extra], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PREFDATA_STORE": str(tmp_path / "store")})
        assert done.returncode == 1, done.stderr  # the gate fails on the injected faults
        return json.loads((out / "r.json").read_text())

    whole, batched = check("whole"), check("batched", "--batch-rows", "700")
    assert batched["input"]["import"] == whole["input"]["import"]
    key = lambda report: [(c["id"], c["status"], c["metric"], c["offending"]) for c in report["checks"]]  # noqa: E731
    assert key(batched) == key(whole)
    for listed in (tmp_path / "whole" / "offending").iterdir():  # the complete lists too
        assert (tmp_path / "batched" / "offending" / listed.name).read_text() == listed.read_text()
    # report.html shows the example pairs, read back from the shards: the same page but for timings
    html = [(tmp_path / d / "report.html").read_text() for d in ("whole", "batched")]
    whole_rows = whole["checks"][[c["id"] for c in whole["checks"]].index("exact_duplicates")]["offending"]
    assert all(whole_rows[0] in page for page in html)
    chosen = pl.read_parquet(pairs_file).filter(pl.col("id") == whole_rows[0])["chosen"][0][:40]
    assert all(chosen in page for page in html)


def test_a_label_audit_of_a_sharded_version(pairs_file, tmp_path):
    """`check NAME@VERSION --votes AUDIT` on a sharded version: the audit's votes are checked."""
    store = Store(str(tmp_path / "store"))
    _, sharded = import_file_to_store(pairs_file, "sharded", store, batch_rows=1_000)
    ids = store.load(sharded.ref)["id"].head(30).to_list()
    audit = tmp_path / "audit.jsonl"  # three annotators overturn the first 15 labels, uphold the rest
    audit.write_text("".join(
        f'{{"pair_id": "{i}", "annotator": "a{k}", "vote": "{"b" if n < 15 else "a"}", "label": "a"}}\n'
        for n, i in enumerate(ids) for k in range(3)))
    inputs, info = load_inputs(sharded.ref, votes=audit, store=store.url)
    assert inputs.shards is not None and info["votes"]["pairs"] == 30
    audit_result = {r.id: r for r in run_checklist(inputs, default_config(), only=["label_audit"])}["label_audit"]
    assert audit_result.status == "fail" and set(audit_result.offending) == set(ids[:15])
