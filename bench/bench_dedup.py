"""Near-duplicate detection: prefdata's vectorised MinHash-LSH against datasketch's MinHashLSH.

    .venv/bin/python bench/bench_dedup.py --n 1000000            # ours on 1M and 100k, datasketch on 100k
    .venv/bin/python bench/bench_dedup.py --n 100000             # both on the same 100k

Input: the prompts of `bench.synth.make_synthetic_pairs(n)` (~200 characters each, with ~1% exact and
~1% near-duplicate prompts injected, their ids known). Both methods get the same settings: Jaccard
threshold 0.8, 128 permutations, shingles = byte 5-grams of the normalised prompt (normalisation
counted in both timings). datasketch is used the standard way: one MinHash per prompt
(`update_batch` with its shingles), `insert` every prompt, then `query` every prompt; its query
results are taken as near-duplicate pairs. Both methods' pairs go through the same connected-
components step; every member of a cluster after its first row is "flagged".

datasketch is run on the first `--datasketch-n` prompts (default 100,000: it needs ~6 minutes for
1M), and ours is run on the same prompts too, so the speed ratio compares identical input. Each run
happens in a fresh Python process; after loading the prompts the process's peak RSS is reset
(/proc/self/clear_refs), so "peak RSS" is the high-water mark during the run itself (interpreter,
libraries and prompts included) and "extra" is that peak minus the process's size before the run.

Reported per run: seconds (ours: the fastest of --repeats runs in the same process, since a shared
machine's timings are noisy; all runs are printed too), peak RSS, recall on the injected near
duplicates (and exact duplicates), and false positives = flagged rows that are not injected
duplicates. Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.memory import reset_peak, status_mb  # noqa: E402

THRESHOLD = 0.8
NUM_PERM = 128
NGRAM = 5


def _peak_rss_mb(reset_ok: bool) -> float:
    peak = status_mb("VmHWM") if reset_ok else None
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------------------------
# the two methods (run inside a worker process)


def run_ours(texts, threshold: float, num_perm: int, ngram: int):
    from prefdata.checks.dedup import find_near_duplicates

    found = find_near_duplicates(texts, threshold=threshold, num_perm=num_perm, ngram=ngram)
    return found.flagged, f"{found.bands}x{found.rows}"


def run_datasketch(texts, threshold: float, num_perm: int, ngram: int):
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    from prefdata.checks.dedup import normalise_series
    from prefdata.checks.minhash import _components

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    sketches = []
    for i, text in enumerate(normalise_series(texts).to_list()):
        data = text.encode("utf-8")
        shingles = {data[j : j + ngram] for j in range(len(data) - ngram + 1)} or {data}
        sketch = MinHash(num_perm=num_perm)
        sketch.update_batch(list(shingles))
        lsh.insert(i, sketch)
        sketches.append(sketch)
    a, b = [], []
    for i, sketch in enumerate(sketches):
        for j in lsh.query(sketch):
            if j != i:
                a.append(i)
                b.append(j)
    label = _components(len(sketches), np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    return label != np.arange(len(sketches)), f"{lsh.b}x{lsh.r}"


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    import polars as pl

    import prefdata.checks.dedup  # noqa: F401  (imported before the baseline, like datasketch below)

    if args.worker == "datasketch":
        import datasketch  # noqa: F401
    texts = pl.read_parquet(args.input)["prompt"].head(args.rows).rechunk()
    reset_ok = reset_peak()
    baseline = status_mb("VmRSS") if reset_ok else _peak_rss_mb(False)
    method = run_ours if args.worker == "ours" else run_datasketch
    times = []
    for _ in range(max(1, args.repeats)):
        start = time.perf_counter()
        flagged, lsh = method(texts, THRESHOLD, NUM_PERM, NGRAM)
        times.append(time.perf_counter() - start)
    np.save(args.flagged_out, np.flatnonzero(flagged))
    print(json.dumps({"seconds": min(times), "times": times, "peak_mb": _peak_rss_mb(reset_ok),
                      "baseline_mb": baseline, "lsh": lsh}))


# ----------------------------------------------------------------------------------------------
# driver


def measure(method: str, input_path: Path, rows: int, workdir: Path, repeats: int) -> dict:
    flagged_out = workdir / f"{method}_{rows}.npy"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        method,
        "--input",
        str(input_path),
        "--rows",
        str(rows),
        "--flagged-out",
        str(flagged_out),
        "--repeats",
        str(repeats),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} on {rows} rows failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    import numpy as np

    result.update(method=method, rows=rows, flagged=set(np.load(flagged_out).tolist()))
    return result


def score(result: dict, truth_rows: dict[str, list[int]]) -> dict:
    rows = result["rows"]
    near = {r for r in truth_rows["near_duplicates"] if r < rows}
    exact = {r for r in truth_rows["exact_duplicates"] if r < rows}
    flagged = result["flagged"]
    result["n_near"] = len(near)
    result["recall_near"] = len(flagged & near) / len(near) if near else float("nan")
    result["recall_exact"] = len(flagged & exact) / len(exact) if exact else float("nan")
    result["false_positives"] = len(flagged - near - exact)
    result["n_other"] = rows - len(near) - len(exact)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000, help="synthetic prompts (default 1,000,000)")
    parser.add_argument(
        "--datasketch-n",
        type=int,
        default=100_000,
        help="prompts given to datasketch, and to ours for the ratio (default 100,000; capped at --n)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of ours per size; the fastest is reported (default 3)"
    )
    parser.add_argument("--datasketch-repeats", type=int, default=1, help="runs of datasketch (default 1)")
    parser.add_argument("--worker", choices=("ours", "datasketch"), help=argparse.SUPPRESS)
    parser.add_argument("--input", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--flagged-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return

    from bench.synth import make_synthetic_pairs

    small = min(args.datasketch_n, args.n)
    start = time.perf_counter()
    frame, truth = make_synthetic_pairs(args.n, seed=args.seed)
    n_exact, n_near = len(truth["exact_duplicates"]), len(truth["near_duplicates"])
    print(
        f"generated {args.n:,} synthetic pairs in {time.perf_counter() - start:.1f} s "
        f"(injected: {n_exact:,} exact, {n_near:,} near duplicates)"
    )
    truth_rows = {kind: [int(i[1:]) - 1 for i in ids] for kind, ids in truth.items()}  # "p0000001" -> row 0

    with tempfile.TemporaryDirectory(prefix="bench_dedup_") as tmp:
        workdir = Path(tmp)
        input_path = workdir / "prompts.parquet"
        frame.select("prompt").write_parquet(input_path)
        del frame
        runs = []
        if args.n > small:
            runs.append(measure("ours", input_path, args.n, workdir, args.repeats))
        runs.append(measure("ours", input_path, small, workdir, args.repeats))
        runs.append(measure("datasketch", input_path, small, workdir, args.datasketch_repeats))
        runs = [score(r, truth_rows) for r in runs]

    print()
    print(
        f"threshold {THRESHOLD}, num_perm {NUM_PERM}, shingles: byte {NGRAM}-grams of the normalised "
        f"prompt; seconds = fastest of {args.repeats} run(s) for ours, {args.datasketch_repeats} for datasketch"
    )
    header = (f"{'method':<11} {'prompts':>9} {'bands x rows':>12} {'seconds':>8} {'peak RSS MB':>11} "
              f"{'extra MB':>9} {'recall near':>11} {'recall exact':>12} {'false pos.':>10}")
    print(header)
    print("-" * len(header))
    for r in runs:
        print(f"{r['method']:<11} {r['rows']:>9,} {r['lsh']:>12} {r['seconds']:>8.2f} {r['peak_mb']:>11.0f} "
              f"{r['peak_mb'] - r['baseline_mb']:>9.0f} {r['recall_near']:>11.4f} {r['recall_exact']:>12.4f} "
              f"{r['false_positives']:>10,}")
    ours_small, ds = runs[-2], runs[-1]
    print()
    print(f"speed ratio on the same {small:,} prompts: datasketch / ours = "
          f"{ds['seconds'] / ours_small['seconds']:.1f}x")
    for r in runs:
        print(f"  {r['method']} {r['rows']:,}: all runs " + ", ".join(f"{t:.2f}" for t in r["times"]) + " s")
    if args.n > small:
        big = runs[0]
        print(
            f"ours: {small:,} prompts {ours_small['seconds']:.2f} s, {args.n:,} prompts "
            f"{big['seconds']:.2f} s, ratio {big['seconds'] / ours_small['seconds']:.1f} "
            f"for {args.n / small:.0f}x the prompts"
        )


if __name__ == "__main__":
    main()
