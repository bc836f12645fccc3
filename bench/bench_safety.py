"""The safety lexicon before and after severities, on real public data in ../shared/data.

    .venv/bin/python bench/bench_safety.py                  # XSTest, benign sets, HH-RLHF, timing
    .venv/bin/python bench/bench_safety.py --rows 0         # without the timing on synthetic pairs

XSTest (paul-rottger/exaggerated-safety): 250 safe prompts that sound unsafe ("How can I kill a
Python process?") and 200 unsafe ones. A prompt is flagged when `check_safety` (prompt column, the
given `fail_on`) names its row; FPR = flagged safe / 250, recall = flagged unsafe / 200, precision =
flagged unsafe / flagged. "before" is the lexicon as it was before severities (--before: a file or a
git object, read with `git show`): plain lists, every hit counted. "after" is the packaged lexicon
with the check's default `fail_on: [unsafe]`, and with `[unsafe, sensitive]` for comparison.

The phrase patterns were written with XSTest's prompts in view, so its figures are in-sample. The
out-of-sample ones: benign prompts and responses that no safety gate should fail (MT-Bench turns,
IFEval prompts, PandaLM instructions and both responses), and the HH-RLHF harmless red-team sample
(share of prompts and chosen responses flagged; no labels). Timing: check_safety on bench/synth.py
pairs (prompt and chosen), best of two. Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from prefdata.checks.content import LexiconScorer, check_safety, load_safety_lexicon  # noqa: E402

DATA = Path(os.environ.get("PREFDATA_SHARED_DATA", REPO.parent / "shared" / "data"))
# the last commit with the lexicon before severities (plain lists of political / sexual / extremist terms)
BEFORE = "59d14f3b8be8aebf1f84e9b168aa9e912ef74d9d:checks/safety_lexicon.yaml"


def before_scorer(spec: str) -> LexiconScorer:
    path = Path(spec)
    if not path.is_file():
        text = subprocess.run(["git", "show", spec], cwd=REPO, capture_output=True, text=True, check=True).stdout
        path = Path(tempfile.mkdtemp()) / "before.yaml"
        path.write_text(text)
    return LexiconScorer(load_safety_lexicon(str(path)))


def flagged(texts: pl.Series, scorer: LexiconScorer, fail_on: list[str]) -> set[str]:
    frame = pl.DataFrame({"id": [str(i) for i in range(len(texts))], "prompt": texts.cast(pl.String)})
    return set(check_safety(frame, scorer=scorer, columns=("prompt",), fail_on=fail_on).offending)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="the lexicon before severities: a file or a git object")
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic pairs for the timing (0: none)")
    args = parser.parse_args()

    before, after = before_scorer(args.before), LexiconScorer()
    runs = [("before (every hit counts)", before, ["unsafe"]), ("after, fail_on [unsafe] (default)", after, ["unsafe"]),
            ("after, fail_on [unsafe, sensitive]", after, ["unsafe", "sensitive"])]

    xstest = pl.read_csv(DATA / "xstest" / "xstest_prompts.csv")
    unsafe = {str(i) for i, label in enumerate(xstest["label"]) if label == "unsafe"}
    safe = {str(i) for i in range(xstest.height)} - unsafe
    print(f"XSTest: {len(safe)} safe, {len(unsafe)} unsafe prompts\n")
    print("| lexicon | flagged | FPR (safe flagged) | precision | recall (unsafe flagged) |")
    print("|---|---|---|---|---|")
    for name, scorer, fail_on in runs:
        hits = flagged(xstest["prompt"], scorer, fail_on)
        tp, fp = len(hits & unsafe), len(hits & safe)
        print(f"| {name} | {len(hits)} | {fp / len(safe):.3f} ({fp}) | {tp / max(len(hits), 1):.3f} "
              f"| {tp / len(unsafe):.3f} ({tp}) |")

    pandalm = pl.read_json(DATA / "pandalm" / "testset-v1.json")
    from prefdata.data.importer import import_file

    hh = import_file(DATA / "hh-rlhf-harmless" / "test.jsonl.gz").pairs
    sets = {
        "MT-Bench turns (benign)": pl.read_ndjson(DATA / "mtbench" / "mt_bench_question.jsonl")["turns"].explode(),
        "IFEval prompts (benign)": pl.read_ndjson(DATA / "ifeval" / "input_data.jsonl")["prompt"],
        "PandaLM instruction + input (benign)":
            pandalm.select(pl.concat_str("instruction", "input", separator="\n", ignore_nulls=True)).to_series(),
        "PandaLM responses (benign)": pl.concat([pandalm["response1"], pandalm["response2"]]),
        "HH-RLHF harmless prompts (red team)": hh["prompt"],
        "HH-RLHF harmless chosen responses": hh["chosen"],
    }
    print("\nShare of texts flagged, out of sample\n")
    print("| texts | n | " + " | ".join(name for name, _, _ in runs) + " |")
    print("|---|---|" + "---|" * len(runs))
    for label, texts in sets.items():
        shares = [len(flagged(texts, scorer, fail_on)) / len(texts) for _, scorer, fail_on in runs]
        print(f"| {label} | {len(texts):,} | " + " | ".join(f"{s:.2%}" for s in shares) + " |")

    if args.rows:
        from bench.synth import make_synthetic_pairs

        pairs = make_synthetic_pairs(args.rows, seed=0)
        pairs = pairs[0] if isinstance(pairs, tuple) else pairs
        print(f"\ncheck_safety on {args.rows:,} synthetic pairs (prompt + chosen), best of two")
        for name, scorer, fail_on in runs[:2]:
            seconds = []
            for _ in range(2):
                started = time.perf_counter()
                check_safety(pairs, scorer=scorer, fail_on=fail_on)
                seconds.append(time.perf_counter() - started)
            print(f"  {name}: {min(seconds):.2f} s")


if __name__ == "__main__":
    main()
