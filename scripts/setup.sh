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
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned: this version is a CPU build here; an unpinned torch pulls a multi-GB CUDA
# build. A GPU user who already has torch in the venv keeps it.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
touch "$stamp"
