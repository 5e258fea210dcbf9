# One-command entry points. Every target depends on the virtual environment, so on a fresh
# machine `make test` alone and `make sweep` alone do all the set-up.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
SWEEP   ?= default
DATASET ?= mini
ARGS    ?=
REGRESS ?= mini

.PHONY: install test check lint sweep sweep-list run regress bench clean-artifacts

install: $(STAMP)

# torch first and pinned: it is a CPU build on this machine's disk; letting pyserini's
# dependencies resolve torch would pull a CUDA build of several GB.
$(STAMP): pyproject.toml
	python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

# Lint, format and types: the gate both tiers start with.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The fast tier, for the edit loop: lint, types and the tests that need no JVM and no model
# (HARNESS_FAST_TIER=1 makes a test that starts either fail, naming the fix: mark it slow).
check: lint
	HARNESS_FAST_TIER=1 $(PY) -m pytest -q -n 2 --dist loadscope -m "not slow" -p no:cacheprovider tests

# Everything (what CI runs): lint, types and every test, fast and slow, on three workers. Each
# worker takes the next test when it is done (loadscope, its scopes refined in tests/conftest.py:
# a module whose tests share a built fixture goes to one worker whole, every other test alone), the
# tests marked long first, then the slow tier: the long tests start early, the short ones fill the end.
# worksteal, which splits the suite into one block per worker up front, left one worker running a
# long test for a minute after the others had finished.
# Three on two cores, because many tests wait on a subprocess, the JVM or a launcher while another
# computes (bench/under_load.py --only test, same tests: 3 workers 525 s, 4 workers 534 s).
test: lint
	$(PY) -m pytest -q -n 3 --dist loadscope tests

# The main job: the named sweep on the embedded synthetic data (DATASET=local ARGS='dataset.path=…'
# for a DAPFAM-format folder), then the results table and plots in runs/report/<sweep>/.
sweep: $(STAMP)
	$(PY) -m harness.sweep sweep=$(SWEEP) dataset=$(DATASET) $(ARGS)

sweep-list: $(STAMP)
	$(PY) -m harness.sweep sweep=$(SWEEP) dataset=$(DATASET) list=true $(ARGS)

run: $(STAMP)
	$(PY) -m harness.run $(ARGS)

# Regression files (regressions/NAME.yaml): every expected value printed OK, OK* or FAIL; exit 1 on
# a FAIL. REGRESS="cacm-xdom cacm-xdom-coded" reads ../shared's folders where they lie; all: every file.
regress: $(STAMP)
	$(PY) -m harness.regress $(REGRESS) $(ARGS)

# bm25s (an extra of pyproject.toml) is the second anchor of bench/dapfam_scale.py. The benchmarks'
# real data is checked first: cacm-xdom's numbers must be docs/beyond-the-paper.md's.
bench: $(STAMP)
	$(PIP) install -q -e '.[dev,bench]'
	$(PY) -m harness.regress cacm-xdom cacm-xdom-coded
	$(PY) bench/run_all.py

clean-artifacts:
	rm -rf indexes/* runs/*
	touch indexes/.gitkeep runs/.gitkeep
