"""Hydra entry point for one experiment.

    python -m harness.run +experiment=passage_bm25
    python -m harness.run +experiment=doc_bm25 dataset=local dataset.path=../shared/data/cacm-xdom \
        query_fields=TA target_fields=TA bm25.k1=0.9 bm25.b=0.4

Builds or reuses every artifact of the experiment, adds its row to the results table and prints
nDCG@100 / R@100 over ALL, IN and OUT.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import hydra
from omegaconf import DictConfig

from . import data
from .backends import SearchError
from .config import ConfigError, check, unselected_group_keys  # importing config registers its schema
from .data.schema import DataError
from .env import JavaError
from .evaluate import measure_names
from .experiment import run_experiment
from .leakage import Leakage
from .ltr import IdentifyingFeature
from .results import add_row, format_scores
from .runs import RunFormatError
from .shards import ShardError
from .store import DamagedArtifact, Store, StoreError

log = logging.getLogger("harness")

JOB_GROUP_ENV = "HARNESS_JOB_GROUP"  # set for a launcher job of a sweep: it leads a process group with its workers


def execute(cfg: DictConfig) -> dict:
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    check(cfg)  # before the dataset is loaded (or generated) and before the JVM starts
    store = Store.from_config(cfg)
    ds = data.load(cfg.dataset, store.root)
    row = run_experiment(cfg, ds, store)
    add_row(store.root / cfg.results, row)
    return row


def user_errors() -> tuple:
    """Errors whose message names the file or key and the fix: one line and exit status 2, no traceback."""
    return (
        DataError,
        ConfigError,
        StoreError,
        DamagedArtifact,
        RunFormatError,
        JavaError,
        SearchError,
        IdentifyingFeature,
        Leakage,
        ShardError,
        FileNotFoundError,
    )


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
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
    if row.get("encoder_dtype"):
        print(f"encoder {row['encoder_dtype']} ({row['encoder_dtype_reason']})")
    return row.get(f"{metrics[0]}/ALL", 0.0)  # for Hydra sweepers that optimise


def _stop_own_group_on_sigterm() -> None:
    """A launcher job of a sweep leads a process group with its workers (joblib's): when it is
    told to stop (the sweep's SIGTERM, or the parent-death signal of a sweep killed outright), it
    takes them all down, so nothing keeps building in the root. Artifacts commit atomically."""
    if os.environ.get(JOB_GROUP_ENV) and os.getpgrp() == os.getpid():
        signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))


if __name__ == "__main__":
    _stop_own_group_on_sigterm()
    problem = unselected_group_keys(sys.argv[1:])
    if problem:
        print(f"ConfigError: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
