# The Makefile is Mirrorflow's interface: every target sets up what it needs first.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# pip-installed pyspark locates SPARK_HOME through the venv's bin directory.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHONDONTWRITEBYTECODE := 1
STAMP := $(VENV)/.mirrorflow-setup-$(shell cat requirements.txt requirements-dev.txt pyproject.toml | sha1sum | cut -c1-12)
PYSPARK_PIN := $(shell grep -E '^pyspark==' requirements.txt)
PYTEST_ARGS ?=

.PHONY: airflow setup lint test test-unit test-integration test-faults demo clean kafka-jars bench-copy browser

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is required on PATH (Kafka brokers run on it)"; exit 2; }
	@command -v mvn >/dev/null || { echo "Maven is required on PATH (Kafka jars come from Maven Central)"; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	$(PIP) install -q -r requirements.txt -r requirements-dev.txt
	# The Spark provider pulls pyspark-client, which overwrites pyspark's Python files with another
	# version; reinstalling pyspark last makes its files win (tests/spark/test_pyspark_install.py checks it).
	$(PIP) install -q --force-reinstall --no-deps "$(PYSPARK_PIN)"
	$(PIP) install -q --no-deps -e .
	rm -f $(VENV)/.mirrorflow-setup-*
	touch $(STAMP)

# Headless Chromium + ChromeDriver for the dashboard's browser test (Debian packages; needs root).
browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium chromium-driver)

kafka-jars: setup
	$(VENV)/bin/mirrorflow local jars

lint: setup
	$(VENV)/bin/ruff check plugins tests dags spark_jobs benchmarks
	$(VENV)/bin/ruff format --check plugins tests dags spark_jobs benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test-unit: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

test: lint browser
	$(PY) -m pytest $(PYTEST_ARGS)

# The fault matrix with more trials than `make test` runs (each trial SIGKILLs a copy mid-range).
test-faults: setup
	MIRRORFLOW_FAULT_TRIALS=10 $(PY) -m pytest tests/replication/test_copy_faults.py $(PYTEST_ARGS)

# Mirrorflow's copy against a bare confluent-kafka loop on local clusters it starts (docs/benchmarks.md).
bench-copy: setup
	$(PY) benchmarks/bench_copy.py $(BENCH_ARGS)

# The real `airflow standalone` over local clusters; the UI stays up until Ctrl-C (docs/airflow.md).
airflow: setup
	$(PY) -m mirrorflow.cli.airflow_local

demo: setup
	$(PY) -m mirrorflow.cli.demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info plugins/*.egg-info
