# The only entry points people and CI use. `make help` lists them.
#
# Everything runs in the project's own virtual environment, $(VENV), made on first use
# from whichever Python 3.11 is on PATH, with every package at the version requirements.lock
# pins, and remade whenever pyproject.toml or the lock changes;
# nothing is installed into that Python itself. The test bed's system parts (apt
# packages, the Go-built control planes cached outside the work tree) come from
# testbed/setup.sh, run by the targets that need them. The benchmark workload's torch,
# torchvision and transformers never enter $(VENV): workloads/setup.sh puts them in a venv
# of their own, cached outside the work tree and keyed by a hash of workloads/requirements.txt.
VENV    ?= .venv
BASEPY  ?= python3
PY      := $(VENV)/bin/python
PYTEST  := $(PY) -m pytest
STAMP   := $(VENV)/.installed
TRACE   ?= tests/data/tiny.csv
CLUSTERS?= tests/data/small-clusters.yaml
POLICY  ?= fifo,sjf,oracle,las,gavel,default
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_ROOT_USER_ACTION := ignore

.PHONY: help venv lock bed workloads-venv workloads-lint install fmt lint test test-fast sim sim-philly bench demo testbed-up testbed-down testbed-status check

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml requirements.lock
	@$(BASEPY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	  || { echo "make: cpn needs Python 3.11 as '$(BASEPY)' (got $$($(BASEPY) --version)); set BASEPY=" >&2; exit 1; }
	@echo "make: creating $(VENV) with the project and its dev tools (about 1-2 minutes cold)"
	@rm -rf $(VENV)
	@$(BASEPY) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	@touch $@
	@echo "make: $(VENV) ready"

venv: $(STAMP) ## the project's virtual environment (made on first use, remade when pyproject.toml or requirements.lock changes)

lock: ## resolve pyproject.toml afresh in a scratch venv and pin every package in requirements.lock
	@rm -rf .lock-venv && $(BASEPY) -m venv .lock-venv
	@.lock-venv/bin/python -m pip install -q -e '.[dev]'
	@{ sed -n '/^#/p' requirements.lock; .lock-venv/bin/python -m pip freeze --exclude-editable; } > requirements.lock.new
	@mv requirements.lock.new requirements.lock && rm -rf .lock-venv
	@echo "make: requirements.lock pins $$(grep -c == requirements.lock) packages"

install: venv ## same as venv

workloads-venv: ## the benchmark workload's own venv (torch, torchvision, transformers), cached outside the work tree
	@bash workloads/setup.sh >/dev/null

workloads-lint: venv workloads-venv ## mypy --strict on workloads/ against its own venv's torch (cold ~4 min, then cached)
	cd workloads && $(abspath $(PY)) -m mypy --strict --python-executable $$(bash setup.sh 2>/dev/null | tail -1) cpn_workloads

bed: ## the test bed's system parts: apt packages and the Go build (cold 5-15 min, then cached)
	@bash testbed/setup.sh

fmt: venv ## format and auto-fix
	$(PY) -m ruff format operator predictor testbed tests bench workloads
	$(PY) -m ruff check --fix operator predictor testbed tests bench workloads

lint: venv ## ruff + mypy --strict + the layering contracts (import-linter, in pyproject.toml)
	$(PY) -m ruff check operator predictor testbed tests bench workloads
	$(PY) -m ruff format --check operator predictor testbed tests bench workloads
	$(PY) -m mypy
	PYTHONPATH=operator:. $(VENV)/bin/lint-imports --no-cache --no-logo

test: lint workloads-lint bed workloads-venv ## every test, the end-to-end ones on the test bed and the workload's CPU run included (CI runs this)
	CPN_WORKLOADS_PYTHON=$$(bash workloads/setup.sh 2>/dev/null | tail -1) $(PYTEST) tests

test-fast: venv ## unit tests only, no test bed
	$(PYTEST) tests -m 'not e2e'

sim: venv ## simulate TRACE on CLUSTERS with POLICY (comma-separated); report in out/sim/report.md
	$(PY) -m cpn simulate --trace $(TRACE) --clusters $(CLUSTERS) --policy $(POLICY) --report out/sim

SEEDS ?= 0
sim-philly: venv ## the README's tables: fifo, oracle, las, sjf, default on Gavel's traces (labelled and not) and the Philly windows at checkpointable 0, 0.5, 1, then the windows' halves (SEEDS=0,1,2,3,4 as the windows tables); reports in out/philly/ and out/philly-halves/; fails if a check fails
	status=0; \
	$(PY) -m cpn simulate philly --out out/philly --seeds $(SEEDS) || status=$$?; \
	$(PY) -m cpn simulate philly --suites windows --split 2 --checkpointable 0,0.5 --policies default --out out/philly-halves --seeds $(SEEDS) || status=$$?; \
	exit $$status

bench: venv bed ## benchmarks; each prints JSON
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

demo: venv bed ## the main job on the local test bed: clusters up, operator running, AIJobs scheduled and shown
	$(PY) -m cpn demo

testbed-up: venv bed ## start hub + member clusters on 127.0.0.1
	$(PY) -m cpn testbed up

testbed-down: venv ## stop the test bed, leaving no process behind
	$(PY) -m cpn testbed down

testbed-status: venv ## health of every test-bed component
	$(PY) -m cpn testbed status

check: test
