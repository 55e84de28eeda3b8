# Two commands: `make run` (embedded name server + broker, messages flowing) and `make test`.
# Both create .venv when missing and install pyrmq with its extras; nothing needs installing by hand
# except Java 17+ for the Spark plugin, which comes from the system.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.pyrmq-installed
PYTEST_ARGS ?=
PEERS_ARGS ?=

.PHONY: run test install check-python check-java bench peers clean

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "pyrmq needs Python >= 3.11 (found: $$($(PYTHON) --version 2>&1)). Set PYTHON=/path/to/python3.11"; exit 1; }

$(STAMP): pyproject.toml | check-python
	@test -x $(BIN)/python || { echo ">> creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing pyrmq with extras [spark,test] into $(VENV) (first time: a few minutes, pyspark is large)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet --progress-bar off -e '.[spark,test]'
	@touch $(STAMP)

install: $(STAMP)

check-java:
	@if ! command -v java >/dev/null 2>&1; then \
	  echo "Java 17+ is missing: the Spark plugin (PySpark) needs it. Install it from the system, e.g."; \
	  echo "    apt-get install -y openjdk-17-jre-headless"; \
	  exit 1; \
	fi; \
	v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
	  echo "Java 17+ is needed by the Spark plugin; found: $$(java -version 2>&1 | head -1)"; exit 1; \
	fi

run: $(STAMP)
	$(BIN)/pyrmq dev --demo

test: $(STAMP) check-java
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/kernel_bench.py

# pyrmq beside the Apache RocketMQ Java broker and Redis 7 Streams (bench/peers.py; minutes, not part of `make test`).
# PEERS_ARGS='--count 100000 --repeat 1' for a quick run.
peers: $(STAMP) check-java
	@command -v redis-server >/dev/null 2>&1 || { echo "bench/peers.py needs redis-server: apt-get install redis-server"; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "bench/peers.py needs Maven: apt-get install maven"; exit 1; }
	@$(BIN)/python -c 'import redis, hiredis' 2>/dev/null || $(BIN)/python -m pip install --quiet redis hiredis
	$(BIN)/python bench/peers.py $(PEERS_ARGS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis
