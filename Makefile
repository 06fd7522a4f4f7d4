# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup demo test lint proto bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/topoplace solve fixtures/requests/dgx4-mixed.json --format table

lint: setup
	$(BIN)/ruff check .

test: setup lint
	$(BIN)/python -m pytest

# Regenerate the Python code of the wire contract (tests fail when it is stale).
proto: setup
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/topoplace/v1/placement.proto

bench: setup
	$(BIN)/python -m bench.core
