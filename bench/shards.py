"""Sharded against unsharded builds on two workers, at equal work (harness/shards.py).

The same experiment on the same data in two fresh artifact roots: unsharded, one process with two
threads (encoder math threads for dense, ``index.threads=2`` for BM25); sharded, ``shards=2`` as
two jobs of one thread each (``sharding.launcher=local``: submitit's local executor, the Slurm
path's code), then the merge. Ratio = sharded wall time / unsharded wall time of the whole
experiment (units, search and scoring are the same work on both sides); below 1 the shards pay
for their start-up (a process, a model or a JVM each) and the merge.

    python bench/shards.py            # mini, passage_dense at 128 tokens and passage_bm25 at 64 words
    python bench/shards.py --quick    # documents of the smallest mini set, in process (tests/test_bench.py)
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

from _util import add_quick, compose, report


def wall(root: Path, *overrides: str) -> tuple[float, dict]:
    from harness.run import execute

    cfg = compose(*overrides, f"root={root}")
    t0 = time.perf_counter()
    row = execute(cfg)
    return time.perf_counter() - t0, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_quick(ap)
    a = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tmp = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    experiments = {
        "dense": ["+experiment=passage_dense", "passage.length=128"],
        "bm25": ["+experiment=passage_bm25", "passage.length=64"],
    }
    data, launcher = [], "local"
    if a.quick:
        # whole documents of the smallest mini set, 64 word pieces each, the shards built in this
        # process: the script's path without a job's start-up (shard jobs run in tests/test_shards.py
        # on the local launcher and in tests/test_slurm.py on Slurm)
        experiments = {"dense": ["+experiment=doc_dense", "encoder.max_length=64"], "bm25": ["+experiment=doc_bm25"]}
        data, launcher = ["dataset.params.n_docs=60", "dataset.params.n_queries=8"], "inline"
    for name, exp in experiments.items():
        import torch

        torch.set_num_threads(2)
        whole, row = wall(tmp / f"{name}-whole", *exp, *data, "index.threads=2")
        sharded, srow = wall(
            tmp / f"{name}-sharded",
            *exp,
            *data,
            "shards=2",
            f"sharding.launcher={launcher}",
            "sharding.cpus_per_task=1",
            "index.threads=1",
        )
        assert row["nDCG@100/ALL"] == srow["nDCG@100/ALL"] or abs(row["nDCG@100/ALL"] - srow["nDCG@100/ALL"]) < 1e-4
        report(
            f"shards {name} 2 jobs x1 thread/1 process x2",
            sharded / whole,
            f"{name} experiment, fresh root: 2 shard jobs of 1 thread {sharded:.1f} s, 1 process of 2 threads "
            f"{whole:.1f} s (nDCG@100 ALL {srow['nDCG@100/ALL']:.4f} / {row['nDCG@100/ALL']:.4f})",
        )


if __name__ == "__main__":
    main()
