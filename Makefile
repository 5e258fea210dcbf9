# One-command entry points. Every target depends on the virtual environment, so on a fresh
# machine `make test` alone and `make sweep` alone do all the set-up.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
SWEEP   ?= default
DATASET ?= mini
ARGS    ?=
REGRESS ?= mini

SHELL   := /bin/bash

.PHONY: install lock upgrade test check lint sweep sweep-list run regress bench clean-artifacts

install: $(STAMP)

# requirements.lock names every distribution, each at one version: the install is the same on
# every machine and every day, and artifact keys (which follow the versions of the libraries that
# compute them) move only when someone runs `make upgrade`. A stale .venv is made anew, so nothing
# the lock does not name stays installed.
# torch first, from the lock (a CPU build on this machine's disk): resolved by pip alongside
# pyserini's dependencies it would pull a CUDA build of several GB. TORCH='torch==2.13.0 --index-url
# …' installs a CUDA build on purpose (docs/development.md, "A GPU").
LOCK    := requirements.lock
TORCH   ?= $(shell grep '^torch==' $(LOCK))
$(STAMP): pyproject.toml $(LOCK)
	python3 -m venv --clear .venv
	$(PIP) install -q $(TORCH)
	grep -v '^torch==' $(LOCK) > .venv/lock-without-torch.txt
	$(PIP) install -q --no-deps -r .venv/lock-without-torch.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -m harness.lock check
	$(PY) -m harness.models install
	touch $(STAMP)

# The lock from pyproject.toml (every extra) and requirements/holds.txt (versions held on
# purpose, each with its reason). `make lock` keeps every pin it can and adds what pyproject
# gained; `make upgrade` moves everything to the newest release (PACKAGES='transformers faiss-cpu'
# moves only those), then reinstalls, rewrites the default sweep's keys file and prints what moved
# and which artifact kinds re-key: the commit message's lines (docs/development.md, "Dependencies").
WHEELS  ?= /opt/wheels
UV_COMPILE = $(PY) -m uv pip compile pyproject.toml --all-extras -c requirements/holds.txt --override requirements/overrides.txt \
	--python-version 3.11 --python-platform x86_64-manylinux_2_28 --quiet \
	$(if $(wildcard $(WHEELS)),--find-links $(WHEELS)) -o $(LOCK)
PACKAGES ?=

# uv alone, at the lock's version: lock and upgrade work while pyproject and the lock disagree.
.venv/bin/python:
	python3 -m venv .venv

lock: | .venv/bin/python
	$(PIP) install -q $$(grep '^uv==' $(LOCK))
	$(UV_COMPILE)
	$(PY) -m harness.lock diff <(git show HEAD:$(LOCK)) $(LOCK)

upgrade: | .venv/bin/python
	$(PIP) install -q $$(grep '^uv==' $(LOCK))
	cp $(LOCK) .venv/lock-before-upgrade.txt
	$(UV_COMPILE) $(if $(PACKAGES),$(addprefix --upgrade-package ,$(PACKAGES)),--upgrade)
	$(MAKE) install
	HARNESS_UPDATE_KEYS=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_architecture.py -k default_sweep
	$(PY) -m harness.lock diff .venv/lock-before-upgrade.txt $(LOCK)

# Lint, format and types: the gate both tiers start with.
lint: $(STAMP)
	$(PY) -m harness.lock check
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

# bm25s (pyproject's bench extra, in the lock) is the second anchor of bench/dapfam_scale.py. The
# benchmarks' real data is checked first: cacm-xdom's numbers must be docs/beyond-the-paper.md's.
bench: $(STAMP)
	$(PY) -m harness.regress cacm-xdom cacm-xdom-coded cacm-xdom-coded-dtypes
	$(PY) bench/run_all.py

clean-artifacts:
	rm -rf indexes/* runs/*
	touch indexes/.gitkeep runs/.gitkeep
