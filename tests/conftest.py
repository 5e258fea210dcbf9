"""Shared fixtures: every test writes its own data and artifacts under a temporary folder."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]

# Under pytest-xdist each worker (and each harness process a test starts) gets one math thread:
# two workers that each spread torch or faiss over every core only fight over the same cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
CONF = ROOT / "conf"
SHARED_CACM = ROOT.parent / "shared" / "data" / "cacm-xdom"
SHARED_CACM_CODED = ROOT.parent / "shared" / "data" / "cacm-xdom-coded"  # only coded articles, as in DAPFAM

# A small synthetic set: the same generator as the default, sized for tests.
TINY = {
    "n_docs": 120,
    "n_queries": 12,
    "n_domains": 3,
    "topics_per_domain": 3,
    "n_concepts": 4,
    "in_per_query": 4,
    "out_per_query": 2,
    "description_words": [60, 120],
    "second_code_rate": 0.1,
    "seed": 7,
}


# Tests check the harness's mechanics, not the encoder's quality: 64 word pieces per text instead
# of MiniLM's 256 make every dense build on the tiny set a few times cheaper on a CPU (the tiny
# texts run to 150-700 word pieces) while still truncating, windowing and pooling for real.
TINY_ENCODER = ["encoder.max_length=64"]


def tiny_overrides() -> list[str]:
    return [f"dataset.params.{k}={v}" for k, v in TINY.items()] + TINY_ENCODER


def sweep_args(root: Path, sweep: Path, *extra: str) -> list[str]:
    """``harness.sweep`` arguments for a sweep file on the tiny set, artifacts under ``root``."""
    return [f"sweep={sweep}", f"root={root}", *tiny_overrides(), *extra]


def make_cfg(root: Path, *overrides: str, tiny: bool = True):
    """Compose the project's Hydra config as the CLI would, with artifacts under ``root``."""
    import harness.config  # noqa: F401  (registers the config schema)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[f"root={root}", *(tiny_overrides() if tiny else []), *overrides])


def pytest_report_header(config):
    """An environment that is not the lock's, named on the first line a test run prints: the key
    and score tests that fail on it then read as a stale .venv, not a broken project."""
    from harness import lock

    return lock.stale_message() or f"environment: every distribution at {lock.LOCK.name}'s version"


def pytest_collection_modifyitems(config, items):
    """The ``long`` tests first, then the rest of the slow tier, then the fast one, each in file
    order. Under ``make test`` each worker takes the next test when it is done
    (:func:`pytest_xdist_make_scheduler`), so the short tests fill the workers' last minutes. In
    file order the 80-seed LightGBM test started last and kept one worker busy for a minute and a
    half after the others had finished."""
    items.sort(key=lambda item: (item.get_closest_marker("long") is None, item.get_closest_marker("slow") is None))


# The modules whose tests share a module-scoped fixture (a built reference run, a sweep, a running
# cluster): one worker runs each, so each is built once. Named by path rather than marked: the
# process that schedules sees node ids only, and pytest-xdist's grouping by mark (``--dist
# loadgroup``) silently does nothing on pytest 9.2 (pytest-dev/pytest-xdist#1386).
ONE_WORKER = {"tests/test_bad_inputs.py", "tests/test_gc.py", "tests/test_report_page.py", "tests/test_slurm.py"}


def scope_of(nodeid: str) -> str:
    """The unit a worker is handed: the module for :data:`ONE_WORKER`'s, else the test itself."""
    module = nodeid.split("::", 1)[0]
    return module if module in ONE_WORKER else nodeid


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` with the scopes of :func:`scope_of`. xdist hands the scopes out largest
    first (ONE_WORKER's modules), then one at a time in collection order, to whichever worker is
    about to run out."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return Scheduling(config, log)


@pytest.fixture
def tiny_folder(tmp_path) -> Path:
    """The tiny synthetic set written as a DAPFAM-format folder (the hub's three parquet files)."""
    from harness.data import mini

    params = dict(TINY, description_words=tuple(TINY["description_words"]))
    return mini.write(tmp_path / "dapfam", **params)


@pytest.fixture
def cfg_factory(tmp_path):
    return lambda *o, **kw: make_cfg(tmp_path / "store", *o, **kw)


def killed_at(cmd: list[str], point: str, building, timeout: float = 300) -> None:
    """Run ``cmd`` with ``HARNESS_FAULT=point`` (:mod:`harness.faults`: it SIGKILLs itself at that
    named point) and check that it died there, mid-build: killed by the signal, ``building()``
    (its unfinished temporary folder) still true."""
    import os
    import subprocess

    env = dict(os.environ, HARNESS_FAULT=point)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point} (exit {proc.returncode}): {proc.stderr[-1500:]}"
    assert building(), f"killed at {point}, but no build was under way"
