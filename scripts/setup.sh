#!/usr/bin/env bash
# Create .venv and install prefdata with the pinned versions CI uses. Safe to rerun: it skips
# the install when pyproject.toml and constraints.txt have not changed since the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.prefdata-installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt constraints.txt ]; then
  exit 0
fi
# pip's own chatter (index warnings, build back-end notices) goes to a log, not the terminal; on a
# failure its last lines are shown.
log=.venv/setup.log
echo "setting up .venv (pinned packages; log: $log)"
start=$SECONDS
# One phase a line, each with its time when it ends, so a set-up of minutes is never silent.
phase() { printf '  %s ...' "$1"; phase_start=$SECONDS; }
done_phase() { printf ' done (%ss; %ss so far)\n' "$((SECONDS - phase_start))" "$((SECONDS - start))"; }
install() {
  if ! .venv/bin/python -m pip install -q "$@" >>"$log" 2>&1; then
    echo
    tail -n 30 "$log" >&2
    echo "setup failed: pip install $* (full log: $log)" >&2
    exit 1
  fi
}
: >"$log"
phase "1/3 pip itself"; install --upgrade pip; done_phase
# torch first, pinned: this version is a CPU build here; an unpinned torch pulls a multi-GB CUDA
# build. A GPU user who already has torch in the venv keeps it.
if .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "  2/3 torch: kept the one installed"
else
  phase "2/3 torch 2.13.0 (the CPU build)"; install "torch==2.13.0"; done_phase
fi
phase "3/3 prefdata with its pinned dependencies (constraints.txt; about 2 minutes)"
install -c constraints.txt -e ".[dev]"; done_phase
touch "$stamp"
echo "set up .venv in $((SECONDS - start))s"
