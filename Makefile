# millpond: two set-up commands for a fresh machine, `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install kafka-jars kafka-up kafka-down demo test test-fast faults lint bench bench-smoke clean

# Create the virtualenv and install millpond with its test and lint tools.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,dev]"
	touch $(STAMP)

install: $(STAMP)

# Fetch the Kafka broker jars from Maven Central once (cached under ~/.cache/millpond).
kafka-jars: $(STAMP)
	$(BIN)/python -c "from millpond.dev.kafka import provision; provision(echo=print)"

kafka-up: $(STAMP)
	$(BIN)/millpond dev kafka start

kafka-down: $(STAMP)
	$(BIN)/millpond dev kafka stop

demo: kafka-up
	$(BIN)/python -m examples.demo

# The whole suite against a real broker (the tests start a private one on free ports).
test: kafka-jars
	$(BIN)/pytest -q -ra

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not kafka and not spark"

faults: kafka-jars
	$(BIN)/pytest -q -ra tests/faults --faults-full

lint: $(STAMP)
	$(BIN)/ruff check millpond tests benchmarks examples
	$(BIN)/mypy

bench: kafka-up
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# The harness end to end on a tiny input (also part of make test).
bench-smoke: kafka-jars
	$(BIN)/pytest -q tests/bench

clean:
	rm -rf $(VENV) state build *.egg-info .pytest_cache .mypy_cache .ruff_cache
