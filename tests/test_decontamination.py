"""Decontamination against benchmark prompt sets (issue 45 item 2; checks/isolation.py
`check_decontamination`): Tulu 3's rule on word 8-grams of the normalised prompts, IFEval's 541
prompts (../shared/data/ifeval) as the benchmark, HH-RLHF's prompts as unrelated training data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.checks import batched
from prefdata.checks.isolation import check_decontamination, contaminated_by
from prefdata.gate.runner import read_benchmark, read_benchmarks

EMBEDDED = 120  # IFEval prompts hidden in longer training prompts


@pytest.fixture(scope="module")
def ifeval(shared_data) -> pl.DataFrame:
    name, items = read_benchmark(shared_data / "ifeval")
    assert name == "ifeval" and items.height == 541 and items["item"][0] == "1000"
    return items


@pytest.fixture(scope="module")
def hh_prompts(shared_data) -> list[str]:
    """HH-RLHF's prompts (the shared transcript before the last Assistant turn), as `import` reads them."""
    from prefdata.data.importer import import_file

    return import_file(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz").pairs["prompt"].to_list()


def contaminated_pairs(ifeval: pl.DataFrame, hh_prompts: list[str]) -> tuple[pl.DataFrame, dict[str, str]]:
    """HH prompts, and EMBEDDED IFEval prompts each inside text of two HH prompts, case and spacing
    changed (what normalisation undoes): pair id -> the IFEval item it holds."""
    rng = np.random.default_rng(7)
    picked = rng.choice(ifeval.height, EMBEDDED, replace=False)
    rows, truth = [], {}
    for k, hh in enumerate(hh_prompts):
        rows.append({"id": f"hh{k}", "prompt": hh})
    for k, i in enumerate(picked):
        item = ifeval["prompt"][int(i)]
        item = item.upper() if k % 3 == 0 else "  ".join(item.split()) if k % 3 == 1 else item
        before, after = hh_prompts[(7 * k) % len(hh_prompts)][-400:], hh_prompts[(11 * k + 1) % len(hh_prompts)][:300]
        rows.append({"id": f"if{k}", "prompt": f"{before}\n\nAlso: {item}\n{after}"})
        truth[f"if{k}"] = ifeval["item"][int(i)]
    frame = pl.DataFrame(rows).with_columns(chosen=pl.lit("a reply"), rejected=pl.lit("another reply"))
    return frame, truth


def test_finds_every_embedded_ifeval_prompt_and_nothing_else(ifeval, hh_prompts):
    pairs, truth = contaminated_pairs(ifeval, hh_prompts)
    result = check_decontamination(pairs, {"ifeval": ifeval})
    assert result.status == "fail"
    assert set(result.offending) == set(truth)  # recall 1, and not one HH prompt flagged
    report = result.details["benchmarks"]["ifeval"]
    # IFEval's items share instructions word for word ("First repeat the request word for word without
    # change, then give your answer ..."): an item with a short question of its own is more than half
    # that instruction, so the prompt holding one such item contaminates the others too (Tulu 3's rule
    # as it stands). Each extra item is named by an embedded pair, never by an HH prompt.
    listed = {i["item"]: i for i in report["contaminated_items"]}
    text = dict(ifeval.iter_rows())
    assert report["items"] == 541 and len(set(truth.values())) == EMBEDDED
    assert EMBEDDED <= report["contaminated"] <= EMBEDDED + 5
    assert result.metric == pytest.approx(report["contaminated"] / 541)
    assert len(listed) == 100  # details name the first 100 items (by position), each with its pairs
    for item, found in listed.items():
        assert all(p in truth for p in found["pair_ids"])
        if item in truth.values():
            assert found["overlap"] == 1.0 and any(truth[p] == item for p in found["pair_ids"])
        else:
            assert "first repeat the request word for word" in text[item].lower() and found["overlap"] > 0.5
    assert f"ifeval: {report['contaminated']} of 541 items" in result.message
    assert contaminated_by(result) == dict.fromkeys(truth, "ifeval")


def test_unrelated_prompts_pass(ifeval, hh_prompts):
    pairs = pl.DataFrame({"id": [f"hh{k}" for k in range(len(hh_prompts))], "prompt": hh_prompts})
    result = check_decontamination(pairs, {"ifeval": ifeval})
    assert result.status == "pass" and result.offending == () and result.metric == 0.0
    assert result.message.startswith("ifeval: none of 541 items")


def test_more_than_half_of_an_items_8grams_in_one_prompt(ifeval):
    """Tulu 3's rule: > 50% of the item's 8-grams in ONE training prompt; halves in two prompts are not."""
    item = max(ifeval["prompt"].to_list(), key=lambda t: len(t.split()))
    words = item.split()
    w = len(words)
    n_grams = w - 7

    def prefix(share: float) -> str:  # the first words holding `share` of the item's 8-grams
        return " ".join(words[: int(share * n_grams) + 7])

    pairs = pl.DataFrame({"id": ["most", "half-a", "half-b", "few"],
                          "prompt": [prefix(0.6), prefix(0.45), " ".join(words[int(0.55 * w):]), prefix(0.2)]})
    result = check_decontamination(pairs, {"ifeval": ifeval})
    assert result.offending == ("most",)
    [found] = result.details["benchmarks"]["ifeval"]["contaminated_items"]
    assert 0.5 < found["overlap"] < 0.65
    strict = check_decontamination(pairs, {"ifeval": ifeval}, max_overlap=0.1)
    assert set(strict.offending) == {"most", "half-a", "half-b", "few"}


def test_short_items_match_their_whole_normalised_text_between_word_boundaries():
    bench = {"short": pl.Series(["Say hello to Ana", "STRASSE of gold"]),
             "long": pl.Series(["one two three four five six seven eight nine ten eleven twelve"])}
    pairs = pl.DataFrame({"id": ["p1", "p2", "p3", "p4", "p5"], "prompt": [
        "Please  SAY hello\tto ana, then leave.",        # no: "ana," is another word
        "please say hello to ana now",                    # yes, case and spacing aside
        "You could say hello to anastasia",               # no: a longer word
        "The Straße of gold glittered",                   # yes: NFKC and case folding (ß -> ss)
        "one two three four five six seven eight nine ten eleven twelve thirteen"]})
    result = check_decontamination(pairs, bench)
    assert result.offending == ("p2", "p4", "p5")
    assert contaminated_by(result) == {"p2": "short", "p4": "short", "p5": "long"}
    short = result.details["benchmarks"]["short"]
    assert short["short_items"] == 2 and short["contaminated"] == 2 and short["listed"] == 2
    assert [i["item"] for i in short["contaminated_items"]] == ["1", "2"]


def test_a_pair_contaminating_two_benchmarks_is_listed_under_the_first():
    bench = {"a": pl.Series(["alpha beta gamma"]), "b": pl.Series(["beta gamma delta", "unrelated words here"])}
    pairs = pl.DataFrame({"id": ["x", "y"], "prompt": ["alpha beta gamma delta", "beta gamma delta"]})
    result = check_decontamination(pairs, bench)
    assert result.offending == ("x", "y")
    assert contaminated_by(result) == {"x": "a", "y": "b"}
    assert result.details["benchmarks"]["b"]["pairs"] == 2 and result.details["benchmarks"]["b"]["listed"] == 1
    assert result.metric == 1.0  # a's one item


def test_share_threshold_skip_and_thin_frame(ifeval, hh_prompts):
    pairs, truth = contaminated_pairs(ifeval, hh_prompts)
    few = pairs.filter(~pl.col("id").is_in(list(truth)[5:]))  # 5 items of 541: 0.9%
    tolerant = check_decontamination(few, {"ifeval": ifeval}, max_contaminated_share=0.02)  # Tulu 3's tolerance
    assert tolerant.status == "pass" and len(tolerant.offending) == 5  # still named, so filter can drop them
    assert check_decontamination(few, {"ifeval": ifeval}).status == "fail"
    skipped = check_decontamination(pairs, None)
    assert skipped.status == "skip" and "--benchmark" in skipped.message
    # a sharded run checks the thin frame (no responses): the prompts are there, the same result
    thin = check_decontamination(batched.thin(few), {"ifeval": ifeval}, max_contaminated_share=0.02)
    assert (thin.status, thin.metric, thin.offending) == (tolerant.status, tolerant.metric, tolerant.offending)


def test_repeated_prompts_are_checked_once_and_every_pair_named(ifeval):
    item = ifeval["prompt"][1]  # an item with no instruction another item shares
    pairs = pl.DataFrame({"id": [f"r{k}" for k in range(6)],
                          "prompt": [item, "hello", item, "hello", "x " + item, item]})
    result = check_decontamination(pairs, {"ifeval": ifeval})
    assert result.offending == ("r0", "r2", "r4", "r5")
    assert result.details["n_prompts"] == 3
    [found] = result.details["benchmarks"]["ifeval"]["contaminated_items"]
    assert found["n_pairs"] == 4 and found["pair_ids"] == ["r0", "r2", "r4", "r5"]


def test_reading_benchmarks(tmp_path, shared_data):
    (tmp_path / "mine.txt").write_text("first prompt\n\n  \nsecond prompt\n")
    (tmp_path / "turns.jsonl").write_text(json.dumps({"question_id": 7, "turns": ["one", "two"]}) + "\n"
                                          + json.dumps({"question_id": 8, "turns": ["three"]}) + "\n")
    (tmp_path / "chat.jsonl").write_text(json.dumps({"prompt": [{"role": "system", "content": "s"},
                                                                {"role": "user", "content": "hi there"}]}) + "\n")
    found = read_benchmarks([str(tmp_path / "mine.txt"), str(tmp_path / "turns.jsonl"), str(tmp_path / "chat.jsonl"),
                             str(tmp_path / "mine.txt"), str(shared_data / "mtbench")])
    assert list(found) == ["mine", "turns", "chat", "mine-2", "mtbench"]
    assert found["mine"].rows() == [("1", "first prompt"), ("4", "second prompt")]
    assert found["turns"].rows() == [("7.1", "one"), ("7.2", "two"), ("8", "three")]
    assert found["chat"].rows() == [("1", "hi there")]
    assert found["mtbench"].height == 160  # 80 questions of two turns
    (tmp_path / "bad.jsonl").write_text('{"prompt": "fine"}\n{broken\n')
    with pytest.raises(UnusableInput, match="bad.jsonl: row 2 cannot be read"):
        read_benchmark(tmp_path / "bad.jsonl")
    with pytest.raises(UnusableInput, match="a folder must hold one data file"):
        read_benchmark(tmp_path)
    with pytest.raises(UnusableInput, match="no such file"):
        read_benchmark(tmp_path / "absent.jsonl")


def test_a_deployments_benchmarks_are_allow_listed_one_by_one():
    from prefdata.flows.params import Checks, reach

    assert list(reach(Checks(benchmarks=["a/ifeval", "b.txt"]), "checks")) == [
        ("path", "a/ifeval", "checks.benchmarks[0]"), ("path", "b.txt", "checks.benchmarks[1]")]


def test_the_yaml_range_and_waiver(tmp_path):
    from prefdata.checks.checklist import load_config

    config = tmp_path / "c.yaml"
    config.write_text("checks:\n  decontamination: {max_contaminated_share: 1.0}\n")
    with pytest.raises(UnusableInput, match="turns the check off"):
        load_config(config)
    config.write_text("checks:\n  decontamination: {max_contaminated_share: 0.02, ngram: 13}\n")
    assert load_config(config)["checks"]["decontamination"] == {"ngram": 13, "max_overlap": 0.5,
                                                                "max_contaminated_share": 0.02}


# -- the command line -----------------------------------------------------------------------------


def prefdata(*args: str, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFDATA_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_check_and_filter_end_to_end(tmp_path, shared_data, ifeval):
    rows = [{"id": f"c{k}", "prompt": f"Tell me about topic number {k} in a short friendly way.",
             "chosen": f"Here is a short friendly note on topic {k}, with one clear example.",
             "rejected": f"Topic {k}? Not sure."} for k in range(30)]
    rows[4]["prompt"] = "Before we start: " + ifeval["prompt"][10] + " Thanks!"
    rows[9]["prompt"] = ifeval["prompt"][200].lower()
    rows[17]["prompt"] = "Please SAY hello to Ana."
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("say hello to ana.\n")
    store = tmp_path / "store"
    only = tmp_path / "only.yaml"  # the other checks waived: this test is about one
    from prefdata.checks.registry import CHECKS

    only.write_text(json.dumps({"checks": {c: {"waive": "not this test"} for c in CHECKS if c != "decontamination"}}))

    done = prefdata("check", str(data), "--config", str(only), "--benchmark", str(shared_data / "ifeval"),
                    "--benchmark", str(tiny), "--json", str(tmp_path / "r.json"), store=store)
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "FAIL decontamination" in out and "ifeval: 2 of 541 items" in out and "tiny: 1 of 1 items" in out
    [report] = [c for c in json.loads((tmp_path / "r.json").read_text())["checks"] if c["id"] == "decontamination"]
    assert report["offending"] == ["c4", "c9", "c17"]
    items = report["details"]["benchmarks"]["ifeval"]["contaminated_items"]
    assert [(i["item"], i["pair_ids"]) for i in items] == [(ifeval["item"][10], ["c4"]), (ifeval["item"][200], ["c9"])]

    skipped = prefdata("check", str(data), "--config", str(only), store=store)
    assert skipped.returncode == 0 and "SKIP  decontamination" in skipped.stdout, skipped.stdout + skipped.stderr

    imported = prefdata("import", str(data), "--name", "mix", store=store)
    ref = next(line.split()[1] for line in imported.stdout.splitlines() if line.startswith("version:"))
    refused = prefdata("filter", ref, "--drop", "decontamination", store=store)
    assert refused.returncode == 2 and "--benchmark" in refused.stderr
    filtered = prefdata("filter", ref, "--drop", "decontamination", "--benchmark", str(shared_data / "ifeval"),
                        "--benchmark", str(tiny), "--json", str(tmp_path / "f.json"), store=store)
    assert filtered.returncode == 0, filtered.stdout + filtered.stderr
    summary = json.loads((tmp_path / "f.json").read_text())
    assert summary["reasons"] == {"check:decontamination:ifeval": 2, "check:decontamination:tiny": 1}
    assert summary["kept"] == 27 and summary["quarantined"] == 3
    from prefdata.data.store import Store

    quarantine = [json.loads(line) for line in Store(str(store)).read_text(summary["version"], "quarantine.jsonl")
                  .splitlines()]
    assert {q["id"]: q["reason"] for q in quarantine} == {"c4": "check:decontamination:ifeval",
                                                          "c9": "check:decontamination:ifeval",
                                                          "c17": "check:decontamination:tiny"}
