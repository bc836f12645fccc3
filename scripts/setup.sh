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
install() {
  if ! .venv/bin/python -m pip install -q "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed: pip install $* (full log: $log)" >&2
    exit 1
  fi
}
: >"$log"
install --upgrade pip
# torch first, pinned: this version is a CPU build here; an unpinned torch pulls a multi-GB CUDA
# build. A GPU user who already has torch in the venv keeps it.
.venv/bin/python -c "import torch" 2>/dev/null || install "torch==2.13.0"
install -c constraints.txt -e ".[dev]"
touch "$stamp"
echo "set up .venv"
