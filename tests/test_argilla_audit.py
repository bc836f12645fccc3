"""The label audit without a server: the label_audit check (a pure function), the sample a push
sends, and how `check NAME@VERSION --votes` reads an audit's votes. The round trip through a real
Argilla is in tests/test_argilla.py (test_label_audit_of_hh_rlhf_pairs_round_trips)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from prefdata.checks.agreement import check_label_audit, label_agreement
from prefdata.base.errors import UnusableInput

REPO = Path(__file__).resolve().parents[1]


def _votes(rows):
    return pl.DataFrame(rows, schema=["pair_id", "annotator", "vote", "label"], orient="row")


AUDIT = _votes([
    # p1: upheld 3-0; p2: reversed 2-1; p3: tied by majority (against a preference label); p4: no majority
    ("p1", "x", "a", "a"), ("p1", "y", "a", "a"), ("p1", "z", "a", "a"),
    ("p2", "x", "b", "a"), ("p2", "y", "b", "a"), ("p2", "z", "a", "a"),
    ("p3", "x", "tie", "a"), ("p3", "y", "tie", "a"), ("p3", "z", "a", "a"),
    ("p4", "x", "a", "a"), ("p4", "y", "b", "a"),
    # p5: a comparison labelled b, upheld
    ("p5", "x", "b", "b"), ("p5", "y", "b", "b"),
])


def test_label_agreement_by_pair_and_by_annotator():
    got = label_agreement(AUDIT)
    assert (got["n_audited"], got["n_upheld"], got["n_reversed"], got["n_tied"], got["n_undecided"]) == (5, 2, 1, 1, 1)
    assert got["overturned"] == ["p2", "p3"]
    assert got["per_annotator"] == pytest.approx({"x": 3 / 5, "y": 2 / 5, "z": 1.0})
    assert got["vote_agreement"] == pytest.approx(8 / 13)


def test_label_audit_passes_and_fails_on_its_threshold():
    [result] = check_label_audit(AUDIT, min_agreement=0.4)
    assert result.id == "label_audit" and result.status == "pass" and result.metric == pytest.approx(2 / 5)
    assert result.offending == ("p2", "p3") and result.threshold == 0.4
    [strict] = check_label_audit(AUDIT)  # the default floor, 0.6, as label_direction's
    assert strict.status == "fail" and "2 of 5" in strict.message
    flipped = AUDIT.with_columns(pl.lit("b").alias("label"))
    assert check_label_audit(flipped)[0].status == "fail"


def test_no_audit_no_result():
    """Votes that carry no labels (a data file's, a version's own) are not an audit: the check
    reports nothing, so a dataset without an audit is neither passed nor failed (nor --strict-failed)."""
    assert check_label_audit(None) == []
    assert check_label_audit(AUDIT.drop("label")) == []
    [skipped] = check_label_audit(AUDIT.with_columns(pl.lit(None, pl.String).alias("label")))
    assert skipped.status == "skip"


def test_audit_sample_is_seeded_stable_and_nested():
    from prefdata.argilla.audit import audit_rows

    pairs = pl.DataFrame({"id": [f"r{i}" for i in range(50)], "prompt": ["p"] * 50,
                          "chosen": [f"c{i}" for i in range(50)], "rejected": [f"x{i}" for i in range(50)]})
    rows = audit_rows(pairs)
    assert rows.columns[:5] == ["pair_id", "prompt", "response_a", "response_b", "label"]
    assert rows["pair_id"].to_list() == pairs["id"].to_list() and set(rows["label"]) == {"a"}
    assert rows["response_a"].to_list() == pairs["chosen"].to_list()
    ten = audit_rows(pairs, sample=10, seed=1)["pair_id"].to_list()
    assert ten == audit_rows(pairs, sample=10, seed=1)["pair_id"].to_list() and len(set(ten)) == 10
    assert set(ten) < set(audit_rows(pairs, sample=20, seed=1)["pair_id"]), "a bigger sample extends a smaller one"
    assert set(ten) != set(audit_rows(pairs, sample=10, seed=2)["pair_id"])
    assert audit_rows(pairs, sample=500, seed=1).height == 50
    with pytest.raises(UnusableInput, match="--sample"):
        audit_rows(pairs, sample=0)


def _cli(*args, store):
    import os

    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, "PREFDATA_STORE": str(store), "COLUMNS": "200"})


@pytest.fixture()
def hh_version(shared_data, tmp_path):
    import gzip

    from prefdata.data.store import Store

    src = tmp_path / "hh6.jsonl"
    with gzip.open(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz", "rt", encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(6)))
    store = tmp_path / "store"
    assert _cli("import", str(src), "--name", "hh6", store=store).returncode == 0
    st = Store(str(store))
    ref = st.versions("hh6")[0].ref
    return store, ref, st.load(ref)


def test_check_a_version_with_audit_votes_reports_label_agreement(hh_version, tmp_path):
    store, ref, pairs = hh_version
    ids = pairs["id"].to_list()
    votes = [{"pair_id": i, "annotator": n, "vote": "b" if (i == ids[0] and n != "c") else "a", "label": "a"}
             for i in ids[:4] for n in ("a1", "b2", "c")]
    (tmp_path / "votes.jsonl").write_text("\n".join(json.dumps(v) for v in votes))
    run = _cli("check", ref, "--votes", str(tmp_path / "votes.jsonl"), "--json", str(tmp_path / "r.json"), store=store)
    assert run.returncode in (0, 1), run.stderr
    checks = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert checks["label_audit"]["metric"] == pytest.approx(3 / 4) and checks["label_audit"]["offending"] == [ids[0]]
    assert checks["agreement"]["details"]["n_pairs"] == 4

    # votes that name pairs of another version, or are not votes: one line, exit 2
    (tmp_path / "other.jsonl").write_text(json.dumps({"pair_id": "nope", "annotator": "a1", "vote": "a", "label": "a"}))
    (tmp_path / "bad.jsonl").write_text(json.dumps({"pair_id": ids[0], "annotator": "a1", "vote": "maybe"}))
    for name, words in (("other.jsonl", "not a pair of"), ("bad.jsonl", "not a vote")):
        bad = _cli("check", ref, "--votes", str(tmp_path / name), store=store)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(lines) == 1 and words in lines[0] and name in lines[0], bad.stderr


def test_filter_label_audit_needs_the_votes(hh_version):
    store, ref, _ = hh_version
    run = _cli("filter", ref, "--drop", "label_audit", store=store)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "--votes" in lines[0], run.stderr
