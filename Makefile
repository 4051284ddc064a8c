# kaas — common commands. Every target installs what it needs into .venv.
N ?= 3
DATA ?= ./data
PORT ?= 9092
METRICS ?= 0
ARGS ?=
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install cluster test test-unit test-int bench eos chaos docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

cluster: $(STAMP)
	@$(BIN)/kaas cluster --brokers $(N) --data $(DATA) --base-port $(PORT) --metrics-base-port $(METRICS) -- $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q -x -p no:cacheprovider tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-int: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

bench: $(STAMP)
	$(BIN)/python scripts/bench.py suite

eos: $(STAMP)
	$(BIN)/python scripts/eos_harness.py run --start-cluster 3 --messages 5000 --copiers 3

chaos: $(STAMP)
	$(BIN)/python scripts/chaos.py run --scenario all --messages 4000

docs: $(STAMP)
	$(BIN)/python scripts/compat_matrix.py
	$(BIN)/python scripts/config_reference.py

clean:
	rm -rf $(VENV) $(DATA)
