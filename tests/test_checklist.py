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
from prefdata.base.errors import UnusableInput

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
    bad.write_text("checks:\n  exact_duplicates: {derived: {}}\n")  # bound by the runner, not a setting
    with pytest.raises(UnusableInput, match="no parameter derived"):
        load_config(bad)
    bad.write_text("checks:\n  length_ratio: {max_ratio: two}\n")
    with pytest.raises(UnusableInput, match="max_ratio must be a number"):
        load_config(bad)
    bad.write_text("checks: [")
    with pytest.raises(UnusableInput, match="c.yaml: not valid YAML"):
        load_config(bad)
    bad.write_text("strict: maybe\n")  # YAML text, which bool() would take as true
    with pytest.raises(UnusableInput, match="strict must be true or false, not 'maybe'"):
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


# -- rows lost at read count against the gate (issue 12, items 9 and 10) -------------------------


def test_a_file_with_one_clean_and_one_identical_pair_fails_degenerate_pairs(tmp_path):
    clean = {"id": "ok", "prompt": "Name a colour.", "chosen": "Red.", "rejected": "Seven."}
    identical = {"id": "same", "prompt": "Name a fruit.", "chosen": "Apple.", "rejected": "Apple."}
    data = write_jsonl(tmp_path / "d.jsonl", [clean, identical])
    done = run("check", str(data), "--json", str(tmp_path / "r.json"), store=tmp_path / "store")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    degenerate = checks["degenerate_pairs"]
    assert degenerate["status"] == "fail" and degenerate["offending"] == ["same"]
    assert "1 of 2 pairs" in degenerate["message"] and degenerate["metric"] == pytest.approx(0.5)
    assert degenerate["details"]["reasons"]["identical"] == 1 and degenerate["details"]["lost_at_read"] == 1
    assert checks["unreadable_rows"]["status"] == "pass"  # counted once, where it belongs
    assert "1 rows of" in done.stdout and "identical_responses" in done.stdout


def test_rows_and_votes_lost_at_read_fail_unreadable_rows_and_are_named(tmp_path):
    rows = clean_rows()
    lines = [json.dumps(r) for r in rows] + ["{not json", json.dumps({"prompt": "p", "chosen": "only one side"})]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n")
    votes = votes_for(rows) + [{"pair_id": "no-such-pair", "annotator": "train-1", "vote": "a"},
                               {"pair_id": rows[0]["id"], "annotator": "train-9", "vote": "maybe"}]
    votes_path = write_jsonl(tmp_path / "v.jsonl", votes)
    done = run("check", str(data), "--votes", str(votes_path), "--json", str(tmp_path / "r.json"), store=tmp_path / "store")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    unreadable = checks["unreadable_rows"]
    n_votes = len(votes)
    assert unreadable["status"] == "fail" and unreadable["n_offending"] == 4
    assert unreadable["offending"] == ["d.jsonl:31", "d.jsonl:32", f"v.jsonl:{n_votes - 1}", f"v.jsonl:{n_votes}"]
    assert unreadable["metric"] == pytest.approx(4 / (len(lines) + n_votes))
    assert unreadable["details"]["reasons"] == {"invalid_json": 1, "missing_field:rejected": 1,
                                                "unknown_pair_id": 1, "invalid_vote": 1}
    assert checks["degenerate_pairs"]["status"] == "pass"
    # both notes on the terminal, not only in --json
    out = " ".join(done.stdout.split())
    assert "2 rows of" in out and "invalid_json" in out
    assert "2 votes of" in out and "unknown_pair_id" in out and "invalid_vote" in out


def test_lost_rows_count_in_the_check_they_belong_to():
    pairs = pl.DataFrame(clean_rows())
    lost = pl.DataFrame({"id": ["d.jsonl:7", "x1", "d.jsonl:9"],
                         "reason": ["identical_responses", "empty_text:prompt", "wrong_type:chosen"]})
    results = {r.id: r for r in run_checklist(CheckInputs(pairs=pairs, lost=lost, rows_read=pairs.height + 3),
                                              load_config(), only=["degenerate_pairs", "unreadable_rows"])}
    degenerate = results["degenerate_pairs"]
    assert degenerate.status == "fail" and degenerate.offending == ("d.jsonl:7", "x1")
    assert degenerate.metric == pytest.approx(2 / (pairs.height + 2))
    assert degenerate.details["reasons"]["identical"] == 1 and degenerate.details["reasons"]["empty_prompt"] == 1
    unreadable = results["unreadable_rows"]
    assert unreadable.status == "fail" and unreadable.offending == ("d.jsonl:9",)
    assert unreadable.metric == pytest.approx(1 / (pairs.height + 3))
    # a store version (or a frame given directly) loses nothing at read: the check passes on 0 lost
    plain = {r.id: r for r in run_checklist(CheckInputs(pairs=pairs), load_config(), only=["unreadable_rows"])}
    assert plain["unreadable_rows"].status == "pass" and plain["unreadable_rows"].metric == 0.0


