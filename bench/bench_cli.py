"""The user's path, timed as a user runs it: the `prefdata` CLI as a subprocess on a file on disk.

    .venv/bin/python bench/bench_cli.py --sizes 100000              # ~ a few minutes
    .venv/bin/python bench/bench_cli.py --sizes 100000,1000000 --json .prefdata/bench/cli.json
    .venv/bin/python bench/bench_cli.py --sizes 1000000 --formats parquet,jsonl,jsonl.gz

For each size, `bench/realistic.py` writes UltraFeedback-binarized-shaped pairs (4 completions per
prompt, shared chosen replies, canned refusals, injected faults with known ids; by default shaped
like real collections: sibling completions that start alike, canned replies as chosen too;
`--shape plain` for the earlier shape) to Parquet once, and the same rows to JSON Lines (gzipped, zstd or not), CSV or TSV for the other --formats (cached
in --data-dir; writing is not timed). Then, per format, each in a fresh process, in this order:

    read: polars     polars reads the same file: read_parquet, read_ndjson (of the decompressed
                     bytes for .gz, .zst), read_csv (TSV: separator "\\t")   (the yardstick)
    read: datasets   python -c "datasets.Dataset.from_parquet(FILE)" (Parquet only)
    import           prefdata import FILE --name big
    check FILE       prefdata check FILE --json R --report-dir D
    filter           prefdata filter big@V
    publish          prefdata publish big@V'   (the filtered version)

The reads run three times, in a fresh process each: before import, after check FILE and after
publish; the yardstick is the median of the three (one 2-second read on this shared machine took
1.49-2.11 s within ten minutes, against 15-17 s for the import), and each read's time is listed.
Wall time is the child's whole life (interpreter start and imports included) for the CLI commands;
the reads' own time is measured inside their process, so the ratio "x polars" (command wall / polars
read) is the strict one. Peak RSS is the child's ru_maxrss from os.wait4 (that process alone).
Recall and false positives of the injected exact and near duplicates come from the check's complete
offending lists (D/offending/<check>.txt). Figures only, no assertions. The store is a fresh
temporary folder (PREFDATA_STORE) per size. `--steps import,check` leaves out filter and publish;
`--keep-reports DIR` keeps check FILE's JSON report and offending lists (to compare two runs' verdicts).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PREFDATA = str(Path(sys.executable).parent / "prefdata")
ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
       "DO_NOT_TRACK": "1", "HF_DATASETS_OFFLINE": "1"}
STEPS = ("import", "check", "filter", "publish")
READ = {
    "parquet": {
        "polars": "import polars as pl, sys, time; t = time.perf_counter(); f = pl.read_parquet(sys.argv[1]); "
                  "print(time.perf_counter() - t, f.height)",
        "datasets": "import datasets, sys, time, tempfile; datasets.disable_progress_bars(); t = time.perf_counter(); "
                    "d = datasets.Dataset.from_parquet(sys.argv[1], cache_dir=sys.argv[2]); "
                    "print(time.perf_counter() - t, d.num_rows)",
    },
    "jsonl": {
        "polars": "import polars as pl, sys, time; t = time.perf_counter(); f = pl.read_ndjson(sys.argv[1]); "
                  "print(time.perf_counter() - t, f.height)",
    },
    "jsonl.gz": {
        "polars": "import gzip, io, polars as pl, sys, time; t = time.perf_counter(); "
                  "f = pl.read_ndjson(io.BytesIO(gzip.open(sys.argv[1]).read())); print(time.perf_counter() - t, f.height)",
    },
    "jsonl.zst": {
        "polars": "import io, polars as pl, sys, time, zstandard; t = time.perf_counter(); "
                  "f = pl.read_ndjson(io.BytesIO(zstandard.ZstdDecompressor().stream_reader(open(sys.argv[1], 'rb')).read())); "
                  "print(time.perf_counter() - t, f.height)",
    },
    "csv": {
        "polars": "import polars as pl, sys, time; t = time.perf_counter(); f = pl.read_csv(sys.argv[1]); "
                  "print(time.perf_counter() - t, f.height)",
    },
    "tsv": {
        "polars": "import polars as pl, sys, time; t = time.perf_counter(); f = pl.read_csv(sys.argv[1], separator='\\t'); "
                  "print(time.perf_counter() - t, f.height)",
    },
}
# Parquet -> the other formats, in a child (its memory is not the commands'), a row group at a time:
# at 10M pairs the whole file as JSON text is 14 GB, more than a frame and its text fit in here
CONVERT = ("import gzip, polars as pl, pyarrow.parquet as pq, sys; src, out = sys.argv[1], sys.argv[2]\n"
           "if out.endswith(('.csv', '.tsv')):\n"
           "    pl.scan_parquet(src).sink_csv(out, separator='\\t' if out.endswith('.tsv') else ',')\n"
           "    sys.exit()\n"
           "if out.endswith('.gz'): sink = gzip.open(out, 'wb', 6)\n"
           "elif out.endswith('.zst'):\n"
           "    import zstandard; sink = zstandard.open(out, 'wb', cctx=zstandard.ZstdCompressor(level=3))\n"
           "else: sink = open(out, 'wb')\n"
           "with sink:\n"
           "    for batch in pq.ParquetFile(src).iter_batches(batch_size=100_000):\n"
           "        sink.write(pl.from_arrow(batch).write_ndjson().encode())")


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> dict:
    """Run `cmd`; wall seconds, peak RSS (MB) of that child alone, exit code and output."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return {"seconds": round(wall, 2), "peak_rss_mb": round(usage.ru_maxrss / 1024), "rc": child.returncode,
                "stdout": out.read().decode(errors="replace"), "stderr": err.read().decode(errors="replace")}


