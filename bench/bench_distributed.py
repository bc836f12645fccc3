"""`prefdata check` on Dask against one process, on the same realistic pairs (bench/realistic.py).

Both runs are the command the user runs, as a process, from a Parquet file: `prefdata check FILE
--batch-rows B --json ...` and the same with `--dask tcp://...` pointed at a LocalCluster of W worker
processes (one thread each) that this script starts, so it can ask each worker for its own peak RSS
(`resource.getrusage` in the worker, by `Client.run`). With --batch-rows below the file's rows the
file is imported into temporary Parquet shards, and the workers read those shards themselves.
Printed: wall seconds and peak RSS of each command (os.wait4's rusage of that process: at least
this script's own ~0.2 GB, which a child's ru_maxrss starts from), each worker's peak RSS (VmHWM), and whether the two reports agree (status, metric, message, offending ids).

    python bench/bench_distributed.py --n 1000000 --workers 2 --batch-rows 250000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _peak_gb() -> float:
    """This process's peak RSS since its exec (VmHWM; ru_maxrss would carry the spawning parent's)."""
    from bench.memory import status_mb

    return (status_mb("VmHWM") or 0.0) / 1e3


def _rss_gb() -> float:
    from bench.memory import status_mb

    return (status_mb("VmRSS") or 0.0) / 1e3


def _command(args: list[str], env: dict, client=None) -> tuple[float, float, int, dict]:
    """(wall seconds, peak RSS GB, exit status, {worker: (its largest sampled RSS GB, seconds into the
    command)}) of one command; with a client, the workers' RSS is sampled every 2 s, to say in which
    check a worker peaked (the report's seconds per check give the order)."""
    import threading

    started = time.perf_counter()
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    largest: dict = {}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(2.0):
            try:
                now = client.run(_rss_gb)
            except Exception:  # a worker restarting: sample again next time
                continue
            for worker, gb in now.items():
                if gb > largest.get(worker, (0.0, 0.0))[0]:
                    largest[worker] = (gb, time.perf_counter() - started)

    sampler = threading.Thread(target=sample, daemon=True) if client is not None else None
    if sampler:
        sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    done.set()
    if sampler:
        sampler.join()
    return time.perf_counter() - started, usage.ru_maxrss / 1e6, os.waitstatus_to_exitcode(status), largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=250_000)
    parser.add_argument("--data", type=Path, default=None, help="the realistic Parquet file (made if missing)")
    parser.add_argument("--skip-single", action="store_true", help="only the Dask run (no comparison)")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    data = args.data or Path(tempfile.gettempdir()) / f"prefdata-bench-realistic-{args.n}.parquet"
    if not data.exists():  # in a child: this process stays small, and its children's ru_maxrss start from it
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); from bench.realistic "
                        f"import write_realistic; write_realistic({str(data)!r}, {args.n}, seed=0)"], check=True)
        print(f"wrote {data} ({args.n} pairs) in {time.perf_counter() - started:.0f} s")
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    out = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    base = [sys.executable, "-m", "prefdata", "check", str(data), "--batch-rows", str(args.batch_rows)]

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40, local_directory=str(out)) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        wall, peak, code, sampled = _command([*base, "--json", str(out / "dask.json"), "--dask",
                                              cluster.scheduler_address], env, client)
        workers = client.run(_peak_gb)
        restarted = pids != client.run(os.getpid)
    print(f"dask: {args.n} pairs, {args.workers} workers x 1 thread, --batch-rows {args.batch_rows}: "
          f"{wall:.0f} s wall, exit {code}, client (the command) peak RSS {peak:.2f} GB, "
          f"worker peak RSS {', '.join(f'{gb:.2f}' for gb in workers.values())} GB"
          + (" (a worker was restarted: its peak is the new process's)" if restarted else ""))
    print("largest sampled worker RSS (GB at seconds into the command): "
          + ", ".join(f"{gb:.2f} at {at:.0f} s" for gb, at in sampled.values()))
    many = json.loads((out / "dask.json").read_text())["checks"]
    for c in many:
        if "seconds" in c["details"]:
            print(f"  {c['id']:24} {c['details']['seconds']:8.1f} s on dask")
    if args.skip_single:
        return
    wall1, peak1, code1, _ = _command([*base, "--json", str(out / "one.json")], env)
    print(f"one process: {wall1:.0f} s wall, exit {code1}, peak RSS {peak1:.2f} GB")
    one = json.loads((out / "one.json").read_text())["checks"]
    differ = [a["id"] for a, b in zip(one, many)
              if (a["status"], a["metric"], a["message"], a["offending"]) != (b["status"], b["metric"], b["message"],
                                                                            b["offending"])]
    print(f"reports agree (status, metric, message, offending ids): {not differ and len(one) == len(many)}"
          + (f"; differ: {', '.join(differ)}" if differ else ""))


if __name__ == "__main__":
    main()