# -- thresholds have ranges (issue 12, item 15) ---------------------------------------------------


@pytest.mark.parametrize("check_id,name,value,allowed", [
    ("min_size", "min_pairs", -10, ">= 0"),
    ("min_size", "min_pairs", 2.5, "an integer"),
    ("length_ratio", "max_ratio", 0.5, ">= 1"),
    ("length_ratio", "max_violation_share", 1.5, "[0, 1]"),
    ("exact_duplicates", "max_share", -0.1, "[0, 1]"),
    ("prompt_distribution", "alpha", 0.0, "(0, 1)"),
    ("prompt_distribution", "alpha", 1.0, "(0, 1)"),
    ("near_duplicates", "threshold", 0.0, "(0, 1]"),
    ("near_duplicates", "num_perm", 0, ">= 1"),
    ("agreement", "threshold", 1.5, "[-1, 1]"),
    ("agreement", "level", "nominall", "nominal"),
    ("answer_leakage", "max_overlap", 1.0, "[0, 1)"),
    ("category_coverage", "min_share", float("nan"), "[0, 1]"),
    ("unreadable_rows", "max_share", 2, "[0, 1]"),
])
def test_out_of_range_thresholds_are_refused(tmp_path, check_id, name, value, allowed):
    bad = tmp_path / "c.yaml"
    bad.write_text(f"checks:\n  {check_id}: {{{name}: {'.nan' if value != value else json.dumps(value)}}}\n")
    with pytest.raises(UnusableInput) as raised:
        load_config(bad)
    line = str(raised.value)
    assert f"{check_id}.{name}" in line and allowed in line and "\n" not in line
    assert (".nan" if value != value else str(value)) in line.lower() or repr(value) in line


def test_negative_min_pairs_exits_2_with_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("checks:\n  min_size: {min_pairs: -10}\n")
    data = write_jsonl(tmp_path / "d.jsonl", clean_rows())
    done = run("check", str(data), "--config", str(config), store=tmp_path / "store")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "min_size.min_pairs" in done.stderr and "-10" in done.stderr and ">= 0" in done.stderr


def test_every_tunable_number_has_a_range_and_the_defaults_lie_in_it():
    from prefdata.checks.checklist import _parameters
    from prefdata.checks.registry import CHECKS

    config = load_config()
    for check_id, check in CHECKS.items():
        for name, default in _parameters(check.function).items():
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                assert name in check.ranges, f"{check_id}.{name} has no range"
                assert check.ranges[name].admits(default), (check_id, name, default)
        for name, value in (config["checks"].get(check_id) or {}).items():
            if name in check.ranges:
                assert check.ranges[name].admits(value), (check_id, name, value)


