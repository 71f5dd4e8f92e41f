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

# Debian's PostgreSQL server for the Airflow scheduler test on PostgreSQL (tests/airflow/test_scheduler_postgres.py).
.PHONY: postgres
postgres:
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || (apt-get update && apt-get install -y postgresql)

# Prometheus' promtool for the alert rules' unit tests (tests/docker/test_alert_rules.py; Debian package; needs root).
.PHONY: promtool
promtool:
	command -v promtool >/dev/null || (apt-get update && apt-get install -y --no-install-recommends prometheus)

kafka-jars: setup
	$(VENV)/bin/mirrorflow local jars
	$(VENV)/bin/mirrorflow local registry --fetch-only

lint: setup
	$(VENV)/bin/ruff check plugins tests dags spark_jobs benchmarks
	$(VENV)/bin/ruff format --check plugins tests dags spark_jobs benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test-unit: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

# --durations prints the slowest tests, so a CI log shows what to move into test-faults when time runs short.
# LONG_TRIALS run only in `make test-faults` (the soak's 5 minutes; `make soak` runs it for an hour; the Spark
# drivers SIGKILLed mid-copy, ~2 min; a copy task killed and completed by Airflow's retry, ~1.5 min; two flows
# on a real 4-core standalone master, ~2 min; a reset fencing a copy that holds a transaction open, ~1 min; the
# network cut mid-copy, ~1 min on a busy host; the target and the source broker killed mid exactly-once copy,
# ~35 s and ~30 s: the broker restarts run in `make test-faults` only since session 12, when the five-boundary
# handover test took their time); the soak's verdict tests stay in `make test`.
LONG_TRIALS := tests/replication/test_soak.py::test_five_minutes_of_continuous_replication \
	tests/replication/test_faults_network.py::test_a_network_cut_mid_copy_loses_and_duplicates_nothing \
	tests/spark/test_faults_driver.py::test_killed_drivers_resume_exactly \
	tests/airflow/test_faults_retry.py::test_a_copy_task_killed_mid_copy_is_completed_by_airflows_retry \
	tests/spark/test_standalone_sizing.py::test_two_flows_copy_at_once_within_their_cores_and_a_starved_copy_times_out_clearly \
	tests/replication/test_topic_identity.py::test_the_reset_fences_a_copy_holding_a_transaction \
	tests/replication/test_faults_brokers.py::test_a_broker_restart_mid_copy_loses_nothing[target-kill-exactly-once] \
	tests/replication/test_faults_brokers.py::test_a_broker_restart_mid_copy_loses_nothing[source-kill-exactly-once]
# Two pytest-xdist workers, one test file each at a time (--dist loadfile keeps a file's module fixtures in one
# process): most of a test's time is spent waiting on brokers, JVMs and Airflow, so two share the 2-core CI host.
# Each worker starts its own local clusters and its own Airflow home (tests/conftest.py). TEST_WORKERS=0 runs
# everything in one process, as before session 13.
TEST_WORKERS ?= 2
test: lint browser postgres promtool
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=30 $(foreach t,$(LONG_TRIALS),--deselect=$(t)) $(PYTEST_ARGS)

# The fault matrix with the full trials (`make test` runs a CI-sized version of each; docs/reliability.md):
# copy executors and Spark drivers SIGKILLed, a Spark copy job SIGSTOPped and woken after the flow ran again
# grouped otherwise (the zombie across regrouping), source and target brokers restarted, an Airflow retry, and
# the network cuts when their tests exist; and `validate` refusing a topic list of a million items (100,000 in
# `make test`).
FAULT_TESTS := tests/replication/test_copy_faults.py tests/replication/test_faults_brokers.py \
	tests/replication/test_faults_group_offsets.py tests/replication/test_soak.py \
	tests/spark/test_faults_driver.py tests/spark/test_faults_zombie.py tests/airflow/test_faults_retry.py \
	tests/spark/test_standalone_sizing.py::test_two_flows_copy_at_once_within_their_cores_and_a_starved_copy_times_out_clearly \
	tests/replication/test_topic_identity.py::test_the_reset_fences_a_copy_holding_a_transaction \
	"tests/config/test_config_hostile.py::test_hostile_config_is_refused_clearly[huge-topic-list]" \
	$(wildcard tests/replication/test_faults_network.py)
test-faults: setup
	MIRRORFLOW_FAULT_TRIALS=10 $(PY) -m pytest $(FAULT_TESTS) $(PYTEST_ARGS)

# SASL/SCRAM and TLS clusters end to end, and secrets searched for in every output (docs/security.md); all of it
# also runs in `make test`.
SECURITY_TESTS := tests/local/test_local_security.py tests/replication/test_security_live.py \
	tests/airflow/test_secret_hygiene_dag.py tests/config/test_config_secret_reprs.py \
	tests/replication/test_acl_sync.py tests/replication/test_acl_sync_live.py tests/airflow/test_dashboard.py
