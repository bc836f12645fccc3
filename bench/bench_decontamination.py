"""The decontamination check (checks/isolation.py `check_decontamination`) against IFEval at scale.

    .venv/bin/python bench/bench_decontamination.py --n 1000000
    .venv/bin/python bench/bench_decontamination.py --n 200000 --repeats 2

Training data: `bench.realistic.make_realistic_pairs(n)` (UltraFeedback-shaped: three pairs a
prompt, prompts 60-600 characters of made-up words; generating them is not timed), with `--embed`
IFEval prompts put inside as many training prompts (the training prompt, then the IFEval prompt:
the pairs sharing that prompt are contaminated too). Benchmark: IFEval's 541 prompts
(../shared/data/ifeval, read as `--benchmark` reads it). The check runs with its defaults (word
8-grams, > 50% of an item's 8-grams in one prompt, short items by substring), normalisation of
every distinct prompt included.

Reported: seconds (each run, and the fastest), peak RSS during the check (the process's peak reset
after the data is made, /proc/self/clear_refs; else the process's lifetime peak) and the RSS before
it, recall on the embedded items and the pairs flagged that hold none (false positives). Figures
only; no assertions. The last line of output is the JSON of the figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.memory import reset_peak, status_mb  # noqa: E402

IFEVAL = REPO.parent / "shared" / "data" / "ifeval"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="training pairs")
    parser.add_argument("--embed", type=int, default=100, help="training prompts given an IFEval prompt")
    parser.add_argument("--benchmark", default=str(IFEVAL))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np
    import polars as pl

    from bench.realistic import make_realistic_pairs
    from prefdata.checks.isolation import check_decontamination
    from prefdata.gate.runner import read_benchmarks

    started = time.perf_counter()
    pairs, _ = make_realistic_pairs(args.n, seed=args.seed)
    benchmarks = read_benchmarks([args.benchmark])
    [(name, items)] = benchmarks.items()
    rng = np.random.default_rng(args.seed)
    rows = np.sort(rng.choice(pairs.height, args.embed, replace=False))
    picked = rng.choice(items.height, args.embed, replace=False)
    old = pairs["prompt"].gather(rows)
    new = old + "\n\n" + items["prompt"].gather(picked)
    # the prompt changes in every pair that has it (a prompt has three pairs): all of them are contaminated
    pairs = pairs.with_columns(pl.col("prompt").replace(old.to_list(), new.to_list()))
    contaminated = set(pairs.filter(pl.col("prompt").is_in(new.implode()))["id"].to_list())
    made = time.perf_counter() - started
    print(f"{pairs.height:,} pairs made in {made:.1f} s; {args.embed} prompts hold an item of {name} "
          f"({items.height} items), {len(contaminated)} pairs contaminated", flush=True)

    reset_ok = reset_peak()
    before = status_mb("VmRSS")
    seconds, result = [], None
    for _ in range(args.repeats):
        t = time.perf_counter()
        result = check_decontamination(pairs, benchmarks)
        seconds.append(round(time.perf_counter() - t, 2))
    peak = status_mb("VmHWM") if reset_ok else None
    peak = peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    flagged = set(result.offending)
    report = result.details["benchmarks"][name]
    figures = {
        "pairs": pairs.height, "distinct_prompts": result.details["n_prompts"], "benchmark": name,
        "items": items.height, "seconds": seconds, "best_seconds": min(seconds),
        "peak_rss_mb": round(peak, 1), "rss_before_mb": round(before or 0.0, 1), "peak_reset": reset_ok,
        "recall": len(flagged & contaminated) / len(contaminated) if contaminated else None,
        "false_positives": len(flagged - contaminated), "contaminated_items": report["contaminated"],
        "status": result.status,
    }
    print(f"check: {', '.join(f'{s:.2f}' for s in seconds)} s (best {min(seconds):.2f} s); peak RSS "
          f"{figures['peak_rss_mb']:.0f} MB (before the check {figures['rss_before_mb']:.0f} MB); recall "
          f"{figures['recall']:.3f} of {len(contaminated)} pairs, {figures['false_positives']} false positives; "
          f"{report['contaminated']} items of {items.height} contaminated")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
