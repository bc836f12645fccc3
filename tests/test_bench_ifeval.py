"""bench/bench_ifeval.py's scoring (the figures RESULTS.md quotes): prompt- and instruction-level,
strict and loose, per instruction type, through IFEval's own checkers (if-verifiable), and the
generate-here, score-there round trip of --no-score / --score."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.bench_ifeval import score

REPO = Path(__file__).resolve().parents[1]
ROWS = [
    {"prompt": "Describe the sea without commas, in lowercase.",
     "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"], "kwargs": [{}, {}]},
    {"prompt": "Wrap your answer in double quotes.", "instruction_id_list": ["startend:quotation"], "kwargs": [{}]},
]


def test_a_prompt_counts_only_when_every_instruction_is_followed():
    # row 1: no comma but a capital (1 of 2 instructions); row 2: quoted (1 of 1)
    figures = score(ROWS, ["The sea is wide and deep and blue and cold", '"the sea is wide"'])
    assert figures["prompt_strict"] == 0.5 and figures["instruction_strict"] == 2 / 3
    assert figures["by_instruction_strict"] == {"change_case:english_lowercase": [0, 1],
                                                "punctuation:no_comma": [1, 1], "startend:quotation": [1, 1]}
    # loose accepts a reply whose first line (a preamble) breaks the rule: IFEval's own variants
    loose = score(ROWS[1:], ['Sure, here it is:\n"the sea is wide"'])
    assert (loose["prompt_strict"], loose["prompt_loose"]) == (0.0, 1.0)


def test_replies_saved_without_scores_are_scored_later(tmp_path):
    data = tmp_path / "ifeval.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    saved = tmp_path / "replies.json"
    saved.write_text(json.dumps({"figures": {"m": {"seconds": 1.0}}, "n": None, "max_new_tokens": 8,
                                 "replies": {"m": ["the sea is wide and deep", "no quotes"]}}))
    out = subprocess.run([sys.executable, "bench/bench_ifeval.py", "--score", str(saved), "--data", str(data)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "| prompt_strict | 0.500 |" in out.stdout and "| startend:quotation | 0/1 |" in out.stdout
    # a missing file is one line naming the option, not a traceback
    for args in (["--data", str(tmp_path / "none.jsonl")], ["--data", str(data), "--score", str(tmp_path / "none.json")]):
        missing = subprocess.run([sys.executable, "bench/bench_ifeval.py", "--score", str(saved), *args], cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
        assert missing.returncode == 2 and "Traceback" not in missing.stderr and "none.json" in missing.stderr


def test_headroom_scores_replies_edited_to_follow_one_type_at_a_time_and_all_together():
    from bench.bench_ifeval import headroom

    # row 1 fails on its capital only, row 2 on its missing quotes
    gains = headroom(ROWS, ["The sea is wide and deep", "the sea is wide"])
    assert gains["change_case:english_lowercase"] == 0.5
    assert gains["startend:quotation"] == 0.5
    assert gains["punctuation:no_comma"] == 0.0  # not what either reply misses
    assert gains["all of them"] == 1.0


def test_headroom_edits_run_in_the_demos_repair_order_and_the_first_six_leave_the_new_types_out():
    from bench.bench_ifeval import headroom

    # lowercase is written first, but the title must be added before the case edit or it escapes it
    rows = [{"prompt": "Describe the sea in lowercase, with a title.",
             "instruction_id_list": ["change_case:english_lowercase", "detectable_format:title"], "kwargs": [{}, {}]}]
    gains = headroom(rows, ["The sea is wide."])
    assert gains["all of them"] == 1.0
    assert gains["the first six"] == 0.0 and gains["detectable_format:title"] == 0.0  # each alone misses the other
