# fiba-stream: every target installs what it needs into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install kafka-jars spark-jars demo test lint bench bench-quick chaos clean

# the install compiles stores/fiba.py and stores/monoids.py (setup.py): redone when they change
$(STAMP): pyproject.toml setup.py stores/fiba.py stores/monoids.py
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

# Every test runs under both builds of the hot path and every Kafka test on both broker kinds:
# the compiled build (when the install could compile it) on Apache Kafka, then the pure-Python
# build (FIBA_PURE_PYTHON=1) on Tansu. PYTEST_OPTS: two xdist workers (most tests wait on
# brokers and workers), each with its own session broker and SparkSession, a file's tests on one
# worker (its module fixtures built once; xdist's loadgroup does not group on pytest 9).
PYTEST_OPTS ?= -n 2 --dist loadfile
test: $(STAMP) kafka-jars spark-jars
	$(PY) -m ruff check .
	$(PY) -c "import stores; print('hot path build:', stores.build())"
	TEST_BROKER_KINDS=kafka $(PY) -m pytest -q $(PYTEST_OPTS)
	FIBA_PURE_PYTHON=1 TEST_BROKER_KINDS=embedded $(PY) -m pytest -q $(PYTEST_OPTS)

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
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache stores/*.so stores/compiled.json
