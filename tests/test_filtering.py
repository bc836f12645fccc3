"""Filtering flagged rows into a child version: nothing dropped silently, lineage kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefdata.errors import UnusableInput
from prefdata.filtering import filter_version
from prefdata.importer import import_file, import_to_store
from prefdata.store import Store

REPO = Path(__file__).resolve().parents[1]


def test_filter_hh_sample_then_publish_with_stated_waivers(store_root, shared_data):
    from prefdata.checks.checklist import load_config
    from prefdata.gate import load_inputs, run_gate

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