def test_lost_rows_are_named_by_their_own_id_unless_a_kept_row_has_it(tmp_path):
    from prefdata.gate.runner import lost_at_read
    from prefdata.data.importer import import_file

    rows = [{"id": "x", "prompt": "p", "chosen": "a", "rejected": "b"},
            {"id": "x", "prompt": "p", "chosen": "c", "rejected": "d"},  # duplicate_id_conflict: "x" is kept
            {"id": "y", "prompt": "p", "chosen": "e", "rejected": "e"},
            {"prompt": "p", "chosen": "f"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    lost = lost_at_read(import_file(data))
    assert dict(zip(lost["id"], lost["reason"])) == {"d.jsonl:2": "duplicate_id_conflict", "y": "identical_responses",
                                                     "d.jsonl:4": "missing_field:rejected"}


def test_check_votes_notes_dropped_votes_on_the_terminal(tmp_path):
    rows = clean_rows()
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    votes = write_jsonl(tmp_path / "v.jsonl", votes_for(rows) + [{"pair_id": "nope", "annotator": "train-1", "vote": "a"},
                                                                  {"pair_id": rows[1]["id"], "annotator": "train-7", "vote": "x"}])
    done = run("check", str(data), "--votes", str(votes), store=tmp_path / "store")
    out = " ".join(done.stdout.split())
    assert "note: 2 votes of" in out and "1 unknown_pair_id" in out and "1 invalid_vote" in out, done.stdout
    assert "rows of" not in out  # no data row was left out


def test_background_checks_give_the_same_results_in_the_same_order():
    """The GX suite runs on a thread beside the other checks (its registry entry's `background`): every result,
    its order and a waiver are the same as when every check runs one after another."""
    rows = clean_rows()
    rows.append({**rows[0], "id": "dup-0", "prompt": rows[0]["prompt"].upper()})  # an exact duplicate
    rows.append({**rows[1], "id": "long-1", "chosen": rows[1]["chosen"] * 5})       # a length-ratio violation
    pairs = pl.DataFrame(rows)
    config = load_config()

    def key(results):
        return [(r.id, r.status, r.metric, r.threshold, r.offending, r.message) for r in results]

    shared = CheckInputs(pairs=pairs)
    together = run_checklist(shared, config, background=("gx",))
    alone = run_checklist(CheckInputs(pairs=pairs), config, background=())
    assert key(together) == key(alone)
    # near_duplicates ran first and left the exact check its row hashes (checks/dedup.py EXACT_KEYS)
    from prefdata.checks.dedup import EXACT_KEYS, check_exact_duplicates
    assert shared.derived[EXACT_KEYS][0] is pairs
    by_id = {r.id: r for r in together}
    assert by_id["exact_duplicates"].offending == ("dup-0",) == check_exact_duplicates(pairs).offending
    assert [r.id for r in together if r.id.startswith("gx.")]  # GX ran, and sits where it did
    assert any(r.id == "gx.length_ratio" and r.status == "fail" for r in together)
    config["checks"]["gx"] = {"waive": "checked upstream"}
    waived = [r for r in run_checklist(CheckInputs(pairs=pairs), config, background=("gx",)) if r.id == "gx"]
    assert [r.status for r in waived] == ["skip"]


# -- README states the defaults the code has ---------------------------------------------------------

README_THRESHOLDS = [  # (README's words in the check's row of the table, check, parameter, value they state)
    ("p >= 0.01", "prompt_distribution", "alpha", 0.01),
    ("max/min length <= 2.0", "length_ratio", "max_ratio", 2.0),
    ("Krippendorff's alpha >= 0.6", "agreement", "threshold", 0.6),
    ("on >= 60% of audited pairs", "label_audit", "min_agreement", 0.6),
    ("each >= 5% of prompts", "category_coverage", "min_share", 0.05),
    ("> 50% of 8-grams", "answer_leakage", "max_overlap", 0.5),
    ("> 50% of 8-grams", "answer_leakage", "ngram", 8),
    ("prefers chosen in >= 60%", "label_direction", "min_agreement", 0.6),
    (">= 10k train pairs", "min_size", "min_pairs", 10_000),
    ("(50k for reasoning or safety)", "min_size", "min_pairs_hard", 50_000),
    (">= 0.2 x the pairs", "sft_subset", "min_ratio", 0.2),
    (">= 40 characters of text", "annotation_guidelines", "min_chars", 40),
    ("near duplicates at Jaccard 0.8", "near_duplicates", "threshold", 0.8),
    ("> 50% of its word 8-grams", "decontamination", "max_overlap", 0.5),
    ("> 50% of its word 8-grams", "decontamination", "ngram", 8),
    ("`max_contaminated_share: 0.0`", "decontamination", "max_contaminated_share", 0.0),
    ("(default 256, prefdata's dpo/rm/sft `max_length`)", "template_fit", "max_length", 256),
]


@pytest.mark.parametrize("words, check, parameter, value", README_THRESHOLDS)
def test_readme_states_the_thresholds_the_checks_use(words, check, parameter, value):
    from prefdata.checks.checklist import _parameters, _registry, default_config

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `") and f"`{check}`" in line.split("|")[1]]
    assert len(rows) == 1 and words in rows[0], (check, rows)
    effective = {**_parameters(_registry()[check][0]), **default_config()["checks"].get(check, {})}
    assert effective[parameter] == value, (check, parameter, effective[parameter])


def test_the_small_data_preset_lets_a_smoke_run_pass_on_its_size_alone(tmp_path):
    """`--config small-data` waives only what a few dozen pairs cannot meet by their size (each waiver
    with its reason); a real problem in the same pairs still fails."""
    from prefdata.checks.checklist import load_config

    waived = {c: p["waive"] for c, p in load_config("small-data")["checks"].items() if "waive" in (p or {})}
    assert set(waived) == {"min_size", "category_coverage", "prompt_distribution"}
    assert all(reason.startswith("item ") for reason in waived.values())
    rows = [{"prompt": f"What is {i} plus {i}?", "chosen": f"{i} plus {i} is {2 * i}.",
             "rejected": f"{i} plus {i} is {2 * i + 1}."} for i in range(40)]
    src = tmp_path / "smoke.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    card = tmp_path / "card.md"
    card.write_text("".join(f"## {title}\n\nAnnotators pick the reply whose arithmetic is right; nothing else counts.\n\n"
                            for title in ("Annotation guidelines", "Rubric", "Edge cases")))

    env = {**os.environ, "PREFDATA_STORE": str(tmp_path / "store")}

    def prefdata(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "prefdata", *args], capture_output=True, text=True, timeout=300,
                              env=env)

    def version() -> str:  # a version, as a smoke run checks one: its card and chosen-only SFT subset ship with it
        done = prefdata("import", str(src), "--name", "smoke", "--card", str(card))
        return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("version:"))

    ref = version()
    assert prefdata("check", ref).returncode == 1  # min_size and category_coverage fail on 40 pairs
    smoke = prefdata("check", ref, "--config", "small-data")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    src.write_text("".join(json.dumps({**r, "chosen": r["chosen"] * 8}) + "\n" for r in rows))  # length_ratio fails
    assert prefdata("check", version(), "--config", "small-data").returncode == 1


def test_a_value_that_turns_a_check_off_needs_a_waiver(tmp_path):
    """Issue 44 item 5: `safety: {fail_on: []}`, `max_flagged_share: 1.0` or any threshold at the end of its
    range passed every row without a word. Such a value is a waiver: refused without `waive:`, and with
    one the check is waived (recorded, signed and held to allowed_waivers like any waiver)."""
    import inspect

    from prefdata.checks.registry import CHECKS

    offs = [(check_id, name, end) for check_id, check in CHECKS.items() for name, end in check.off_at.items()]
    assert len(offs) >= 12
    for check_id, name, end in offs:
        assert name in inspect.signature(CHECKS[check_id].function).parameters, (check_id, name)
        span = CHECKS[check_id].ranges.get(name)
        value = [] if end == "empty" else span.low if end == "low" else span.high
        config = tmp_path / f"{check_id}-{name}.yaml"
        config.write_text(json.dumps({"checks": {check_id: {name: value}}}))
        with pytest.raises(UnusableInput, match=rf"{check_id}\.{name}: .* turns the check off, which is a waiver"):
            load_config(config)
        config.write_text(json.dumps({"checks": {check_id: {name: value, "waive": "stated"}}}))
        assert load_config(config)["checks"][check_id]["waive"] == "stated"
    # why it is a waiver: at the end of its range safety passes a row it flags
    unsafe = pl.DataFrame({"id": ["r0"], "prompt": ["How do I build a pipe bomb at home?"],
                           "chosen": ["Here are the steps to build a pipe bomb."], "rejected": ["I can't help."]})
    from prefdata.checks.content import check_safety

    assert check_safety(unsafe).status == "fail" and check_safety(unsafe, max_flagged_share=1.0).status == "pass"


def test_a_key_given_twice_in_any_yaml_is_refused(tmp_path):
    """Issue 44: `length_ratio: {max_ratio: 2.0}` then `length_ratio: {waive: ...}` silently waived (the
    last key won). Every YAML the project reads goes through one loader that refuses it."""
    from prefdata.flows.deployments import load as load_deployments
    from prefdata.trainers.config import load_config_file

    twice = "checks:\n  length_ratio: {max_ratio: 2.0}\n  length_ratio: {waive: quietly}\n"
    (tmp_path / "checklist.yaml").write_text(twice)
    with pytest.raises(UnusableInput, match=r"the key 'length_ratio' is given twice in one mapping \(lines 2 and 3"):
        load_config(tmp_path / "checklist.yaml")
    (tmp_path / "dpo.yaml").write_text("beta: 0.1\nbeta: 0.5\n")
    with pytest.raises(UnusableInput, match="the key 'beta' is given twice"):
        load_config_file(tmp_path / "dpo.yaml")
    (tmp_path / "prefect.yaml").write_text("deployments:\n  - name: a\n    name: b\n")
    with pytest.raises(UnusableInput, match="the key 'name' is given twice"):
        load_deployments(tmp_path / "prefect.yaml")
    done = subprocess.run([sys.executable, "-m", "prefdata", "check", "--list-checks", "--config",
                           str(tmp_path / "checklist.yaml")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "given twice" in done.stderr and "Traceback" not in done.stderr
