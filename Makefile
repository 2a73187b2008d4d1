# Two entry points do every set-up step on a fresh machine: `make demo` and `make test`.
# The virtualenv is created once and reused; it is rebuilt when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: venv jars demo storage-demo test test-unit test-fast fuzz lint bench kcat clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# delta-spark's wheel pins pyspark<=4.2; its Python API needs nothing else, so keep our pyspark.
	$(PY) -m pip install --quiet --no-deps 'delta-spark==4.4.1'
	touch $(STAMP)

# Pinned JARs (conf/jars/*/pom.xml: Apache Kafka, Spark's Kafka connector, delta-spark), fetched
# once with Maven into .jars/ and used offline afterwards (see README "Reference JARs").
JARS_STAMPS := .jars/kafka/.fetched .jars/spark/.fetched
jars: $(JARS_STAMPS)

$(JARS_STAMPS) &: conf/jars/kafka/pom.xml conf/jars/spark/pom.xml $(STAMP)
	$(PY) -m sparklog.oracle.jars fetch

# Debian's kcat is an interop oracle; install it when missing (needs root or sudo).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing Debian's kcat"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }

# The quickstart runs through spark-submit from the venv (SPARK_CONF_DIR=conf: quiet logs).
demo: $(STAMP) $(JARS_STAMPS)
	PATH="$(abspath $(VENV))/bin:$$PATH" SPARK_CONF_DIR="$(abspath conf)" \
	  $(VENV)/bin/spark-submit --master "local[4]" jobs/quickstart.py

storage-demo: $(STAMP) $(JARS_STAMPS)
	$(PY) jobs/storage_demo.py

test: $(STAMP) $(JARS_STAMPS) kcat
	$(PY) -m pytest $(PYTEST_ARGS)

fuzz: $(STAMP)
	SPARKLOG_FUZZ_SECONDS=$${SPARKLOG_FUZZ_SECONDS:-300} $(PY) -m pytest tests/fuzz -q -p no:cacheprovider

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

test-fast: $(STAMP) $(JARS_STAMPS) kcat
	$(PY) -m pytest -m "not slow" -q

lint: $(STAMP)
	$(VENV)/bin/ruff check sparklog tests jobs notebooks
	$(VENV)/bin/ruff format --check sparklog tests jobs notebooks

bench: $(STAMP)
	$(PY) jobs/bench_records.py

clean:
	rm -rf $(VENV) .jars .pytest_cache build *.egg-info
