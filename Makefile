# fiba-stream: every target installs what it needs into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install kafka-jars spark-jars demo test test-kafka test-embedded test-newest-python lint bench \
	bench-quick chaos clean

# the install builds the native crate (setup.py): redone when its sources change. It first
# removes what the retired mypyc build left in stores/ (extension modules that would shadow
# the .py sources).
NATIVE_SOURCES := stores/native/Cargo.toml $(wildcard stores/native/src/*.rs)
MYPYC_LEFTOVERS := stores/compiled.json $(wildcard stores/_compiled__mypyc*.so \
	$(foreach m,monoids fiba window_suffixes key_windows,stores/$(m).*.so))
$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
	rm -f $(MYPYC_LEFTOVERS)
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
	$(PY) -m app.brokers.kafka_jars

# Spark's Kafka connector for the pinned PySpark (Maven Central, same cache), for the Spark tests.
spark-jars: $(STAMP)
	$(PY) -m spark_bridge.connector

# Every test runs under both builds of the core and every Kafka test on both broker kinds: the
# native build (when the install could build it) on Apache Kafka (`test-kafka`) and the
# pure-Python build (FIBA_PURE_PYTHON=1) on Tansu (`test-embedded`), the two passes at once, beside
# the newest-Python check (`test-newest-python`); a test marked `once` (the same on either build
# and broker: the pure-Python modules' unit tests, the tests that start brokers of their own) runs
# in the embedded pass only, the shorter one (the Kafka pass set the suite's time)
# (their brokers, ports and temporary directories are their own; each pass's output is printed
# when it ends). PYTEST_OPTS: three xdist workers per pass (most tests wait on brokers, Spark and
# worker subprocesses), sharing one session broker, each with its own SparkSession; a file's
# tests on one worker, the slowest files first and the longest split (tests/xdist_schedule.py).
PYTEST_OPTS ?= -n 3 --dist loadfile
test: $(STAMP) kafka-jars spark-jars
	$(PY) -m ruff check .
	$(PY) -c "import stores; print('hot path build:', stores.build())"
	$(MAKE) --no-print-directory -j3 --output-sync=target test-kafka test-embedded test-newest-python

# The newest supported Python (pyproject's classifiers; .venv has the oldest, 3.11): the core
# alone (no Spark, no benchmarks) installed in .venv-newest, pure Python and not editable (it
# only brings the dependencies); then the unit tests of the FiBA core and the per-key windows
# and a short `fiba demo`, both on the repository's sources (the install is redone when
# pyproject.toml or setup.py change). About 15 s of CPU once installed (~55 s more for the
# install).
NEWEST_PYTHON ?= $(shell for p in python3.13 $(HOME)/.pyenv/versions/3.13*/bin/python3.13; do \
	$$p -V >/dev/null 2>&1 && echo $$p && break; done)
NEWEST := .venv-newest
$(NEWEST)/.installed: pyproject.toml setup.py
	@test -n "$(NEWEST_PYTHON)" || { echo "no python3.13 found: set NEWEST_PYTHON"; exit 1; }
	test -x $(NEWEST)/bin/python || $(NEWEST_PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install --quiet setuptools wheel
	FIBA_PURE_PYTHON=1 $(NEWEST)/bin/python -m pip install --quiet --no-build-isolation . \
		pytest pytest-asyncio pytest-timeout hypothesis
	touch $@

test-newest-python: $(NEWEST)/.installed
	FIBA_PURE_PYTHON=1 $(NEWEST)/bin/python -m pytest -q -p no:cacheprovider \
		tests/test_fiba.py tests/test_key_windows.py
	FIBA_PURE_PYTHON=1 $(NEWEST)/bin/python -m app.cli demo --events 300 --keys 3 >/dev/null
	@echo "fiba demo: exact on $$($(NEWEST)/bin/python -V)"

test-kafka: $(STAMP)
	TEST_BROKER_KINDS=kafka $(PY) -m pytest -q -m "not once" $(PYTEST_OPTS)

test-embedded: $(STAMP)
	FIBA_PURE_PYTHON=1 TEST_BROKER_KINDS=embedded $(PY) -m pytest -q $(PYTEST_OPTS)

# (and the native crate's format and clippy, where cargo is installed)
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	if command -v cargo >/dev/null; then cd stores/native && cargo fmt --check \
		&& cargo clippy -q --all-targets -- -D warnings; fi

bench: $(STAMP)
	$(PY) -m bench all

bench-quick: $(STAMP)
	$(PY) -m bench all --quick

# random SIGKILLs of workers in each emit mode, every output checked (KAFKA_BOOTSTRAP: that
# cluster); not in `test`
CHAOS_ARGS ?= --events 100000 --kills 20 --workers 2
chaos: $(STAMP)
	$(PY) -m bench.chaos --emit event $(CHAOS_ARGS)
	$(PY) -m bench.chaos --emit batch $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) $(NEWEST) build *.egg-info .pytest_cache .hypothesis .ruff_cache stores/*.so \
		stores/native.json stores/native/target
