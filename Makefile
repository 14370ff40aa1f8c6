# fanfit: `make demo` (fresh clone -> installed, local stack up, the 401(k) estimate printed) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export AWS_DEFAULT_REGION ?= us-east-1
export SAM_CLI_TELEMETRY := 0

.PHONY: install install-demo install-local deps demo test suite lint unit integration sam-build bench clean

# Two installs into .venv: `install-demo` (the client and the SAM CLI the local deploy runs: extra
# `local`) for make demo, `install` (extra `dev`: also torch, DoubleML, moto, pytest, playwright,
# ruff, mypy, cfn-lint) for make test. A stamp file records each, rebuilt when pyproject.toml changes.
$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip

$(VENV)/.fanfit-demo: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q --disable-pip-version-check -e '.[local]'
	touch $@

$(VENV)/.fanfit-dev: pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@ $(VENV)/.fanfit-demo

install-demo: $(VENV)/.fanfit-demo

install: $(VENV)/.fanfit-dev

# LocalStack core (Python 3.13) with fanfit's plugins, and the Lambda runtime interpreter (Python 3.12);
# independent of .venv, so that `make -j3 deps` builds the virtualenvs side by side.
install-local:
	bash scripts/install_local_stack.sh

# The main job: DoubleML's 401(k) PLR (Chernozhukov et al. 2018) with its covariates, random forests,
# 5 folds x 3 repetitions (README's command line shows the IRM of the same data).
X401K := age,inc,educ,fsize,marr,twoearn,db,pira,hown
# The two installs (pip into .venv; the local stack's two virtualenvs) run side by side.
demo:
	$(MAKE) --no-print-directory -j2 install-demo install-local
	$(BIN)/fanfit local up
	$(BIN)/fanfit estimate --data examples/data/sipp1991.dta --model plr --y net_tfa --d e401 --x $(X401K) \
	  --ml-l 'RandomForestRegressor:{"n_estimators": 100, "max_depth": 8}' \
	  --ml-m 'RandomForestClassifier:{"n_estimators": 100, "max_depth": 8}' --n-folds 5 --n-rep 3 --seed 42
	@echo "The local stack keeps running for further commands; stop it with: $(BIN)/fanfit local down"

# checkov pins boto3==1.35.49 (and networkx<2.7, packaging<24) while aws-sam-cli 1.170.0 pins
# boto3==1.43.108, so no checkov release shares .venv: it gets its own venv, built on first use.
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/bin/checkov:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --disable-pip-version-check 'checkov==3.3.30'
	touch $@

lint: install $(CHECKOV_VENV)/bin/checkov
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/cfn-lint template.yaml
	$(BIN)/sam validate --lint --template-file template.yaml
	$(CHECKOV_VENV)/bin/checkov --file template.yaml --framework cloudformation --quiet --compact --skip-download
	$(BIN)/python -m json.tool orchestrator/estimate.asl.json > /dev/null
	$(BIN)/python -m json.tool orchestrator/train.asl.json > /dev/null
	for f in events/*.json; do $(BIN)/python -m json.tool $$f > /dev/null || exit 1; done

unit: install
	$(BIN)/pytest tests/unit -q

integration: install install-local
	$(BIN)/pytest tests/integration -q -m integration

# Every virtualenv make test needs, built side by side (pip downloads and unpacks; three at once).
deps: install install-local $(CHECKOV_VENV)/bin/checkov

# make test: the virtualenvs (make -j3 deps), then lint beside the whole suite (make -j2; either
# failing fails the target). The suite runs on three xdist workers: the integration modules in two
# groups, one local stack per group shared by its modules, and the unit tests on the third worker
# and on the others once their group is done (tests/conftest.py).
test:
	$(MAKE) --no-print-directory -j3 deps
	$(MAKE) --no-print-directory -j2 lint suite

suite: install install-local
	$(BIN)/pytest tests -q -n 3 --dist loadgroup

bench: install install-local
	$(BIN)/python benchmarks/estimate_vs_doubleml.py --json

clean:
	-$(BIN)/fanfit local down
	rm -rf .aws-sam .fanfit .pytest_cache .mypy_cache .ruff_cache
