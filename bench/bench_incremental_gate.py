"""The gate of a grown version (issue 46 items 2-3): `check CHILD` (the row-local checks take the
validated parent's stored results for its files) against `check CHILD --full` and against `check
NIGHT`, the night imported as a version of its own.

    .venv/bin/python bench/bench_incremental_gate.py --parent 1000000 --night 10000

Data: `bench.realistic.make_realistic_pairs` (collections-shaped: several completions a prompt sharing
their starts, canned replies, injected duplicates), the parent without its injected answer leaks so
that it can be published under CONFIG (shares of duplicates and length violations it tolerates, the
checks a made-up-word corpus cannot meet waived). The parent is imported and published once (timed,
once); the night is grown onto it and imported alone; then the three checks run --runs times each,
interleaved, each a CLI subprocess with its peak RSS, and the duplicate checks' own seconds (their
reports' details), and the five slowest checks of each run; last, `publish CHILD` and `publish
NIGHT` once each (issue 46 item 3 is about publish; the night is made without answer leaks so that
both pass). `--no-near` waives near_duplicates: it hashes every row's texts for
exact_duplicates when it runs, so exact_duplicates' reuse of the parent's stored keys shows alone.
The parent is made a part of 1M pairs at a time (`bench.realistic.PART_ROWS`, each part its own
seed), so that 10M pairs fit in the memory of 1M; `--make-only` writes the two files into
`--workdir` and stops, and a later run with that workdir uses them again (a store must not be
there yet). Figures only; the last line is their JSON.
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

CONFIG = """checks:
  length_ratio: {max_violation_share: 0.3}
  exact_duplicates: {max_share: 0.05}
  near_duplicates: {max_share: 0.05}
  gx: {max_length_ratio: 1000.0}
  category_coverage: {waive: made-up words carry no topic the keyword tagger knows}
  annotation_guidelines: {waive: a benchmark corpus without a card}
  min_size: {waive: a night published alone is below it}
"""

DUPLICATES = ("exact_duplicates", "near_duplicates")
MAKE = """
import sys
import polars as pl
import pyarrow.parquet as pq
from bench.realistic import PART_ROWS, make_realistic_pairs
parent_file, night_file, n, night = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# the parent a part at a time (bench.realistic.write_realistic's parts and seeds), so that 10M pairs
# are made in the memory of 1M; up to 1M it is one part, the rows of the earlier figures
writer = None
for part, start in enumerate(range(0, n, PART_ROWS)):
    rows, truth = make_realistic_pairs(min(PART_ROWS, n - start), seed=part, first_id=start + 1)
    table = rows.filter(~pl.col("id").is_in(truth["answer_leakage"])).to_arrow()
    writer = writer or pq.ParquetWriter(parent_file, table.schema, compression="zstd")
    writer.write_table(table, row_group_size=125_000)
