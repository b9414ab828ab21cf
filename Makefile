# Two commands on a fresh machine: `make run` (set up + a real search) and `make test` (set up + tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is installed first and pinned: on machines that carry the CPU wheel this version is served
# from it; elsewhere pip takes the normal (CUDA) build of the same version from PyPI.
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

RUN_ARGS ?= --model tiny-gpt2 --space quick --trials 8
LINT_PATHS := autotune tests tools $(wildcard benchmarks/*.py)

.PHONY: install run test test-unit lint format docs docs-examples clean bench bench-md bench-aa bench-ab

install: $(STAMP)

# A .venv set up before the distribution was named hf-autotune holds this checkout as `autotune`:
# that one is uninstalled first.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)"
	if $(BIN)/python -m pip show -q autotune >/dev/null 2>&1; then $(BIN)/python -m pip uninstall -q -y autotune; fi
	$(BIN)/python -m pip install -q -e ".[dev,ray,postgres,mysql,report,trackers,trl]"
	touch $(STAMP)

run: install
	$(BIN)/autotune search $(RUN_ARGS)

test: install
	$(BIN)/python -m pytest -q

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix $(LINT_PATHS)
	$(BIN)/ruff format $(LINT_PATHS)

# The manual (docs/, mkdocs.yml): the generated reference pages must be current, then the site is
# built strictly (a broken link, a missing anchor or a page left out of the nav fails).
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/python -m autotune.cli.reference --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Re-take every example output of README.md and docs/ (runs the example searches: minutes).
docs-examples: install
	$(BIN)/python tools/docs_examples.py

# Benchmarks (CPU, 30-45 minutes): the end-to-end comparison of benchmarks/RESULTS.md, a real
# 10-trial search per preset over benchmarks/space_ladder.yaml, then its pick, `TrainingArguments()`
# and auto_find_batch_size re-measured in fresh plain-Trainer processes. Every other benchmark runs
# on its own (`python -m benchmarks.NAME`); each rewrites RESULTS.md with its section.
BENCH_ARGS ?=

bench: install
	$(BIN)/python -m benchmarks.ladder_quality $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.fresh_contenders --rounds 3 --seconds 20

# RESULTS.md again from the stored results (benchmarks/results/*.json) and benchmarks/sections/*.md;
# every benchmark does this after it measures.
bench-md: install
	$(BIN)/python -m benchmarks.assemble

# Issue 31's A/A benchmark (15-25 minutes on 2 cores): 10 searches over benchmarks/space_aa.yaml,
# in which the defaults are the fastest configuration; at most 1 may claim a speedup.
AA_ARGS ?=
bench-aa: install
	$(BIN)/python -m benchmarks.aa_check $(AA_ARGS)

# The A/B check (about 25 minutes): each CPU preset's `make run` answer re-measured as a user does,
# fresh plain-Trainer processes in rotated order; the stated interval must hold the user's ratio.
AB_ARGS ?=
bench-ab: install
	$(BIN)/python -m benchmarks.ab_check $(AB_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache autotune.db site
