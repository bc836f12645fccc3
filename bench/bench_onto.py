"""`prefdata import --onto`: what growing a big version by one night costs, against importing the
night as a version of its own (issue 46 item 1).

    .venv/bin/python bench/bench_onto.py --parent 1000000 --night 10000

The parent: `bench.realistic.make_realistic_pairs(--parent)` (UltraFeedback-shaped: several pairs a
prompt, canned refusals, injected duplicates) as Parquet, imported once (not timed). The night: fresh
realistic pairs of another seed, plus `--repeats` rows copied from the parent (a night meets old
pairs again). Timed side by side, --runs times each, as a user runs them (the CLI as a subprocess,
peak RSS of that process alone): `import NIGHT --name night` (standalone) and `import NIGHT --name big
--onto big@V`. Disk: bytes of files the child's folder holds that no other version's folder holds
(hard links counted once), against the standalone version's. Figures only; the last line of output
is their JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bench_cli import _version, run  # noqa: E402


MAKE = """
import sys
import polars as pl
from bench.realistic import make_realistic_pairs
parent_file, night_file, n, night, repeats = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
parent, _ = make_realistic_pairs(n, seed=0)
parent.write_parquet(parent_file)
fresh, _ = make_realistic_pairs(night, seed=1)
fresh = fresh.with_columns(pl.col("id").str.replace("^u", "n"))  # the night's own ids
pl.concat([fresh, parent.sample(repeats, seed=2)], how="diagonal_relaxed").write_parquet(night_file)
"""


def own_bytes(folder: Path) -> int:
    """Bytes of the files under `folder` that are not hard links shared with another folder."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.stat().st_nlink == 1)


def all_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, default=1_000_000)
    parser.add_argument("--night", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=100, help="parent rows the night repeats")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-onto-"))
    work.mkdir(parents=True, exist_ok=True)
    parent_file, night_file = work / "parent.parquet", work / "night.parquet"
    # made in a process of its own: a child's ru_maxrss starts from its parent's, so this one stays small
    subprocess.run([sys.executable, "-c", MAKE, str(parent_file), str(night_file), str(args.parent), str(args.night),
                    str(args.repeats)], check=True, cwd=REPO)

    env = {**os.environ, "PREFDATA_STORE": str(work / "store"), "HF_HUB_OFFLINE": "1"}
    prefdata = [sys.executable, "-m", "prefdata"]
    imported = run([*prefdata, "import", str(parent_file), "--name", "big"], env, work)
    parent = _version(imported["stdout"])
    print(f"parent {parent}: {args.parent} pairs imported in {imported['seconds']} s", flush=True)

    timings: dict[str, list[dict]] = {"standalone": [], "onto": []}
    refs: dict[str, str] = {}
    for k in range(args.runs):
        for kind in ("standalone", "onto"):
            name = f"{'night' if kind == 'standalone' else 'big'}{k}"  # a new name each run: nothing to reuse
            extra = ["--onto", parent] if kind == "onto" else []
            done = run([*prefdata, "import", str(night_file), "--name", name, *extra], env, work)
            if done["rc"]:
                raise SystemExit(done["stderr"][-2000:])
            refs[kind] = _version(done["stdout"])
            timings[kind].append(done)
            print(f"  {kind:10s} run {k}: {done['seconds']} s, peak {done['peak_rss_mb']} MB", flush=True)

    store = work / "store"
    child_dir = store / refs["onto"].replace("@", "/")
    standalone_dir = store / refs["standalone"].replace("@", "/")
    parent_dir = store / parent.replace("@", "/")
    figures = {
        "parent_pairs": args.parent, "night_pairs": args.night + args.repeats,
        **{f"{kind}_seconds_median": statistics.median(t["seconds"] for t in timings[kind]) for kind in timings},
        **{f"{kind}_peak_rss_mb_max": max(t["peak_rss_mb"] for t in timings[kind]) for kind in timings},
        "parent_bytes": all_bytes(parent_dir),
        "child_bytes_in_all": all_bytes(child_dir),
        "child_own_bytes": own_bytes(child_dir),
        "standalone_bytes": all_bytes(standalone_dir),
    }
    figures["onto_over_standalone_time"] = round(figures["onto_seconds_median"] / figures["standalone_seconds_median"], 2)
    figures["child_own_over_standalone_bytes"] = round(figures["child_own_bytes"] / figures["standalone_bytes"], 2)
    for key, value in figures.items():
        print(f"{key:34s} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
