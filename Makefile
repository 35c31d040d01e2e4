# fiba-stream: every target installs what it needs into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install kafka-jars spark-jars demo test lint bench bench-quick chaos clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fiba demo

# Apache Kafka's jars for the tests' `kafka` broker kind (Maven Central, cached in
# ~/.cache/fiba-stream; needs java and mvn), resolved before the tests so no test waits for it.
kafka-jars: $(STAMP)
	$(PY) -m app.kafka_jars

# Spark's Kafka connector for the pinned PySpark (Maven Central, same cache), for the Spark tests.
spark-jars: $(STAMP)
	$(PY) -m spark_bridge.connector

# Every Kafka test runs on both broker kinds: Tansu, then Apache Kafka.
test: $(STAMP) kafka-jars spark-jars
	$(PY) -m ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: $(STAMP)
	$(PY) -m bench all

bench-quick: $(STAMP)
	$(PY) -m bench all --quick

# random SIGKILLs of workers, every output checked (KAFKA_BOOTSTRAP: that cluster); not in `test`
CHAOS_ARGS ?= --events 100000 --kills 20 --workers 2
chaos: $(STAMP)
	$(PY) -m bench.chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
