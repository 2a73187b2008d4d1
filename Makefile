# Two entry points do every set-up step on a fresh machine: `make demo` and `make test`.
# The virtualenv is created once and reused; it is rebuilt when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: venv demo storage-demo test test-unit test-fast lint bench kcat clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian's kcat is an interop oracle; install it when missing (needs root or sudo).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing Debian's kcat"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }

# The quickstart runs through spark-submit from the venv (SPARK_CONF_DIR=conf: quiet logs).
demo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" SPARK_CONF_DIR="$(abspath conf)" \
	  $(VENV)/bin/spark-submit --master "local[4]" jobs/quickstart.py

storage-demo: $(STAMP)
	$(PY) jobs/storage_demo.py

test: $(STAMP) kcat
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

test-fast: $(STAMP) kcat
	$(PY) -m pytest -m "not slow" -q

lint: $(STAMP)
	$(VENV)/bin/ruff check sparklog tests jobs notebooks
	$(VENV)/bin/ruff format --check sparklog tests jobs notebooks

bench: $(STAMP)
	$(PY) jobs/bench_records.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
