"""Time records.normalise_series (the duplicate checks' and the importer's block normaliser).

    .venv/bin/python bench/bench_normalise.py                        # 200k rows, best of 3
    .venv/bin/python bench/bench_normalise.py --against /tmp/records_before.py

Input: the prompt and chosen columns of `bench.realistic.make_realistic_pairs(n)` (synthetic,
ASCII text: the fast path's case). `--against FILE` also times the normalise_series of another copy
of prefdata/data/records.py (e.g. `git show HEAD:prefdata/data/records.py > /tmp/records_before.py`),
interleaved with this one's runs so both see the same machine load. Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.realistic import make_realistic_pairs  # noqa: E402
from prefdata.data import records  # noqa: E402


def _load(path: str):
    spec = importlib.util.spec_from_file_location("records_against", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", help="another records.py to time alongside")
    args = parser.parse_args()

    pairs, _ = make_realistic_pairs(args.n, seed=0)
    variants = {"current": records.normalise_series}
    if args.against:
        variants["against"] = _load(args.against).normalise_series
    for column in ("prompt", "chosen"):
        texts = pairs[column]
        mb = texts.str.len_bytes().sum() / 1e6
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, normalise in variants.items():
                start = time.perf_counter()
                normalise(texts)
                times[name].append(time.perf_counter() - start)
        for name, runs in times.items():
            print(f"{column:7s} {args.n} rows {mb:6.1f} MB  {name:8s} best {min(runs):.3f} s  "
                  f"(runs: {', '.join(f'{t:.3f}' for t in runs)})")
    if args.against:
        a, b = (variants[k](pairs["chosen"]).to_list() for k in ("current", "against"))
        print("same output on chosen:", a == b)


if __name__ == "__main__":
    main()
