# jlse - common tasks. `make install` once, then `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast bench lint services clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/jlse demo

services:
	scripts/ensure-services.sh

test: install services
	$(BIN)/pytest -q

test-fast: install services
	$(BIN)/pytest -q -m "not slow"

bench: install
	$(BIN)/python benchmarks/run_all.py

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf runs .pytest_cache .ruff_cache
