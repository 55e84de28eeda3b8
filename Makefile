# Two commands: `make run` (embedded name server + broker, messages flowing) and `make test`.
# From the system they need only what .ci/check-tools lists (Python >= 3.11 with venv, a Java 17+ JDK, Node.js +
# npm, Maven; it names the Debian package of anything missing). Everything else installs itself: .venv with pyrmq
# and its extras here, ali-ons and the RocketMQ Java artifacts into ~/.cache/pyrmq (on first use, by the tests).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.pyrmq-installed
PYTEST_ARGS ?=
PEERS_ARGS ?=

# The editable install is "strict": .venv sees exactly the modules of the packages pyproject.toml declares (through
# a tree of links under build/), so tests/ and bench/ never import as pyrmq.tests / pyrmq.bench. A module added or
# removed changes this list, and the next make reinstalls.
PKG_DIRS  := kernel store remoting plugins client spark_plugin configs
PKG_FILES := $(VENV)/.pyrmq-files

.PHONY: run test typecheck install check-python check-tools bench peers broker-memory chaos failover grpc-peers clean FORCE

check-python:
	@PYTHON='$(PYTHON)' .ci/check-tools --python

check-tools:
	@PYTHON='$(PYTHON)' .ci/check-tools

$(PKG_FILES): FORCE | check-python
	@test -x $(BIN)/python || { echo ">> creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@{ ls *.py; find $(PKG_DIRS) -name '*.py' -o -name '*.toml'; } | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

$(STAMP): pyproject.toml $(PKG_FILES)
	@echo ">> installing pyrmq with extras [spark,test] into $(VENV) (first time: a few minutes, pyspark is large)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet --progress-bar off -e '.[spark,test]' --config-settings editable_mode=strict
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/pyrmq dev --demo

test: check-tools $(STAMP) typecheck
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# mypy on the installed package (modules named pyrmq.*), settings and the packages checked in pyproject.toml
# [tool.mypy]; its paths under the editable install's build/ links are printed as the repository's own.
typecheck: $(STAMP)
	@echo ">> type check: mypy, the packages pyproject.toml [tool.mypy] lists, strict"
	@out=$$($(BIN)/python -m mypy 2>&1); rc=$$?; \
	  printf '%s\n' "$$out" | sed 's|build/__editable__[^/]*/pyrmq/||'; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/kernel_bench.py

# pyrmq beside the Apache RocketMQ Java broker and Redis 7 Streams (bench/peers.py; minutes, not part of `make test`).
# PEERS_ARGS='--count 100000 --repeat 1' for a quick run.
peers: check-tools $(STAMP)
	@command -v redis-server >/dev/null 2>&1 || { echo "bench/peers.py needs redis-server: apt-get install redis-server"; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "bench/peers.py needs Maven: apt-get install maven"; exit 1; }
	@$(BIN)/python -c 'import redis, hiredis' 2>/dev/null || $(BIN)/python -m pip install --quiet redis hiredis
	$(BIN)/python bench/peers.py $(PEERS_ARGS)

# The broker's memory as its store grows to 10,000,000 messages (bench/broker_memory.py; minutes and ~2.3 GB of
# disk under $$TMPDIR, deleted afterwards; not part of `make test`). BROKER_MEMORY_ARGS='--count 2000000' for less.
broker-memory: $(STAMP)
	$(BIN)/python bench/broker_memory.py $(BROKER_MEMORY_ARGS)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis .mypy_cache $(STAMP)  # build/ holds the editable install's links

# The reliability suite at full size (docs/reliability.md): crash rounds, torn files, disk full, fuzzing, soak.
# About 30 minutes on a 2-core machine; a short version of each scenario runs inside `make test`.
chaos: $(STAMP)
	CHAOS_FULL=1 CHAOS_REPORT=$${CHAOS_REPORT:-chaos-report.jsonl} $(BIN)/python -m pytest -m chaos tests/chaos $(PYTEST_ARGS)

# Automatic failover on etcd at full size (docs/replication.md): 10 SIGKILL rounds of groups of 2 and 3, etcd down for
# 10 s, the partition and the negative control; one JSON line per run in failover-report.jsonl (failover time p50/p99,
# acked / lost / duplicated); timer and delay-level messages due 90 s after sending, parked across a SIGKILL of the
# master (docs/delay.md). `make test` runs the same tests with 2 rounds, a 3 s outage and messages due in 25 s.
failover: check-tools $(STAMP)
	PYRMQ_FAILOVER_ROUNDS=$${PYRMQ_FAILOVER_ROUNDS:-10} PYRMQ_FAILOVER_SIZES=2,3 PYRMQ_FAILOVER_ETCD_OUTAGE=10 \
	PYRMQ_FAILOVER_TIMER_DUE=$${PYRMQ_FAILOVER_TIMER_DUE:-90} \
	PYRMQ_FAILOVER_REPORT=$${PYRMQ_FAILOVER_REPORT:-failover-report.jsonl} \
	$(BIN)/python -m pytest -s tests/e2e/test_failover_etcd.py tests/e2e/test_failover_timers.py $(PYTEST_ARGS)

# The official RocketMQ 5.x clients (Python 5.1.2 and Java rocketmq-client-java) against pyrmq *and* Apache RocketMQ
# 5.5.0's broker + gRPC proxy (local mode, JDK 17): every scenario of tests/e2e/test_grpc_clients.py with both clients
# on both systems (docs/grpc.md). Several minutes; `make test` runs the Java client against pyrmq only.
grpc-peers: check-tools $(STAMP)
	PYRMQ_GRPC_55=1 $(BIN)/python -m pytest tests/e2e/test_grpc_clients.py $(PYTEST_ARGS)
