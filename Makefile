# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup demo test lint proto bench system-deps

setup: $(VENV)/.installed system-deps

# Python: the package with its test tools, the Ray extra (what-if sweeps on Ray are tested) and the
# Kubernetes client (the Volcano adapter's pod patches).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ray,volcano]'
	touch $@

# Debian: Slurm and MUNGE for the Slurm adapter's end-to-end test (a no-op when present).
system-deps:
	./scripts/install-slurm.sh

demo: setup
	$(BIN)/topoplace solve fixtures/requests/dgx4-mixed.json --format table

lint: setup
	$(BIN)/ruff check .
	PYTHONPATH=. $(BIN)/lint-imports

test: setup lint
	$(BIN)/python -m pytest

# Regenerate the Python code of the wire contract (tests fail when it is stale).
proto: setup
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/topoplace/v1/placement.proto proto/topoplace/v1/whatif.proto

# Benchmarks (long; figures go to bench/RESULTS.md by hand, with commit and machine).
bench: setup
	$(BIN)/python -m bench.core
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.fabric
	$(BIN)/python -m bench.replay --policies random,bestfit,gpupacking,fgd --seeds 42-51
