"""The checklist as a build gate: config, waivers, strict mode, error isolation, CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

from prefdata.checks.base import CheckResult
from prefdata.checks.checklist import CheckInputs, gate, load_config, run_checklist, strictly
from prefdata.errors import UnusableInput

REPO = Path(__file__).resolve().parents[1]
GUIDELINES = REPO / "docs" / "examples" / "guidelines.md"

TOPICS = {
    "safety": ["store cleaning products away from children", "handle a stranger asking for my home address",
               "report a phishing email at work", "keep my passwords safe online", "check a used car seat",
               "answer a scam phone call", "use a ladder without falling", "store medicine at home",
               "protect my kids' privacy on social apps", "spot a fake charity website"],
    "style": ["rewrite a cover letter in a warmer tone", "shorten a wordy product description",
              "turn meeting notes into a friendly email", "write a haiku about autumn rain",
              "make a birthday toast sound less formal", "describe a sunset for a travel blog",
              "write a limerick about a sleepy cat", "rephrase a complaint so it sounds polite",
              "give a bedtime story opening line", "make a slogan for a bakery"],
    "factuality": ["the boiling point of water at sea level", "the capital city of Australia",
                   "how many planets orbit the sun", "who wrote Pride and Prejudice",
                   "the chemical symbol for gold", "the speed of light in vacuum",
                   "the largest ocean on Earth", "the year the Berlin Wall fell",
                   "the freezing point of water in Fahrenheit", "the longest river in Africa"],
}


def clean_rows() -> list[dict]:
    rows = []
    for category, topics in TOPICS.items():
        for k, topic in enumerate(topics):
            rows.append({
                "id": f"{category}-{k}",
                "prompt": f"Please help me with this: {topic}.",
                "chosen": f"Here is a careful, correct answer about {topic}, with one clear next step.",
                "rejected": f"I am not sure about {topic}; maybe look it up somewhere else later.",
                "category": category, "chosen_model": "sft-v1", "rejected_model": "sft-v1",
                "split": "test" if k == 9 else "train",
            })
    return rows


def votes_for(rows: list[dict]) -> list[dict]:
    """Three annotators per pair (eval pairs have their own, checklist item 9): shown in random
    order, so the winner is sometimes A and sometimes B; one annotator dissents once."""
    votes = []
    for k, r in enumerate(rows):
        for a in (1, 2, 3):
            vote = "ab"[k % 2] if (k, a) != (4, 3) else "tie"
            votes.append({"pair_id": r["id"], "annotator": f"{'eval' if r['split'] == 'test' else 'train'}-{a}", "vote": vote})
    return votes


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SMALL_OK = """
checks:
  min_size: {min_pairs: 20}
  agreement: {threshold: 0.6}
