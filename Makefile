# Every target installs what it needs into .venv itself, so a fresh clone works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install system-packages test test-fast lint demo bench bench-peers bench-scale chaos completions clean

# The venv is filled by uv, itself installed into it by the system's pip: 8 s for the whole
# development set where `python -m venv` (ensurepip) and pip took 26 s of every fresh run.
# pip goes in too, for those who use it.
$(BIN)/uv:
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python

$(STAMP): pyproject.toml $(BIN)/uv
	$(UV_INSTALL) pip -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Debian packages the tests drive for real (PgBouncer, Chromium for the browser tests),
# installed once before the parallel test processes start (as root, with apt-get; elsewhere
# the tests that need a missing one say so). The fixtures install them too when run alone.
SYSTEM_PACKAGES := pgbouncer:/usr/sbin/pgbouncer chromium:/usr/bin/chromium
system-packages:
	@missing=""; for entry in $(SYSTEM_PACKAGES); do \
		test -x "$${entry#*:}" || missing="$$missing $${entry%%:*}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Four test processes (pytest-xdist), a file's tests in one of them (module fixtures built
# once). Four on two cores: most tests wait on real processes, servers and browsers (the
# suite's processes used 1.1-1.5 of the two cores with three), and the others fill those
# waits (the suite: 8 min 56 s with two, 7 min 5 s with three; on a later machine 7 min 56 s
# with three, 7 min 20 s with four).
# Files are taken in collection order, the slow end-to-end ones first (tests/conftest.py):
# xdist's own order (most tests first) left a 54 s file to end the run alone.
PYTEST_PARALLEL ?= -n 4 --dist loadfile --no-loadscope-reorder
# With bytecode caching on (an environment may turn it off), the hundreds of `taskq`
# processes the tests start compile the package once, not each (0.17 s of CPU apiece).
# The benchmarks too: a deployment has its bytecode, and a worker's span exporter process,
# started with it, would otherwise compile the OpenTelemetry SDK during the timed drain.
CACHED := env -u PYTHONDONTWRITEBYTECODE
PYTEST := $(CACHED) $(BIN)/pytest
# The linters (11 s of one core) run beside the tests, whose first seconds wait on their
# servers' start: their output comes after the tests', and either failing fails the target.
test: $(STAMP) system-packages
	@lint_log=$$(mktemp); $(MAKE) --no-print-directory lint >$$lint_log 2>&1 & lint=$$!; \
	$(PYTEST) $(PYTEST_PARALLEL); tests=$$?; \
	wait $$lint; linted=$$?; cat $$lint_log; rm -f $$lint_log; \
	if [ $$linted -ne 0 ]; then echo "make test: lint failed"; fi; \
	[ $$tests -eq 0 ] && [ $$linted -eq 0 ]

test-fast: $(STAMP) system-packages
	$(PYTEST) $(PYTEST_PARALLEL) -m "not slow"

# Enqueues the example jobs, drains them with
# `taskq workgroup start workgroup.example.toml --until-idle`, prints a summary and the next
# steps. Installs TaskQ alone (no test or lint tools); `make test` adds those to the same venv.
DEMO_STAMP := $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml $(BIN)/uv
	$(UV_INSTALL) pip -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	TASKQ_PG_DSN=$${TASKQ_PG_DSN:-embedded} $(BIN)/python -m examples.demo --workgroup workgroup.example.toml

bench: $(STAMP)
	$(CACHED) $(BIN)/python benchmarks/bench.py
	$(CACHED) $(BIN)/python benchmarks/startup.py
	$(CACHED) $(BIN)/python benchmarks/cron_tick.py

# Drain rate with 1,000,000 jobs waiting vs 10,000 and the worker's memory, then the steady
# state: enqueue and drain for 6 minutes while the worker's leader prunes jobs finished more
# than 60 s ago once a minute, printing the jobs table's size, dead tuples and drain rate per
# minute (about 15 minutes in all). SCALE_ARGS picks: `--only steady` or `--only drain`,
# `--trace` (table health every 10 s of the big drain), `--plain-tables` (without migration
# 0004's autovacuum settings, to compare); `benchmarks/scale.py --help` lists the rest.
SCALE_ARGS ?=
bench-scale: $(STAMP)
	$(CACHED) $(BIN)/python benchmarks/scale.py $(SCALE_ARGS)

# TaskQ side by side with the peer queues on the same PostgreSQL (BENCH_PG, default the local
# server), with the harness in ../shared/bench-peers. The peers get a venv of their own.
PEERS_DIR ?= ../shared/bench-peers
BENCH_VENV := .bench-venv
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_RESULTS ?= .bench-results
REPS ?= 3

# A clone elsewhere than beside shared/ names the harness: one line, not make's "No rule".
$(PEERS_DIR)/requirements.txt:
	@echo "bench-peers: no peer harness at $(PEERS_DIR); pass PEERS_DIR=<its folder>" >&2; exit 2

$(BENCH_STAMP): pyproject.toml $(PEERS_DIR)/requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet -r $(PEERS_DIR)/requirements.txt
	$(BENCH_VENV)/bin/pip install --quiet -e .
	touch $(BENCH_STAMP)

bench-peers: $(BENCH_STAMP)
	mkdir -p $(BENCH_RESULTS)
	rm -f $(BENCH_RESULTS)/raw.jsonl
	BENCH_PY=$(abspath $(BENCH_VENV))/bin/python EXTRA_DIR=$(abspath benchmarks) \
	  PYTHONPATH=$(abspath $(PEERS_DIR)) PEERS="pgqueuer procrastinate taskq" REPS=$(REPS) \
	  CEILINGS=$${CEILINGS:-0} OUT=$(abspath $(BENCH_RESULTS))/raw.jsonl \
	  $(CACHED) bash $(PEERS_DIR)/run_all.sh
	@echo
	$(BENCH_VENV)/bin/python benchmarks/peer_ratios.py $(BENCH_RESULTS)/raw.jsonl

# Faults on purpose (kill -9 storms, PostgreSQL restarts and outages, frozen and orphaned
# children, SIGTERM mid-job, leader loss) against real workers on a private PostgreSQL; prints
# a table and exits 1 when an invariant fails (about 8 minutes; `--short` is the CI version).
chaos: $(STAMP)
	$(BIN)/python -m chaos $(CHAOS_ARGS)

completions: $(STAMP)
	$(BIN)/python scripts/gen_completions.py

# docs/settings.md from TaskqSettings (tests/unit/test_settings_doc.py checks it for drift).
.PHONY: settings-doc
settings-doc: $(STAMP)
	$(BIN)/python scripts/gen_settings_doc.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
