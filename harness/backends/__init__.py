"""Retrieval backends. Each is one module here, ``harness/backends/<name>.py``, whose ``BACKEND``
object says how to index a unit set and how to search it:

* ``tokenizer``: what ``passage.tokenizer=auto`` means for it (``words`` or ``encoder``);
* ``index(ctx, units) -> Artifact``: asks the store for its index (and anything between, such as
  embeddings) and returns the artifact a search reads;
* ``run_params(ctx) -> dict``: the config values besides the query view and depth that change its
  unit run (BM25's k1 and b, a dense query prefix): they key the run and name it;
* ``search(ctx, index, topics, params) -> (run table, seconds, queries with no text)``;
* ``search_env(ctx) -> dict``: the search code's version and the software whose upgrade changes a
  run (:mod:`harness.env`); it keys unit runs, as each index's own ``env`` keys the index.

``backend=<name>`` selects one; adding a backend is adding a module (and, if it has settings, a
``conf/`` group): :class:`harness.experiment.Experiment` does not change. Modules are imported on
first use, so a BM25 experiment never loads torch and a dense one starts no JVM for indexing.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from ..errors import ConfigError


class SearchError(RuntimeError):
    """A search that cannot give a complete run; the message names the query and the fix."""


def available() -> list[str]:
    return sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


@cache
def get(name: str):
    """The ``BACKEND`` of ``harness.backends.<name>``."""
    if name not in available():
        raise ConfigError(f"backend={name!r}: no module harness/backends/{name}.py. Fix: one of {available()}.")
    return importlib.import_module(f"{__name__}.{name}").BACKEND
