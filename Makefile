# The only entry points people and CI use. `make help` lists them.
PY      ?= python3
PYTEST  ?= $(PY) -m pytest
TRACE   ?= tests/data/tiny.csv
CLUSTERS?= tests/data/small-clusters.yaml
POLICY  ?= fifo,sjf,oracle,las,gavel,default

.PHONY: help install fmt lint test test-fast sim sim-philly bench demo testbed-up testbed-down testbed-status check

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

install: ## editable install with the dev tools
	$(PY) -m pip install -q -e '.[dev]'

fmt: ## format and auto-fix
	$(PY) -m ruff format operator predictor testbed tests bench
	$(PY) -m ruff check --fix operator predictor testbed tests bench

lint: ## ruff + mypy --strict
	$(PY) -m ruff check operator predictor testbed tests bench
	$(PY) -m ruff format --check operator predictor testbed tests bench
	$(PY) -m mypy

test: lint ## every test, the end-to-end ones on the test bed included (CI runs this)
	$(PYTEST) tests

test-fast: ## unit tests only, no test bed
	$(PYTEST) tests -m 'not e2e'

sim: ## simulate TRACE on CLUSTERS with POLICY (comma-separated); report in out/sim/report.md
	$(PY) -m cpn simulate --trace $(TRACE) --clusters $(CLUSTERS) --policy $(POLICY) --report out/sim

sim-philly: ## the README's table: fifo, oracle and default on Gavel's five Philly traces (~20 min); reports in out/philly/<trace>/report.md
	$(PY) -m cpn simulate philly --out out/philly --json

bench: ## benchmarks; each prints JSON
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

demo: ## the main job on the local test bed: clusters up, operator running, AIJobs scheduled and shown
	bash testbed/setup.sh
	$(PY) -m cpn demo

testbed-up: ## start hub + member clusters on 127.0.0.1
	$(PY) -m cpn testbed up

testbed-down: ## stop the test bed, leaving no process behind
	$(PY) -m cpn testbed down

testbed-status: ## health of every test-bed component
	$(PY) -m cpn testbed status

check: test
