"""Filtering flagged rows into a child version: nothing dropped silently, lineage kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.gate.filtering import filter_version
from prefdata.data.importer import import_file, import_to_store
from prefdata.data.store import Store

REPO = Path(__file__).resolve().parents[1]


def test_filter_hh_sample_then_publish_with_stated_waivers(store_root, shared_data):
    from prefdata.checks.checklist import load_config
    from prefdata.gate.runner import load_inputs, run_gate

    store = Store()
    result = import_file(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")
    card = (REPO / "docs" / "examples" / "hh-harmless-card.md").read_text()
    parent = import_to_store(result, "hh", store, guidelines=card)
    child, counts = filter_version(store, parent.ref)
    assert counts["read"] == 2312 == counts["kept"] + counts["quarantined"]
    quarantined = [json.loads(line) for line in store.read_text(child.ref, "quarantine.jsonl").splitlines()]
    assert len(quarantined) == counts["quarantined"] > 0
    assert {q["reason"] for q in quarantined} <= {"check:length_ratio", "check:near_duplicates",
                                                 "check:exact_duplicates", "check:degenerate_pairs"}
    assert child.manifest["lineage"]["parent"] == parent.ref
    assert child.manifest["lineage"]["sources"][0]["sha256"] == result.sources[0]["sha256"]
    kept = store.load(child.ref)
    assert kept.height == counts["kept"] and not set(kept["id"]) & {q["id"] for q in quarantined}
    # each dropped row is in the quarantine whole, as the parent holds it (they wait on disk meanwhile)
    parent_rows = {row["id"]: row for row in store.load(parent.ref).iter_rows(named=True)}
    assert all(q["raw"] == json.loads(json.dumps(parent_rows[q["id"]])) for q in quarantined)
    assert counts["reasons"] == {r: sum(q["reason"] == r for q in quarantined) for r in counts["reasons"]}
    assert store.verify(child.ref) == []

    config = load_config(REPO / "docs" / "examples" / "hh-sample-checklist.yaml")
    inputs, _ = load_inputs(child.ref)
    outcome = run_gate(inputs, config)
    assert outcome.passed, [(r.id, r.message) for r in outcome.results if r.status == "fail"]
    assert {r.id for r in outcome.results if r.details.get("waived")} == {"min_size", "safety", "answer_leakage"}


def test_filter_refuses_checks_that_do_not_name_rows(store_root):
    store = Store()
    with pytest.raises(UnusableInput, match="cannot filter on min_size"):
        filter_version(store, "anything@latest", drop=("min_size",))


# -- rows that repeat their own id ----------------------------------------------------------------
# The import keeps exact copies that share an id; filter must drop the copies and keep the first.
COPIES = {"r10": 3, "r20": 2}  # id -> how many times the row stands in the file


def _rows_with_copies() -> list[dict]:
    rows = []
    for i in range(60):
        row = {"id": f"r{i}", "prompt": f"What is {i} times three?", "chosen": f"It is {3 * i}, since {i} + {i} + {i}.",
               "rejected": f"It is {3 * i + 1}, I think."}
        rows += [row] * COPIES.get(row["id"], 1)
    return rows


@pytest.mark.parametrize("batch_rows", [None, 7])
def test_filter_drops_the_copies_of_a_row_that_repeats_its_id_and_keeps_the_first(store_root, tmp_path, batch_rows):
    import polars as pl

    rows = _rows_with_copies()
    src = tmp_path / "copies.parquet"
    pl.DataFrame(rows).write_parquet(src)
    store = Store()
    if batch_rows is None:
        parent = import_to_store(import_file(src), "copies", store)
    else:  # a big import's shards, 7 rows each: r10's copies stand in two shards
        from prefdata.commands.cli import main

        with pytest.raises(SystemExit) as done:
            main(["import", str(src), "--name", "copies", "--batch-rows", str(batch_rows)])
        assert done.value.code == 0
        parent = store.get("copies")
        assert sum(f.startswith("data/") for f in parent.manifest["files"]) > 1
    assert store.load(parent.ref).height == len(rows) == 63

    child, counts = filter_version(store, parent.ref, ("exact_duplicates",))
    assert (counts["read"], counts["kept"], counts["quarantined"]) == (63, 60, 3)
    kept = store.load(child.ref)
    assert sorted(kept["id"].to_list()) == sorted(f"r{i}" for i in range(60))
    quarantined = [json.loads(line) for line in store.read_text(child.ref, "quarantine.jsonl").splitlines()]
    # each dropped row named by its own place in the parent: r10 stands at rows 11-13, r20 at 23-24
    assert [(q["id"], q["row"], q["reason"]) for q in quarantined] == [
        ("r10", 12, "check:exact_duplicates"), ("r10", 13, "check:exact_duplicates"),
        ("r20", 24, "check:exact_duplicates")]


def test_filter_drops_every_copy_of_a_pair_a_row_check_flags(store_root, tmp_path):
    rows = _rows_with_copies()
    rows = [{**r, "chosen": r["chosen"] * 12} if r["id"] == "r10" else r for r in rows]  # every copy fails length_ratio
    src = tmp_path / "copies.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = Store()
    parent = import_to_store(import_file(src), "copies", store)
    child, counts = filter_version(store, parent.ref, ("exact_duplicates", "length_ratio"))
    assert (counts["read"], counts["kept"], counts["quarantined"]) == (63, 59, 4)
    quarantined = [json.loads(line) for line in store.read_text(child.ref, "quarantine.jsonl").splitlines()]
    # r10's first copy goes too, for its length; length_ratio (item 3) comes before exact_duplicates
    # in the checklist, and the first check that flags a row names its reason
    assert sorted((q["row"], q["reason"]) for q in quarantined) == [
        (11, "check:length_ratio"), (12, "check:length_ratio"), (13, "check:length_ratio"),
        (24, "check:exact_duplicates")]
    assert "r10" not in store.load(child.ref)["id"].to_list()


def test_a_filtered_version_keeps_the_rendering_its_prompts_were_sampled_with(store_root):
    """`train` compares a version's recorded rendering with its base model's (prefdata.models.chat): a
    child written by filter must carry its parent's, or filtering would drop that protection."""
    import polars as pl

    from prefdata.data.store import tables_for

    store = Store()
    rendering = {"chat": True, "template_sha256": "ab" * 32, "system": "Be brief."}
    pairs = pl.DataFrame({"id": ["a", "b", "c"], "prompt": ["p1", "p1", "p2"], "chosen": ["x", "x", "y"],
                          "rejected": ["z", "z", "w"]})
    parent = store.create("sampled", tables_for(pairs), counts={"read": 3, "kept": 3, "quarantined": 0},
                          lineage={"parent": None, "sources": [], "flow_run": None, "components": {},
                                   "rendering": rendering})
    child, counts = filter_version(store, parent.ref, ("exact_duplicates",))
    assert counts["quarantined"] == 1 and child.ref != parent.ref
    assert child.manifest["lineage"]["rendering"] == rendering
