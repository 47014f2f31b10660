# Poblano: every target sets itself up. The first run creates .venv with the pinned dependencies
# of pyproject.toml (and re-installs when pyproject.toml changes); nothing else is needed.
#
#   make test     the whole regression (golden models, Amaranth sim, cocotb on Verilator and Icarus, formal)
#   make sim      the main demo: a small model's prefill and decode on the RTL tile, bit-exact
#   make verilog  Verilog of every top-level block under build/verilog/, each Verilator-linted
#   make lint     ruff plus the Verilog lint
#   make formal   every SymbiYosys proof
#   make fpga     ULX3S-85F bitstreams and resource/Fmax reports under build/fpga/
#   make bench    the recorded benchmarks (cycle counts, utilization, throughput)
#   make mutate   mutation testing of rtl/ (long; MUTATE_ARGS="--block mx --max 20"), see docs/mutation.md
#   make clean    remove build/ (keeps .venv)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
JOBS   ?= 2
PYTEST_ARGS ?=
MUTATE_ARGS ?=

.PHONY: all test sim verilog lint formal fpga bench mutate clean distclean venv

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) --dist worksteal -v --durations=15 $(PYTEST_ARGS)

sim: $(STAMP)
	$(BIN)/poblano sim

verilog: $(STAMP)
	$(BIN)/poblano verilog

lint: $(STAMP)
	$(BIN)/poblano lint

formal: $(STAMP)
	$(BIN)/poblano formal

fpga: $(STAMP)
	$(BIN)/poblano fpga

bench: $(STAMP)
	$(BIN)/poblano bench

mutate: $(STAMP)
	nice -n 19 $(BIN)/poblano mutate $(MUTATE_ARGS)

clean:
	rm -rf build

distclean: clean
	rm -rf $(VENV)
