"""Annotator quality by Dawid-Skene: simulated crowds with known accuracies, the real PandaLM votes,
the agreement check's details and `prefdata import --aggregate dawid-skene`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from prefdata.checks.agreement import annotator_quality, check_agreement, dawid_skene, majority_labels
from prefdata.checks.checklist import load_config

CLASSES = ("a", "b", "tie")


def crowd(accuracies: dict[str, float | None], n: int = 400, seed: int = 0, cover: float = 1.0):
    """(truth, long votes): each annotator gives the true label with its accuracy, else another
    class at random; None votes a or b at random whatever the truth (a careless annotator)."""
    rng = np.random.default_rng(seed)
    truth = {f"p{i:04d}": str(rng.choice(CLASSES, p=[0.45, 0.45, 0.10])) for i in range(n)}
    rows = []
    for name, accuracy in accuracies.items():
        for pair, label in truth.items():
            if rng.random() > cover:
                continue
            if accuracy is None:
                vote = str(rng.choice(["a", "b"]))
            elif rng.random() < accuracy:
                vote = label
            else:
                vote = str(rng.choice([c for c in CLASSES if c != label]))
            rows.append({"pair_id": pair, "annotator": name, "vote": vote})
    return truth, pl.DataFrame(rows)


def test_random_voter_is_flagged_and_qualities_rank_the_crowd():
    accuracies = {"ann_90": 0.9, "ann_80": 0.8, "ann_70": 0.7, "random": None}
    _, votes = crowd(accuracies, cover=0.8)
    quality = {q["annotator"]: q for q in annotator_quality(votes)}
    assert {a for a, q in quality.items() if q["flagged"]} == {"random"}
    ranked = sorted(quality, key=lambda a: quality[a]["quality"], reverse=True)
    assert ranked == ["ann_90", "ann_80", "ann_70", "random"]
    for name, accuracy in accuracies.items():  # the estimates are the accuracies, within sampling noise
        if accuracy is not None:
            assert quality[name]["quality"] == pytest.approx(accuracy, abs=0.06)
    assert quality["random"]["quality"] < 0.55
    assert all(200 < q["n_votes"] < 400 for q in quality.values())


def test_dawid_skene_recovers_labels_majority_cannot():
    # Two careful annotators and two careless ones: 2-2 splits leave majority without a label.
    truth, votes = crowd({"good1": 0.9, "good2": 0.9, "careless1": None, "careless2": None}, seed=1)
    model = dawid_skene(votes)
    assert model["iterations"] < 500  # converged, not stopped by the cap
    ds_right = np.mean([model["labels"][p] == t for p, t in truth.items()])
    majority = dict(majority_labels(votes).select("pair_id", "label").iter_rows())
    majority_right = np.mean([majority.get(p) == t for p, t in truth.items()])
    assert ds_right > majority_right + 0.15 and ds_right > 0.85


def test_deterministic_and_honest_crowd_not_flagged():
    _, votes = crowd({"x": 0.85, "y": 0.8, "z": 0.82}, seed=2)
    first, second = dawid_skene(votes), dawid_skene(votes.reverse())
    assert first["quality"] == pytest.approx(second["quality"])
    assert not any(q["flagged"] for q in annotator_quality(votes))
    # the rule is the config's: a floor above everyone flags everyone
    assert all(q["flagged"] for q in annotator_quality(votes, min_annotator_quality=0.95))
    # too few votes: no flag, however bad
    few = pl.concat([votes, pl.DataFrame({"pair_id": ["p0000", "p0001"], "annotator": ["w", "w"], "vote": ["tie", "tie"]})])
    assert not {q["annotator"]: q for q in annotator_quality(few)}["w"]["flagged"]


@pytest.fixture(scope="module")
def pandalm_votes(shared_data) -> pl.DataFrame:
    rows = json.loads((shared_data / "pandalm/testset-v1.json").read_text())
    names = ("annotator1", "annotator2", "annotator3")
    return pl.DataFrame([{"pair_id": f"pandalm-{r['idx']:04d}", "annotator": n, "vote": {0: "tie", 1: "a", 2: "b"}[r[n]]}
                         for r in rows for n in names])


def test_pandalm_humans_are_high_quality_and_none_flagged(pandalm_votes):
    result = check_agreement(pandalm_votes)
    annotators = result.details["annotators"]
    assert [a["annotator"] for a in annotators] == ["annotator1", "annotator2", "annotator3"]
    assert all(a["n_votes"] == 999 and not a["flagged"] for a in annotators)
    assert all(a["quality"] > 0.9 for a in annotators), annotators
    assert "low-quality" not in result.message


def test_agreement_check_names_a_flagged_annotator_and_config_takes_the_rule(tmp_path):
    _, votes = crowd({"ann_90": 0.9, "ann_85": 0.85, "random": None}, seed=3)
    result = check_agreement(votes)
    flagged = [a["annotator"] for a in result.details["annotators"] if a["flagged"]]
    assert flagged == ["random"] and "low-quality annotator(s): random" in result.message
    config = tmp_path / "c.yaml"
    config.write_text("checks:\n  agreement: {max_quality_gap: 0.9, min_annotator_quality: 0.1}\n")
    assert load_config(config)["checks"]["agreement"]["max_quality_gap"] == 0.9
    loose = check_agreement(votes, max_quality_gap=0.9, min_annotator_quality=0.1)
    assert not any(a["flagged"] for a in loose.details["annotators"])
    config.write_text("checks:\n  agreement: {min_annotator_quality: 1.5}\n")
    with pytest.raises(Exception, match="out of range"):
        load_config(config)


def test_import_aggregate_dawid_skene(tmp_path):
    truth, votes = crowd({"good1": 0.9, "good2": 0.9, "careless1": None, "careless2": None}, n=200, seed=4)
    data = tmp_path / "cmp.jsonl"
    data.write_text("".join(json.dumps({"id": p, "prompt": f"question {p}", "response_a": f"first {p}",
                                        "response_b": f"second {p}"}) + "\n" for p in truth))
    votes_file = tmp_path / "votes.csv"
    votes.write_csv(votes_file)
    env = {**os.environ, "PREFDATA_STORE": str(tmp_path / "store")}
    labels = {}
    for method in ("majority", "dawid-skene"):
        out = tmp_path / f"{method}.parquet"
        done = subprocess.run([sys.executable, "-m", "prefdata", "import", str(data), "--votes", str(votes_file),
                               "--aggregate", method, "--out", str(out), "--json", str(tmp_path / f"{method}.json")],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        pairs = pl.read_parquet(out)
        labels[method] = {r["id"]: ("a" if r["chosen"].startswith("first") else "b") for r in pairs.iter_rows(named=True)}
    expected = {p: l for p, l in dawid_skene(votes)["labels"].items() if l != "tie"}
    assert labels["dawid-skene"] == expected
    right = {m: sum(truth[p] == l for p, l in found.items()) for m, found in labels.items()}
    assert right["dawid-skene"] > right["majority"] + 30  # it resolves the 2-2 splits majority leaves open

    bad = subprocess.run([sys.executable, "-m", "prefdata", "import", str(data), "--aggregate", "mean",
                          "--out", str(tmp_path / "x.parquet")], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "--aggregate" in bad.stderr and "Traceback" not in bad.stderr


def test_html_report_shows_each_annotators_quality(tmp_path):
    from prefdata.checks.checklist import CheckInputs, run_checklist
    from prefdata.gate.runner import plots_for
    from prefdata.gate.report import write_html

    _, votes = crowd({"ann_90": 0.9, "ann_85": 0.85, "random": None}, n=100, seed=5)
    pairs = pl.DataFrame({"id": ["x"], "prompt": ["p"], "chosen": ["c"], "rejected": ["r"]})
    inputs = CheckInputs(pairs=pairs, votes=votes)
    results = run_checklist(inputs, only=["agreement"])
    quality = {a["annotator"]: a["quality"] for a in results[0].details["annotators"]}
    page = write_html(results, tmp_path / "report.html", plots_for(inputs, results)).read_text()
    section = page.split("Annotator quality (Dawid-Skene")[1].split("</figure>")[0]
    for name, q in quality.items():
        assert f"{name}: {q:.3f}" in section
