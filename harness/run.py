"""Hydra entry point for one experiment.

    python -m harness.run +experiment=passage_bm25
    python -m harness.run +experiment=doc_bm25 dataset=local dataset.path=../shared/data/cacm-xdom \
        query_fields=TA target_fields=TA bm25.k1=0.9 bm25.b=0.4

Builds or reuses every artifact of the experiment, adds its row to the results table and prints
nDCG@100 / R@100 over ALL, IN and OUT.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from . import config  # noqa: F401  (registers the config schema Hydra composes on)

log = logging.getLogger("harness")


def execute(cfg: DictConfig) -> dict:
    from . import data
    from .config import check
    from .experiment import run_experiment
    from .results import add_row
    from .store import Store

    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    check(cfg)  # before the dataset is loaded (or generated) and before the JVM starts
    store = Store.from_config(cfg)
    ds = data.load(cfg.dataset, store.root)
    row = run_experiment(cfg, ds, store)
    add_row(store.root / cfg.results, row)
    return row


def user_errors() -> tuple:
    """Errors whose message names the file or key and the fix: one line and exit status 2, no traceback."""
    from .backends import SearchError
    from .config import ConfigError
    from .data.schema import DataError
    from .jvm import JavaError
    from .ltr import IdentifyingFeature
    from .runs import RunFormatError
    from .store import DamagedArtifact, StoreError

    return (
        DataError,
        ConfigError,
        StoreError,
        DamagedArtifact,
        RunFormatError,
        JavaError,
        SearchError,
        IdentifyingFeature,
        FileNotFoundError,
    )


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from .evaluate import measure_names
    from .results import format_scores

    try:
        row = execute(cfg)
    except user_errors() as e:
        log.error("%s", e)
        sys.exit(2)
    metrics = [str(m) for m in measure_names(cfg.metrics)]
    print(f"\n{row['experiment']}  ({row['dataset']}, run: {row['run_file']})")
    print(format_scores(row, metrics))
    print(
        f"index {row['index_seconds']:.1f}s  encode {row['encode_seconds']:.1f}s  "
        f"search {row['search_seconds']:.2f}s ({1000 * row['seconds_per_query']:.1f} ms/query)"
    )
    return row.get(f"{metrics[0]}/ALL", 0.0)  # for Hydra sweepers that optimise


def _stop_own_group_on_sigterm() -> None:
    """A launcher job of a sweep leads a process group with its workers (joblib's): when it is
    told to stop (the sweep's SIGTERM, or the parent-death signal of a sweep killed outright), it
    takes them all down, so nothing keeps building in the root. Artifacts commit atomically."""
    import os
    import signal

    from .sweep import JOB_GROUP_ENV

    if os.environ.get(JOB_GROUP_ENV) and os.getpgrp() == os.getpid():
        signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))


if __name__ == "__main__":
    from .config import unselected_group_keys

    _stop_own_group_on_sigterm()
    problem = unselected_group_keys(sys.argv[1:])
    if problem:
        print(f"ConfigError: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
