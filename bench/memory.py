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
