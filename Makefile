# The two commands of the README: `make demo` and `make test`.
# `make demo` needs no root and no Slurm: a virtualenv with the package, then one solve.
# `make test` also installs the test tools, the extras the tests cover and Debian's Slurm (root or sudo),
# and runs the Go tests that drive Volcano's own code (Go must be installed).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup setup-dev demo test test-volcano-go test-go-decode go-present lint proto bench system-deps

# Go runs Volcano's own code in the tests: the scheduler (tests/volcano/gosched) and its vGPU decoder
# (tests/volcano/godecode). The go on PATH, else the usual install location.
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go))
# -count=1: the Go tests drive the Python extender, which Go's test cache does not see change.
GO_TEST_FLAGS ?= -count=1 -timeout=20m
DECODE_CASES ?= $(CURDIR)/.cache/godecode-cases

setup: $(VENV)/.installed

# The package alone: enough to solve, serve, ingest and ask what-if questions.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# Tests: the test tools, the Ray extra (what-if sweeps on Ray are tested) and the Kubernetes client
# (the Volcano adapter's pod patches).
$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,ray,volcano]'
	touch $@

setup-dev: $(VENV)/.installed-dev system-deps

# Debian: Slurm, MUNGE, Lua 5.1 and luaposix for the Slurm adapter's tests (a no-op when present).
system-deps:
	./scripts/install-slurm.sh

demo: setup
	$(BIN)/topoplace solve fixtures/requests/dgx4-mixed.json --format table

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	PYTHONPATH=. $(BIN)/lint-imports

test: setup-dev lint
	$(BIN)/python -m pytest
	$(MAKE) test-go-decode
	$(MAKE) test-volcano-go

go-present:
	@if [ -z "$(GO)" ]; then \
		echo "make: no Go toolchain found (not on PATH, not at /usr/local/go/bin/go)." >&2; \
		echo "  Install Go 1.24 or newer (e.g. apt-get install golang-go) or run make GO=/path/to/go test." >&2; \
		exit 1; \
	fi

# The pod annotations the extender writes, decoded by Volcano's vGPU package (tests/volcano/godecode):
# a Python run of the real extender writes the cases, `go test` reads them. GOFLAGS=-p=1 spares CPU.
test-go-decode: $(VENV)/.installed-dev go-present
	PYTHONPATH=$(CURDIR):$(CURDIR)/proto $(BIN)/python -m tests.volcano.device_cases $(DECODE_CASES)
	cd tests/volcano/godecode && GOFLAGS=-p=1 TOPOPLACE_DECODE_CASES=$(DECODE_CASES) $(GO) test -count=1 ./...

# Volcano's own scheduler (volcano.sh/volcano v1.14.1 with volcano.sh/apis v1.14.0: enqueue/allocate,
# gang, predicates, network-topology-aware, the extender plugin) against `topoplace volcano serve` on
# loopback. v1.15.x cannot be built from the Go module proxy (its volcano.sh/apis v1.15.x is refused). Modules and builds are cached in
# Go's usual places ($$(go env GOMODCACHE), $$(go env GOCACHE)), so a later run on the machine only
# relinks.
test-volcano-go: $(VENV)/.installed-dev go-present
	cd tests/volcano/gosched && TOPOPLACE_PYTHON=$(abspath $(BIN)/python) $(GO) test $(GO_TEST_FLAGS) ./...

# Regenerate the Python code of the wire contracts (tests fail when it is stale).
proto: $(VENV)/.installed-dev
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/topoplace/v1/placement.proto proto/topoplace/v1/whatif.proto
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/topoplace/kubelet/deviceplugin/v1beta1/api.proto

# Benchmarks (long; figures go to bench/RESULTS.md by hand, with commit and machine).
bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench.core
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.fabric
	$(BIN)/python -m bench.quality --nodes 1024 --load 0.5 --jobs 200 --seeds 1-3 --limits 1,2,5,15
	$(BIN)/python -m bench.replay --policies random,bestfit,gpupacking,fgd --seeds 42-51
