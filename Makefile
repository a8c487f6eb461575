# millpond: two set-up commands for a fresh machine, `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install kafka-jars kafka-up kafka-down demo test test-slow test-faults test-dataflow-faults test-security test-cluster test-fast faults lint docs bench bench-startup bench-smoke mutation browser clean

# Create the virtualenv and install millpond with its test and lint tools. setuptools shows a
# notice ("Editable installation ... folders in your working directory with the same name as
# your package") on every editable install of a flat layout like ours, and pip >= 25 shows
# build-backend warnings even with -q; it is information about setuptools' import hook, not a
# problem to fix, so it is filtered.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e ".[test,dev,spark,s3,docs]"
	touch $(STAMP)

install: $(STAMP)

# Fetch the Kafka broker jars from Maven Central once (cached under ~/.cache/millpond).
kafka-jars: $(STAMP)
	$(BIN)/python -c "from millpond.dev.kafka import provision; provision(echo=print)"

# The dev broker's collector when kafka-up starts it (a running broker is reused as it is):
# `make bench` starts it with ZGC, whose sub-millisecond pauses keep the broker's own stalls
# out of the latency rows (docs/benchmarks.md); KAFKA_GC=g1 for Kafka's default.
KAFKA_GC ?= g1
bench: KAFKA_GC = zgc

kafka-up: $(STAMP)
	$(BIN)/millpond dev kafka --gc $(KAFKA_GC) start

kafka-down: $(STAMP)
	$(BIN)/millpond dev kafka stop

demo: kafka-up
	$(BIN)/python -m examples.demo $(DEMO_ARGS)

# The suite against a real broker (the tests start a private one on free ports). The fault
# suite, the PySpark and slow tests and the Spark-cluster tests have their own targets (each run is kept under 20 min on
# 2 cores); CI runs all three.
# Each test starts many `millpond` processes: bytecode compiled once saves each of them
# compiling the package again where PYTHONDONTWRITEBYTECODE is set (as on these machines:
# about 0.1 s of each command).
PYC := $(BIN)/python -m compileall -q millpond examples tests >/dev/null

test: kafka-jars
	$(PYC)
	$(BIN)/pytest -q -ra --durations=15 -m "not cluster and not secure and not spark and not slow" --ignore=tests/faults

# The PySpark commands' tests (local Spark sessions against the tests' broker) and the long
# ones (marked slow: a job under a real memory cap, the operator-mistake CLI runs, routed
# queries across a stopped or killed process), their own
# run so each stays under 20 min on 2 cores.
test-slow: kafka-jars
	$(PYC)
	$(BIN)/pytest -q -ra --durations=10 -m "(spark or slow) and not cluster and not secure" --ignore=tests/faults

# The fault suite's short versions (SIGKILLs, zombies, damage, bad input); `make faults` is
# the long one. The dataflow apps' fault tests (3 processes each) are their own target, so
# each run stays under 20 min on 2 cores.
DATAFLOW_FAULTS := tests/faults/test_dataflow_faults.py tests/faults/test_window_faults.py
test-faults: kafka-jars
	$(PYC)
	MILLPOND_FAULTS_SUITE="make test-faults" MILLPOND_FAULTS_REPORT=benchmarks/out/faults-test-faults.json \
	$(BIN)/pytest -q -ra --durations=10 tests/faults $(DATAFLOW_FAULTS:%=--ignore=%)

test-dataflow-faults: kafka-jars
	$(PYC)
	MILLPOND_FAULTS_SUITE="make test-dataflow-faults" MILLPOND_FAULTS_REPORT=benchmarks/out/faults-test-dataflow-faults.json \
	$(BIN)/pytest -q -ra --durations=10 $(DATAFLOW_FAULTS)

# The security suite against a secured broker (SASL_SSL, SCRAM, ACLs; started by the tests):
# a job and every command with only the properties file, millpond acls and check, denials.
test-security: kafka-jars
	$(PYC)
	$(BIN)/pytest -q -ra --durations=5 -m secure tests

# The spark commands on a Spark standalone cluster (a master and two workers) via spark-submit.
test-cluster: kafka-jars
	$(PYC)
	$(BIN)/pytest -q -ra --durations=5 -m cluster tests/cluster

# What the browser test of the query endpoint's page needs (tests/query/test_query_page.py,
# in make test-slow): Debian's chromium, and Playwright for Python (the test extra) to drive
# it; Playwright is pointed at /usr/bin/chromium, no browser is downloaded.
browser: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python -c "import playwright" 2>/dev/null \
	  || PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e ".[test]"

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not kafka and not spark"

faults: kafka-jars
	MILLPOND_FAULTS_REPORT=benchmarks/out/faults-full.json $(BIN)/pytest -q -ra tests/faults --faults-full

lint: $(STAMP)
	$(BIN)/ruff check millpond tests benchmarks examples
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/, strict: a broken link, a missing
# page or a missing API reference fails. Installs the docs extra first if a venv made
# before it lacks it.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -c "import mkdocs, material, mkdocstrings_handlers.python, mkdocs_click, sybil" 2>/dev/null \
	  || PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: kafka-up
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# Start-up: process start -> first record of a bounded job with 4 empty tasks, the median of
# each phase over 10 runs (STARTUP_ARGS="--against TREE" runs another checkout A/B/A/B).
bench-startup: kafka-up
	$(PYC)
	$(BIN)/python -m benchmarks.startup $(STARTUP_ARGS)

# The harness end to end on a tiny input (also in make test and make test-slow).
bench-smoke: kafka-jars
	$(BIN)/pytest -q tests/bench

# Mutation testing (mutmut, [tool.mutmut] in pyproject.toml; not part of CI): mutants of
# millpond/changelog and the commit protocol against the broker-free unit tests; a run of
# every module takes ~30 min on 2 cores, so MUTANTS picks some (mutmut's name globs), e.g.
# make mutation MUTANTS='millpond.tasks.commit*'. Survivors: .venv/bin/mutmut results.
MUTANTS ?=
mutation: $(STAMP)
	$(BIN)/mutmut run --max-children 2 $(MUTANTS)
	$(BIN)/mutmut results

clean:
	rm -rf $(VENV) mutants state build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
