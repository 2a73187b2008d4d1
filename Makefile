# Two entry points do every set-up step on a fresh machine: `make demo` and `make test`.
# The virtualenv is created once and reused; it is rebuilt when pyproject.toml or constraints.txt
# changes. pyproject.toml gives the ranges sparklog works with; constraints.txt the exact versions
# the project tests with, so every fresh clone (and CI) installs the same tree.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NATIVE := $(VENV)/.native
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
PYTEST_ARGS ?=
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))

.PHONY: venv jars demo storage-demo test test-unit test-fast fuzz lint docs bench kcat netns-tools soak soak-net clean

venv: $(STAMP) $(NATIVE)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# compat mode puts the checkout on sys.path: PySpark finds format("sparklog") by listing
	# top-level pyspark_* modules there, which the default editable mode's import hook hides.
	# [delta] is delta-spark with its own requirements (pyspark<=4.2.0), resolved with ours.
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,delta]' \
	  --config-settings editable_mode=compat
	touch $(STAMP)

# The native record core: Rust, built from native/ in release mode with maturin
# (crates from crates.io, pinned by native/Cargo.lock). Without cargo sparklog still installs
# and runs on its pure-Python codec, slower, and says so once in its log.
$(NATIVE): $(STAMP) $(NATIVE_SOURCES)
	@if command -v cargo >/dev/null 2>&1; then \
	  echo "building sparklog's native record core (cargo, release)"; \
	  $(PY) -m pip install --quiet -c constraints.txt maturin && \
	  VIRTUAL_ENV="$(abspath $(VENV))" $(VENV)/bin/maturin develop --release --quiet \
	    -m native/Cargo.toml; \
	else \
	  echo "no Rust toolchain (cargo): sparklog will run on its pure-Python codec, slower"; \
	fi
	touch $(NATIVE)

# Pinned JARs (conf/jars/*/pom.xml: Apache Kafka, Spark's Kafka connector, delta-spark, S3Proxy),
# fetched once with Maven into .jars/ and used offline afterwards (see docs/operations.md "Reference JARs").
JARS_STAMPS := .jars/kafka/.fetched .jars/spark/.fetched .jars/s3proxy/.fetched
jars: $(JARS_STAMPS)

$(JARS_STAMPS) &: conf/jars/kafka/pom.xml conf/jars/spark/pom.xml conf/jars/s3proxy/pom.xml $(STAMP)
	$(PY) -m sparklog.jars fetch

# Debian's kcat is an interop oracle; install it when missing (needs root or sudo).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "installing Debian's kcat"; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }

# The multi-host soak builds Linux network namespaces (root only) with Debian's iproute2 (`ip`,
# `tc`, `ss`) and nftables (`nft`); install them when missing. Without root there are no
# namespaces to build (the test says so and skips), so nothing is installed.
netns-tools:
	@[ "$$(id -u)" != 0 ] || { command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1 \
	  && command -v tc >/dev/null 2>&1 && command -v ss >/dev/null 2>&1; } || { \
	  echo "installing Debian's iproute2 and nftables"; \
	  apt-get update -qq && env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    iproute2 nftables >/dev/null; }

# The long soak (docs/testing.md "Soak"): three brokers on local-cluster under executor kills, pauses,
# link faults and leader moves for SOAK_MINUTES; the suite runs one minute of it.
SOAK_MINUTES ?= 10
soak: $(STAMP) $(NATIVE) $(JARS_STAMPS)
	$(PY) jobs/soak.py --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# The soak on a Spark standalone cluster spread over network namespaces, under real partitions,
# loss, delay and a slow link (docs/testing.md "The network-partition soak"); as root.
SOAK_NET_MINUTES ?= 10
soak-net: $(STAMP) $(NATIVE) netns-tools
	$(PY) jobs/soak_net.py --minutes $(SOAK_NET_MINUTES) $(SOAK_NET_ARGS)

# The quickstart runs through spark-submit from the venv (SPARK_CONF_DIR=conf: quiet logs).
demo: $(STAMP) $(NATIVE) $(JARS_STAMPS)
	PATH="$(abspath $(VENV))/bin:$$PATH" SPARK_CONF_DIR="$(abspath conf)" \
	  $(VENV)/bin/spark-submit --master "local[4]" jobs/quickstart.py

storage-demo: $(STAMP) $(NATIVE) $(JARS_STAMPS)
	$(PY) jobs/storage_demo.py

test: $(STAMP) $(NATIVE) $(JARS_STAMPS) kcat netns-tools
	$(PY) -m pytest $(PYTEST_ARGS)

fuzz: $(STAMP) $(NATIVE)
	SPARKLOG_FUZZ_SECONDS=$${SPARKLOG_FUZZ_SECONDS:-300} $(PY) -m pytest tests/fuzz -q -p no:cacheprovider

test-unit: $(STAMP) $(NATIVE)
	$(PY) -m pytest tests/unit -q

test-fast: $(STAMP) $(NATIVE) $(JARS_STAMPS) kcat netns-tools
	$(PY) -m pytest -m "not slow" -q

# ruff, then the type checker over sparklog/ (mypy; its settings are in pyproject.toml)
lint: $(STAMP)
	$(VENV)/bin/ruff check sparklog tests jobs notebooks
	$(VENV)/bin/ruff format --check sparklog tests jobs notebooks
	$(PY) -m mypy

# docs/api.md, the API reference, from the public names' docstrings
docs: $(STAMP)
	$(PY) jobs/api_reference.py

bench: $(STAMP) $(NATIVE)
	$(PY) jobs/bench_records.py

clean:
	rm -rf $(VENV) .jars .pytest_cache build *.egg-info native/target
