"""The whole model-free checklist on synthetic pairs: time per check, peak memory, fault recall.

    .venv/bin/python bench/bench_checklist.py                 # 100k and 1M, each in a fresh process
    .venv/bin/python bench/bench_checklist.py --sizes 100000  # one size

Data: `bench.synth.make_synthetic_pairs(n)` (prompts ~200 chars, responses ~400, 10% test split,
~1% each of injected exact duplicates, near duplicates (Jaccard >= 0.8), length-ratio violations
and leaked answers, ids known), plus 3 annotators' votes on 5% of the pairs, a reference sample of
2,000 prompts from the same generator, the chosen-only SFT subset and an example guideline card.
Every check that needs no model runs (label_direction needs a scorer and is left out), through the
same runner `prefdata check` uses, Great Expectations suite included. Generating the data is not
timed. Peak RSS is the process's high-water mark while the checks run (the data in memory
included; the peak is reset after generating it, which itself peaks higher); the peak is also reset
before each check, so the per-check column is that check's own high-water mark (data included) and
the overall peak is the largest of them. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.memory import reset_peak, status_mb  # noqa: E402

FAULT_CHECKS = {"exact_duplicates": "exact_duplicates", "near_duplicates": "near_duplicates",
                "length_ratio": "length_ratio", "answer_leakage": "answer_leakage"}


def one_size(n: int) -> dict:
    import numpy as np
    import polars as pl

    from bench.synth import make_synthetic_pairs
    from prefdata.checks.checklist import CheckInputs, _registry, load_config, run_checklist
    from prefdata.data.store import sft_subset

    pairs, truth = make_synthetic_pairs(n)
    rng = np.random.default_rng(1)
    voted = pairs["id"].sample(max(1, n // 20), seed=1).to_list()
    majority = rng.choice(["a", "b"], size=len(voted))
    votes = pl.DataFrame({
        "pair_id": [p for p in voted for _ in range(3)],
        "annotator": [f"ann{k}" for _ in voted for k in range(3)],
        "vote": [m if rng.random() < 0.9 else rng.choice(["a", "b", "tie"]) for m in majority for _ in range(3)],
    })
    inputs = CheckInputs(
        pairs=pairs, votes=votes, reference_prompts=make_synthetic_pairs(2000, seed=7)[0]["prompt"],
        sft=sft_subset(pairs.filter(pl.col("split") == "train")),
        card_text=(REPO / "docs" / "examples" / "guidelines.md").read_text(),
    )
    config = load_config()
    import gc

    gc.collect()
    rss_before = status_mb("VmRSS")
    reset = reset_peak()  # so the peak below is the checks' own, with the data loaded
    overall_peak = round(status_mb("VmHWM") or 0)
    seconds: dict[str, float] = {}
    check_peaks: dict[str, int] = {}
    results = {}
    for check_id in _registry():
        if check_id == "label_direction":
            continue
        gc.collect()
        if reset:
            reset_peak()  # this check's own peak, measured from here
        started = time.perf_counter()
        for r in run_checklist(inputs, config, only=[check_id]):
            results[r.id] = r
        seconds[check_id] = round(time.perf_counter() - started, 2)
        if reset:
            check_peaks[check_id] = round(status_mb("VmHWM") or 0)
            overall_peak = max(overall_peak, check_peaks[check_id])
    clean = set(pairs["id"].to_list()) - {i for ids in truth.values() for i in ids}
    faults = {}
    for kind, check_id in FAULT_CHECKS.items():
        flagged = set(results[check_id].offending)
        injected = set(truth[kind])
        # an exact copy is also a near duplicate, so near_duplicates may flag both kinds
        allowed = injected | (set(truth["exact_duplicates"]) if kind == "near_duplicates" else set())
        faults[kind] = {"injected": len(injected), "recall": round(len(flagged & injected) / max(1, len(injected)), 4),
                        "false_positives_on_clean": len((flagged - allowed) & clean)}
    return {"n": n, "seconds": seconds, "total_seconds": round(sum(seconds.values()), 2),
            "data_rss_mb": round(rss_before or 0),
            # the peak is reset before each check, so the overall peak is the largest per-check peak
            "peak_rss_mb": overall_peak if reset else round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "check_peak_rss_mb": check_peaks,
            "faults": faults, "status": {k: r.status for k, r in results.items() if not k.startswith("gx.")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return
    runs = []
    for n in map(int, args.sizes.split(",")):
        done = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    checks = list(runs[0]["seconds"])
    print(f"{'check':24}" + "".join(f"{r['n']:>12,}" for r in runs)
          + "".join(f"{'peak ' + format(r['n'], ','):>16}" for r in runs))
    for c in checks:
        print(f"{c:24}" + "".join(f"{r['seconds'][c]:>11.2f}s" for r in runs)
              + "".join(f"{r['check_peak_rss_mb'][c]:>14,}MB" if c in r.get("check_peak_rss_mb", {}) else f"{'n/a':>16}"
                        for r in runs))
    print(f"{'TOTAL':24}" + "".join(f"{r['total_seconds']:>11.2f}s" for r in runs))
    print(f"{'RSS with data loaded':24}" + "".join(f"{r['data_rss_mb']:>10,}MB" for r in runs))
    print(f"{'peak RSS during checks':24}" + "".join(f"{r['peak_rss_mb']:>10,}MB" for r in runs))
    if len(runs) >= 2:
        print(f"time ratio {runs[-1]['n']:,} / {runs[0]['n']:,}: {runs[-1]['total_seconds'] / runs[0]['total_seconds']:.2f}")
    for r in runs:
        for kind, f in r["faults"].items():
            print(f"n={r['n']:,} {kind:18} injected {f['injected']:>6}  recall {f['recall']:.4f}  "
                  f"false positives on clean rows {f['false_positives_on_clean']}")


if __name__ == "__main__":
    main()
