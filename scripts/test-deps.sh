#!/usr/bin/env bash
# What `make test` needs beyond .venv: Debian's chromium, which tests/test_argilla.py drives through
# Playwright (the Python package comes with the dev extra). Installed when missing and this user may
# install system packages (root, or sudo without a password); otherwise one line says that the browser
# test will skip, and how to install it. A rerun costs nothing.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo="sudo -n"
else
  echo "chromium is not installed, so the browser test will skip: sudo apt-get install chromium fonts-liberation"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium is not installed and this is no Debian/Ubuntu system (no apt-get): the browser test will skip"
  exit 0
fi
echo "installing chromium for the browser test (apt-get; log: .venv/test-deps.log)"
log=.venv/test-deps.log
mkdir -p .venv
if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
       --no-install-recommends chromium fonts-liberation; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "could not install chromium (full log: $log): the browser test will skip"
fi
