# Two commands: `make run` and `make test`. Both set up .venv from scratch when needed.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: run setup test quick lint bench crash clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is required ($(PYTHON) not found)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	@$(PY) -m skald.launcher

test: $(STAMP)
	@$(PY) -m skald.testrun

# A developer's quick run: SQLite, no browser, real-stack or slow tests (child processes, the API
# contract's generated requests), property tests at a twentieth. `make test` runs them all.
quick: $(STAMP)
	@$(PY) -m skald.testrun --quick

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy loop skald approvals proposals audit

bench: $(STAMP)
	@$(PY) -m bench

# Kill a worker at every failpoint N times (default 20), restart it, print the invariants table.
# CRASH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/any also runs them on PostgreSQL.
# Then the jobs points (issue 27, tests/e2e/crash_jobs.py): async task, cron run and dead-letter retry,
# killed around their delivery; every ending delivered exactly once by the restarted worker's sweep.
# STACK=1: through the real stack (daphne + qcluster + sweeper, three boots a run: slow).
# Then the edges (issue 28): zombies (a worker SIGSTOPped mid-command past its lease, SIGCONTed after a
# takeover: effects per call, stale writes applied) and idle kills (each idle worker of the real stack
# SIGKILLed in turn on the ORM broker and Redis: the time to resume), IDLE_RUNS times each.
# IDLE=n runs only the idle kills, n times.
N ?= 20
JOBS ?= 1
IDLE_RUNS ?= 2
crash: $(STAMP)
	@if [ -n "$(IDLE)" ]; then $(PY) -m tests.e2e.crash_idle --runs $(IDLE); \
	elif [ -n "$(STACK)" ]; then $(PY) -m tests.e2e.crash_stack --runs $(N); \
	else $(PY) -m tests.e2e.crash --runs $(N) --jobs $(JOBS) && $(PY) -m tests.e2e.crash_jobs --runs $(N) \
		&& $(PY) -m tests.e2e.crash_zombie --runs $(N) \
		&& $(PY) -m tests.e2e.crash_idle --runs $(IDLE_RUNS); fi

clean:
	rm -rf $(VENV) var
