# The two commands a new user needs: `make demo` and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV := .venv/bin
# Offline by default: no hub downloads, no telemetry, Prefect state inside the project.
export HF_HUB_OFFLINE ?= 1
export HF_HUB_DISABLE_TELEMETRY := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export PREFECT_HOME ?= $(CURDIR)/.prefdata/prefect
export PREFDATA_STORE ?= $(CURDIR)/.prefdata/store
SAMPLE ?= ../shared/data/hh-rlhf-harmless/test.jsonl.gz
PYTEST_ARGS ?= -m "not slow"
# Test files run in two processes (pytest-xdist; a file's tests stay together, with its servers):
# most tests wait on subprocesses and servers, so two cores do the suite in about two thirds of the
# time. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2

.PHONY: setup test-deps demo hh-walkthrough test test-all

setup:
	@bash scripts/setup.sh

# What the tests need beyond .venv (Debian's chromium for the browser test).
test-deps: setup
	@bash scripts/test-deps.sh

# The main job on the embedded default: the whole pipeline on the demo world (see README).
demo: setup
	@$(VENV)/prefdata demo --out .prefdata/demo

# The gate on real data: import, check (fails), filter and publish the HH-RLHF harmless sample.
hh-walkthrough: setup
	@bash scripts/hh_walkthrough.sh "$(SAMPLE)"

# pytest exits 5 when it collected no test: that is a failure here, never a silent pass.
test: test-deps
	@$(VENV)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected: failing"; exit 1; fi; exit $$rc

test-all: PYTEST_ARGS :=
test-all: test