"""


def run(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env, timeout=600)


def test_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("checks:\n  lenght_ratio: {max_ratio: 3}\n")
    with pytest.raises(UnusableInput, match="unknown check 'lenght_ratio'"):
        load_config(bad)
    bad.write_text("checks:\n  length_ratio: {max_ration: 3}\n")
    with pytest.raises(UnusableInput, match="no parameter max_ration"):
        load_config(bad)
    bad.write_text("checks:\n  length_ratio: {max_ratio: two}\n")
    with pytest.raises(UnusableInput, match="max_ratio must be a number"):
        load_config(bad)
    bad.write_text("checks: [")
    with pytest.raises(UnusableInput, match="cannot read the checklist config"):
        load_config(bad)
    good = tmp_path / "ok.yaml"
    good.write_text("strict: true\nchecks:\n  length_ratio: {max_ratio: 3}\n")
    config = load_config(good)
    assert config["strict"] is True and config["checks"]["length_ratio"]["max_ratio"] == 3
    assert config["checks"]["length_ratio"]["max_violation_share"] == 0.0  # defaults kept


def test_waivers_strict_and_error_isolation():
    pairs = pl.DataFrame(clean_rows())
    config = load_config()
    config["checks"]["min_size"] = {"kind": "poetry"}  # a value the check rejects: it errors
    results = {r.id: r for r in run_checklist(CheckInputs(pairs=pairs), config)}
    config["checks"]["same_policy"] = {"waive": "one model by construction"}
    results = {r.id: r for r in run_checklist(CheckInputs(pairs=pairs), config)}
    assert results["same_policy"].status == "skip" and results["same_policy"].details["waived"]
    assert results["min_size"].status == "error" and "ValueError" in results["min_size"].message
    assert results["exact_duplicates"].status == "pass"  # the others still ran
    assert not gate(list(results.values()))
    strict = {r.id: r for r in strictly(list(results.values()))}
    assert strict["agreement"].status == "fail"  # no votes: could not run
    assert strict["same_policy"].status == "skip"  # a waiver is a decision, not a gap
    assert gate([CheckResult("x", "pass"), CheckResult("y", "skip")])


def test_clean_dataset_publishes_and_flipped_labels_do_not(tmp_path):
    store = tmp_path / "store"
    rows = clean_rows()
    data, votes = write_jsonl(tmp_path / "d.jsonl", rows), write_jsonl(tmp_path / "v.jsonl", votes_for(rows))
    config = tmp_path / "c.yaml"
    config.write_text(SMALL_OK)
    imported = run("import", str(data), "--votes", str(votes), "--name", "clean", "--card", str(GUIDELINES),
                   "--json", str(tmp_path / "i.json"), store=store)
    assert imported.returncode == 0, imported.stderr
    ref = json.loads((tmp_path / "i.json").read_text())["version"]

    verdicts = write_jsonl(tmp_path / "verdicts.jsonl", [{"id": r["id"], "verdict": "chosen"} for r in rows])
    report_dir = tmp_path / "report"
    published = run("publish", ref, "--config", str(config), "--scorer", f"verdicts:{verdicts}",
                    "--report-dir", str(report_dir), store=store)
    assert published.returncode == 0, published.stdout + published.stderr
    shown = json.loads(run("show", ref, "--json", store=store).stdout)
    assert shown["status"] == "validated" and shown["check_report"]["passed"] is True
    by_id = {c["id"]: c["status"] for c in shown["check_report"]["checks"]}
    assert by_id["label_direction"] == by_id["agreement"] == by_id["split_isolation"] == "pass"
    assert (report_dir / "gx" / "index.html").exists()

    flipped = [dict(r, chosen=r["rejected"], rejected=r["chosen"]) for r in rows]
    flipped_verdicts = write_jsonl(tmp_path / "fv.jsonl", [{"id": r["id"], "verdict": "rejected"} for r in rows])
    checked = run("check", str(write_jsonl(tmp_path / "f.jsonl", flipped)), "--votes", str(votes),
                  "--card", str(GUIDELINES), "--config", str(config), "--scorer", f"verdicts:{flipped_verdicts}",
                  "--json", str(tmp_path / "r.json"), "--report-dir", str(tmp_path / "fr"), store=store)
    assert checked.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    direction = next(c for c in report["checks"] if c["id"] == "label_direction")
    assert direction["status"] == "fail" and "labels look flipped" in direction["message"]
    assert report["passed"] is False and set(report) >= {"passed", "checks"}
    suite = ET.parse(tmp_path / "fr" / "junit.xml").getroot().find("testsuite")
    failed = {tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None}
    assert "label_direction" in failed


def test_publish_refuses_a_failing_version(tmp_path, shared_data):
    store = tmp_path / "store"
    done = run("import", str(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz"), "--name", "hh",
               "--json", str(tmp_path / "i.json"), store=store)
    ref = json.loads((tmp_path / "i.json").read_text())["version"]
    refused = run("publish", ref, "--report-dir", str(tmp_path / "rep"), store=store)
    assert refused.returncode == 1 and "not published" in refused.stderr
    shown = json.loads(run("show", ref, "--json", store=store).stdout)
    assert shown["status"] == "rejected" and shown["check_report"]["passed"] is False
    failing = {c["id"] for c in shown["check_report"]["checks"] if c["status"] == "fail"}
    assert {"length_ratio", "min_size", "safety", "annotation_guidelines"} <= failing
    assert run("verify", ref, store=store).returncode == 0  # recording the report changed no content


def test_check_exit_2_on_unusable_input(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("checks:\n  nope: {}\n")
    data = write_jsonl(tmp_path / "d.jsonl", clean_rows())
    for args in (["check", str(tmp_path / "missing.jsonl")], ["check", str(data), "--config", str(config)],
                 ["check", str(data), "--scorer", "oracle:x"]):
        done = run(*args, store=tmp_path / "store")
        assert done.returncode == 2 and "Traceback" not in done.stderr, args
        assert len(done.stderr.strip().splitlines()) == 1