def _version(stdout: str) -> str:
    found = re.findall(r"version: (\S+)", stdout)
    if not found:
        raise RuntimeError(f"no version in the output:\n{stdout[-2000:]}")
    return found[-1]


def _read_ids(report_dir: Path, report: dict, check_id: str) -> set[str]:
    """A check's complete offending ids: the report folder's list, else the (possibly cut) JSON list."""
    listed = report_dir / "offending" / f"{check_id}.txt"
    if listed.exists():
        return set(listed.read_text(encoding="utf-8").split())
    for c in report["checks"]:
        if c["id"] == check_id:
            return set(c["offending"])
    return set()


def _warm(path: Path) -> None:
    """Read the file once, untimed, so the yardstick and the commands all find it in the page cache:
    the first read of a 1.4 GB file from this machine's disk took 26 s against 2 s warm."""
    with path.open("rb") as handle:
        while handle.read(64 << 20):
            pass


def one_size(n: int, data_dir: Path, seed: int, fmt: str = "parquet", reads: bool = True,
             shape: str = "collections", steps: tuple[str, ...] = STEPS, keep_reports: Path | None = None) -> dict:
    # the plain shape keeps the file names of the runs before the collections shape
    parquet = data_dir / (f"realistic-{n}-{seed}.parquet" if shape == "plain" else f"realistic-{n}-{seed}-{shape}.parquet")
    truth_path = parquet.with_suffix(".truth.json")
    if not parquet.exists() or not truth_path.exists():
        # in a child: a forked child's ru_maxrss starts from the parent's RSS, so this process
        # must stay small for the commands' peak RSS to be their own
        subprocess.run([sys.executable, "-m", "bench.realistic", str(parquet), "--n", str(n), "--seed", str(seed),
                        "--shape", shape],
                       check=True, cwd=REPO, env={**os.environ, **ENV}, stdout=subprocess.DEVNULL)
    path = parquet.with_suffix(f".{fmt}")
    if not path.exists():
        subprocess.run([sys.executable, "-c", CONVERT, str(parquet), str(path)], check=True, cwd=REPO)
    truth = json.loads(truth_path.read_text())
    _warm(path)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        tmp = Path(tmp)
        env = {**os.environ, **ENV, "PREFDATA_STORE": str(tmp / "store")}
        reads_each: dict[str, list[dict]] = {}

        def yardsticks() -> None:  # each read in a fresh process
            for name, code in READ[fmt].items() if reads else ():
                r = run([sys.executable, "-c", code, str(path), str(tmp / "hf-cache")], env, tmp)
                if r["rc"] != 0:
                    raise RuntimeError(f"{name} read failed: {r['stderr'][-2000:]}")
                r["seconds_in_process"] = round(float(r["stdout"].split()[0]), 2)
                reads_each.setdefault(f"read: {name}", []).append(r)

        yardsticks()
        rows["import"] = run([PREFDATA, "import", str(path), "--name", "big"], env, tmp)
        version = _version(rows["import"]["stdout"])
        report_dir = tmp / "report"
        rows["check FILE"] = run([PREFDATA, "check", str(path), "--json", str(tmp / "report.json"),
                                  "--report-dir", str(report_dir)], env, tmp)
        yardsticks()
        if "filter" in steps:
            rows["filter"] = run([PREFDATA, "filter", version], env, tmp)
            filtered = _version(rows["filter"]["stdout"])
            rows["publish"] = run([PREFDATA, "publish", filtered], env, tmp)
        yardsticks()
        if keep_reports is not None:  # the check's JSON report and offending lists, to compare runs
            import shutil

            keep_reports.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / "report.json", keep_reports / f"report-{n}-{fmt}.json")
            shutil.copytree(report_dir / "offending", keep_reports / f"offending-{n}-{fmt}", dirs_exist_ok=True)
        for name, each in reads_each.items():  # the median of the three, each read's seconds kept
            middle = sorted(each, key=lambda r: r["seconds_in_process"])[len(each) // 2]
            rows = {name: {**middle, "seconds_each": [r["seconds_in_process"] for r in each]}, **rows}
        report = json.loads((tmp / "report.json").read_text())
        exact = _read_ids(report_dir, report, "exact_duplicates")
        near = _read_ids(report_dir, report, "near_duplicates")
        complete = (report_dir / "offending").is_dir()

    injected = {k: set(truth[k]) for k in ("exact_duplicates", "near_duplicates", "length_ratio", "answer_leakage",
                                            "identical_responses", "empty_prompt")}
    faulty = set().union(*injected.values())
    dups = injected["exact_duplicates"] | injected["near_duplicates"]
    quality = {
        "offending_lists_complete": complete,
        "exact_recall": round(len(exact & injected["exact_duplicates"]) / len(injected["exact_duplicates"]), 4),
        # an exact copy is also a near duplicate: near_duplicates may flag both kinds
        "near_recall": round(len(near & injected["near_duplicates"]) / len(injected["near_duplicates"]), 4),
        "exact_flagged_not_injected": len(exact - injected["exact_duplicates"]),
        "near_flagged_not_injected": len(near - dups),
        "clean_rows_flagged": len((exact | near) - faulty),
    }
    polars_read = rows["read: polars"]["seconds_in_process"] if reads else None
    for name, r in rows.items():
        r["x_polars"] = round((r.get("seconds_in_process") or r["seconds"]) / polars_read, 1) if reads else None
        tail = (r.pop("stdout") + r.pop("stderr")).strip().splitlines()
        if r["rc"] not in (0, 1):
            r["error"] = "\n".join(tail[-5:])
    return {"n": n, "seed": seed, "shape": shape, "format": fmt, "file_mb": round(path.stat().st_size / 2**20), "steps": rows,
            "duplicates": quality}


def table(runs: list[dict]) -> str:
    lines = []
    for r in runs:
        lines.append(f"\n{r['n']:,} pairs ({r['file_mb']} MB {r.get('format', 'parquet')}, {r.get('shape', 'plain')} shape)")
        lines.append(f"{'step':16}{'seconds':>10}{'x polars':>10}{'peak RSS':>12}{'rc':>4}")
        for name, s in r["steps"].items():
            seconds = s.get("seconds_in_process", s["seconds"])
            ratio = "-" if s["x_polars"] is None else f"{s['x_polars']:.1f}"
            lines.append(f"{name:16}{seconds:>10.2f}{ratio:>10}{s['peak_rss_mb']:>10,}MB{s['rc']:>4}")
        for name, s in r["steps"].items():
            if "seconds_each" in s:
                lines.append(f"{name}, each run: " + " / ".join(f"{x:.2f}" for x in s["seconds_each"]) + " (median used)")
        lines.append("duplicates: " + ", ".join(f"{k} {v}" for k, v in r["duplicates"].items()))
    if len(runs) >= 2 and runs[0]["n"] != runs[-1]["n"]:
        small, big = runs[0], runs[-1]
        ratios = {k: round(big["steps"][k]["seconds"] / small["steps"][k]["seconds"], 1)
                  for k in big["steps"] if not k.startswith("read")}
        lines.append(f"\ntime({big['n']:,}) / time({small['n']:,}): "
                     + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--formats", default="parquet", help="Comma-separated: " + ", ".join(READ) + ".")
    parser.add_argument("--data-dir", type=Path, default=REPO / ".prefdata" / "bench" / "realistic")
    parser.add_argument("--json", type=Path, help="Write every figure here.")
    parser.add_argument("--no-reads", action="store_true",
                        help="Skip the yardstick reads: a whole-file read needs more memory than the commands at "
                             "10M pairs (13.5 GB for Parquet; about 28 GB for JSON Lines, text and frame).")
    parser.add_argument("--shape", choices=("collections", "plain"), default="collections",
                        help="bench/realistic.py's shape: collections (shared starts, canned replies as chosen too; "
                             "the default) or plain (the shape of the runs up to 2026-12-06)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help="import,check (always) and filter (with publish): which commands to time")
    parser.add_argument("--keep-reports", type=Path, help="Copy check FILE's JSON report and offending lists here.")
    args = parser.parse_args()
    steps = tuple(args.steps.split(","))
    runs = [one_size(int(n), args.data_dir, args.seed, fmt, not args.no_reads, args.shape, steps, args.keep_reports)
            for n in args.sizes.split(",") for fmt in args.formats.split(",")]
    print(table(runs))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "cpus": os.cpu_count()}, indent=1))


if __name__ == "__main__":
    main()
