"""Process memory for the benchmarks: current and peak RSS, and a reset of the peak (Linux)."""

from __future__ import annotations

from pathlib import Path


def status_mb(field: str) -> float | None:
    """A field of /proc/self/status in MB (VmRSS: now, VmHWM: the peak); None where unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def add_size_args(parser, batch: int, steps: int) -> None:
    """The memory benchmarks' model and run size: --hidden, --layers (bench_ppo_memory.build_models),
    --batch and --steps, with this benchmark's defaults for the last two."""
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--steps", type=int, default=steps)


def run_child(script: str, argv: list[str], env: dict | None = None) -> dict:
    """Run one configuration as `python script argv...` in a fresh process (so each peak RSS is its
    own) and return the JSON object on its last line of output; its stderr's tail on a failure."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])