writer.close()
fresh, fresh_truth = make_realistic_pairs(night, seed=1)
fresh = fresh.filter(~pl.col("id").is_in(fresh_truth["answer_leakage"]))
fresh.with_columns(pl.col("id").str.replace("^u", "n")).write_parquet(night_file)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, default=1_000_000)
    parser.add_argument("--night", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--no-near", action="store_true", help="waive near_duplicates (see above)")
    parser.add_argument("--no-full", action="store_true",
                        help="leave out `check CHILD --full` (at 10M it is a full check of minutes)")
    parser.add_argument("--make-only", action="store_true",
                        help="write the parent and night files into --workdir and stop (made once, used by later runs)")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-incremental-"))
    work.mkdir(parents=True, exist_ok=True)
    parent_file, night_file = work / f"parent-{args.parent}.parquet", work / f"night-{args.night}.parquet"
    config = work / "checks.yaml"
    config.write_text(CONFIG.replace("near_duplicates: {max_share: 0.05}", "near_duplicates: {waive: bench}")
                      if args.no_near else CONFIG)
    if not (parent_file.is_file() and night_file.is_file()):  # a --workdir made before is used again
        subprocess.run([sys.executable, "-c", MAKE, str(parent_file), str(night_file), str(args.parent),
                        str(args.night)], check=True, cwd=REPO)
    if args.make_only:
        print(f"made {parent_file} and {night_file}")
        return
    if (work / "store").exists():
        raise SystemExit(f"{work / 'store'} exists: give a --workdir without a store (the data files are reused)")
    env = {**os.environ, "PREFDATA_STORE": str(work / "store"), "HF_HUB_OFFLINE": "1"}
    prefdata = [sys.executable, "-m", "prefdata"]

    def step(*argv: str, ok: tuple[int, ...] = (0,)) -> dict:
        done = run([*prefdata, *argv], env, work)
        if done["rc"] not in ok:
            raise SystemExit(f"{' '.join(argv)}: exit {done['rc']}\n{done['stdout'][-3000:]}{done['stderr'][-2000:]}")
        return done

    parent = _version(step("import", str(parent_file), "--name", "big")["stdout"])
    published = step("publish", parent, "--config", str(config))
    print(f"parent {parent}: published in {published['seconds']} s, peak {published['peak_rss_mb']} MB", flush=True)
    child = _version(step("import", str(night_file), "--name", "big", "--onto", parent)["stdout"])
    night = _version(step("import", str(night_file), "--name", "night")["stdout"])

    kinds = {"child": (child,), "child_full": (child, "--full"), "night": (night,)}
    if args.no_full:
        del kinds["child_full"]
    timings: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for k in range(args.runs):
        for kind, argv in kinds.items():
            out = work / f"{kind}-{k}.json"
            done = step("check", *argv, "--config", str(config), "--json", str(out), ok=(0, 1))
            assert kind != "child" or "reused:" in done["stdout"], done["stdout"][-2000:]
            checks = {c["id"]: c for c in json.loads(out.read_text())["checks"]}
            done["dups"] = {c: checks[c]["details"].get("seconds") for c in DUPLICATES if c in checks}
            timings[kind].append(done)
            slowest = sorted(((c["details"].get("seconds") or 0, i) for i, c in checks.items()), reverse=True)[:5]
            print(f"  {kind:10s} run {k}: {done['seconds']} s, peak {done['peak_rss_mb']} MB; slowest checks: "
                  + ", ".join(f"{i} {s:.2f} s" for s, i in slowest), flush=True)
    figures: dict = {"parent_pairs": args.parent, "night_pairs": args.night,
                     "parent_publish_seconds": published["seconds"]}
    for kind in kinds:
        figures[f"check_{kind}_seconds_median"] = statistics.median(t["seconds"] for t in timings[kind])
        figures[f"check_{kind}_peak_rss_mb_max"] = max(t["peak_rss_mb"] for t in timings[kind])
        for check in DUPLICATES:
            seconds = [t["dups"][check] for t in timings[kind] if t["dups"].get(check) is not None]
            if seconds:
                figures[f"{check}_{kind}_seconds_median"] = statistics.median(seconds)
    # issue 46 item 3 is about publish: the child's (it passes: the night carries no leaks) and the night's
    for kind, ref in (("child", child), ("night", night)):
        done = step("publish", ref, "--config", str(config))
        figures[f"publish_{kind}_seconds"], figures[f"publish_{kind}_peak_rss_mb"] = done["seconds"], done["peak_rss_mb"]
        print(f"  publish {kind}: {done['seconds']} s, peak {done['peak_rss_mb']} MB", flush=True)
    figures["publish_child_over_night"] = round(figures["publish_child_seconds"] / figures["publish_night_seconds"], 2)
    figures["child_over_night"] = round(figures["check_child_seconds_median"] / figures["check_night_seconds_median"], 2)
    if "child_full" in kinds:
        figures["child_over_full"] = round(figures["check_child_seconds_median"] / figures["check_child_full_seconds_median"], 2)
        figures["publish_child_over_full"] = round(figures["publish_child_seconds"]
                                                   / figures["check_child_full_seconds_median"], 2)
    for key, value in figures.items():
        print(f"{key:36s} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
