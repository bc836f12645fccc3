"""`prefdata demo` as a user runs it: a subprocess, timed from outside, with the figures it saved.

    .venv/bin/python bench/bench_demo.py                       # `make demo` (set-up is a no-op once .venv exists)
    .venv/bin/python bench/bench_demo.py --cmd prefdata        # `prefdata demo` directly (--config FILE)
    .venv/bin/python bench/bench_demo.py --out /tmp/d --json /tmp/d.json

Runs in a fresh output folder (and a fresh Prefect home), so nothing is reused but the set-up and
the shipped world. Prints the wall seconds, the terminal's line count, the stage seconds and the
summary's figures (held-out accuracy before and after, the judge's decided share and agreement, the
audit's kappa, the share of labels from humans). Figures only; no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(cmd: str, out: Path, config: Path | None = None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PREFECT_HOME": str(out.parent / f"{out.name}-prefect")}
    if cmd == "make":
        argv = ["make", "demo"]  # writes .prefdata/demo, the Makefile's folder
        out = REPO / ".prefdata" / "demo"
        shutil.rmtree(out, ignore_errors=True)
        env.pop("PREFECT_HOME")
    else:
        argv = [str(REPO / ".venv" / "bin" / "prefdata"), "demo", "--out", str(out)]
        argv += ["--config", str(config)] if config else []
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    (out.parent / f"{out.name}.terminal.txt").write_text(proc.stdout + proc.stderr)  # what the user saw
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    j, audit, labels = summary["judge"], summary["audit"], summary["labels"]
    return {
        "command": " ".join(argv), "wall_s": round(wall, 1), "stdout_lines": len(proc.stdout.splitlines()),
        "stage_seconds": summary["stage_seconds"], "demo_seconds": summary["seconds"],
        "task_accuracy": [summary["task_accuracy_before"], summary["task_accuracy_after"]],
        "general_accuracy": [summary["general_accuracy_before"], summary["general_accuracy_after"]],
        "comparisons": j["comparisons"], "judge_decided_share": j["decided_share"],
        "judge_agreement_decided": j["agreement_decided"], "judge_first_position_rate": j["first_position_rate"],
        "judge_longer_preference": j["longer_preference"], "judge_longer_preference_n": j["longer_preference_n"],
        "audit_n": audit["n"], "audit_kappa": audit["judge_human_agreement"], "audit_raw_agreement": audit["raw_agreement"],
        "labels_from_humans": labels["human_share"], "queued": summary["dataset"]["queued"],
        "votes": summary["dataset"]["votes"], "iaa": summary["iaa"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cmd", choices=("make", "prefdata"), default="make")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "prefdata-bench-demo")
    parser.add_argument("--config", type=Path, help="prefdata: a demo config (e.g. `argilla: 'off'`, so an Argilla "
                                                    "someone else started is not used).")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args()
    figures = run(args.cmd, args.out, args.config)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
