# jlse - common tasks. `make install` once, then `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-fast bench lint services clean \
        cluster-up cluster-down worker learner dispatcher flower status

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

# lint-imports reads the source tree, where jlse.models etc. live outside jlse/: it runs on a
# tree of symlinks shaped like the installed package (see [tool.setuptools.package-dir]).
IMPORT_TREE := $(VENV)/import-tree

lint: install
	$(BIN)/ruff check .
	rm -rf $(IMPORT_TREE) && mkdir -p $(IMPORT_TREE)/jlse
	ln -s $(CURDIR)/jlse/* $(IMPORT_TREE)/jlse/
	for d in models scheduler workers learner; do ln -s $(CURDIR)/$$d $(IMPORT_TREE)/jlse/$$d; done
	cd $(IMPORT_TREE) && $(abspath $(BIN))/lint-imports --no-cache --no-logo $(CURDIR)/pyproject.toml

clean:
	rm -rf runs .pytest_cache .ruff_cache

# Distributed mode (scripts/cluster.sh, deploy/README.md). The roles read REDIS_URL,
# CELERY_BROKER_URL, DATABASE_URL and PGPASSWORD from the environment (defaults: local services).
WORKERS ?= 2
RUN_DIR ?= runs/cluster
JLSE    ?= $(BIN)/jlse
CELERY  ?= $(BIN)/celery
CLUSTER := WORKERS='$(WORKERS)' RUN_DIR='$(RUN_DIR)' JLSE='$(JLSE)' CELERY='$(CELERY)' \
           scripts/cluster.sh

cluster-up: install
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

worker learner dispatcher flower: install
	$(CLUSTER) run $@

status: install
	$(JLSE) status