.PHONY: test-security
test-security: setup
	$(PY) -m pytest $(SECURITY_TESTS) $(PYTEST_ARGS)

# One hour of `mirrorflow run` under a steady load on local clusters it starts: lag bounded, RSS/fds/processes
# flat, audit clean (docs/reliability.md). MIRRORFLOW_SOAK_SECONDS or SOAK_ARGS="--seconds 600" shortens it.
.PHONY: soak
soak: setup
	$(PY) benchmarks/soak.py $(SOAK_ARGS)

# Peak RSS of one process copying 8 partitions, buffers capped in bytes only vs. in bytes and records
# (docs/benchmarks.md, "Memory per copy task"; ~2 minutes).
.PHONY: bench-memory
bench-memory: setup
	$(PY) benchmarks/bench_task_memory.py $(BENCH_ARGS)

# Mirrorflow's copy against a bare confluent-kafka loop on local clusters it starts (docs/benchmarks.md).
bench-copy: setup
	$(PY) benchmarks/bench_copy.py $(BENCH_ARGS)

# Issue 19: latency on the deployed path (the continuous flow DAG under a real scheduler on PostgreSQL) beside the
# in-process copy and the host's floor, with each run boundary's stop (docs/benchmarks.md; ~20 minutes).
.PHONY: bench-deployed
bench-deployed: setup postgres
	$(PY) benchmarks/bench_deployed.py $(BENCH_ARGS)

# The offset map of an exactly-once copy after 1k-200k transactions, thinned and not, without a cluster
# (docs/offsets.md, "Keeping the map small"). BENCH_ARGS="--window 64" changes the exact window.
.PHONY: bench-offset-map
bench-offset-map: setup
	$(PY) benchmarks/bench_offset_map.py $(BENCH_ARGS)

# The same map on real brokers: an exactly-once copy committing 1k-20k one-record transactions, thinned and not,
# with the state topics' segment settings (segment.ms accelerated) beside the broker's defaults, and what its
# start-up reads (docs/offsets.md; ~20 minutes on 2 shared cores). BENCH_ARGS="--checkpoints 1000,5000" scales it
# down, "--variants baseline,thinned" picks variants.
.PHONY: bench-map-growth
bench-map-growth: setup
	$(PY) benchmarks/bench_map_growth.py $(BENCH_ARGS)

# What a copy task reads of its flow's state at start, on local clusters, at 100/500/2,000 partitions: state
# topics of one partition beside slots (docs/scaling.md). A few minutes.
.PHONY: bench-state-startup
bench-state-startup: setup
	$(PY) benchmarks/bench_state_startup.py $(BENCH_ARGS)

# The metadata answers a Spark task's start asks about the state topics, counted by the broker (docs/scaling.md).
.PHONY: bench-state-metadata
bench-state-metadata: setup
	$(PY) benchmarks/bench_state_metadata.py $(BENCH_ARGS)

# One flow of 2,000 source partitions end to end on local clusters, copy to group sync checked (docs/scaling.md).
.PHONY: bench-flow-scale
bench-flow-scale: setup
	$(PY) benchmarks/bench_flow_scale.py $(BENCH_ARGS)

# Planning, XCom, copy start-up and DAG parsing at 10,000 partitions and 100 flows, without a cluster
# (docs/scaling.md). SIM_ARGS="--spark none" skips the Spark local job (one task per partition, 2,000 of them).
.PHONY: scale-sim
scale-sim: setup
	$(PY) benchmarks/scale_sim.py $(SIM_ARGS)

# Mirrorflow against real MirrorMaker 2 and the broker's raw limit on local clusters it starts; regenerates
# docs/benchmarks.md and docs/benchmarks.png (~50 minutes with the deployed path). bench-quick: ~3 minutes, writes
# build/bench-quick/ (no deployed path).
.PHONY: bench
bench: setup postgres
	$(PY) benchmarks/bench_all.py --write-docs $(BENCH_ARGS)

.PHONY: bench-quick
bench-quick: setup
	$(PY) benchmarks/bench_all.py --quick --out build/bench-quick $(BENCH_ARGS)

# Latency of the continuous copy against offered load, beside the host's floor (no replicator) at each load.
.PHONY: bench-latency
bench-latency: setup
	$(PY) benchmarks/bench_latency_sweep.py $(BENCH_ARGS)

# The real `airflow standalone` over local clusters; the UI stays up until Ctrl-C (docs/airflow.md).
airflow: setup
	$(PY) -m mirrorflow.cli.airflow_local

demo: setup
	$(PY) -m mirrorflow.cli.demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info plugins/*.egg-info
