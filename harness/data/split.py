"""Split a DAPFAM-format folder's queries in two, for learning from one half and scoring the other.

    python -m harness.data.split ../shared/data/cacm-xdom-coded /tmp/coded-halves [--fraction 0.5] [--seed 0]

DAPFAM has no training split. A ranker or a citation prior that learns from judgments must learn
from judgments that are not scored: this writes ``OUT/a`` and ``OUT/b``, each with its share of
the queries and their qrels and the *same* corpus (a symbolic link to the source's file, so the
corpus's artifacts are shared), e.g. to train on ``a`` and evaluate on ``b``
(``ltr.train=OUT/a``) or to take a citation prior from ``a``'s qrels (``ltr.prior=OUT/a``).
Queries are split at random (``seed``), not by their judgments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import schema as S


def split(source: Path, out: Path, fraction: float = 0.5, seed: int = 0) -> tuple[Path, Path]:
    source, out = Path(source).resolve(), Path(out)
    for name in ("queries.parquet", "corpus.parquet", "qrels_all.parquet"):
        if not (source / name).exists():
            raise SystemExit(f"{source}: no {name}. Fix: a DAPFAM-format folder (queries, corpus, qrels_all).")
    if not 0 < fraction < 1:
        raise SystemExit(f"--fraction {fraction}: expected a number between 0 and 1.")
    queries = pd.read_parquet(source / "queries.parquet")
    qrels = pd.read_parquet(source / "qrels_all.parquet")
    ids = sorted(queries[S.QUERY_ID].astype(str))
    order = np.random.default_rng(seed).permutation(len(ids))
    first = {ids[i] for i in order[: int(round(fraction * len(ids)))]}
    halves = {"a": first, "b": set(ids) - first}
    for name, keep in halves.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        queries[queries[S.QUERY_ID].astype(str).isin(keep)].to_parquet(folder / "queries.parquet", index=False)
        qrels[qrels[S.QUERY_ID].astype(str).isin(keep)].to_parquet(folder / "qrels_all.parquet", index=False)
        link = folder / "corpus.parquet"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source / "corpus.parquet")
    return out / "a", out / "b"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.data.split", description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--fraction", type=float, default=0.5, help="share of the queries in OUT/a (default 0.5)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    left, right = split(a.source, a.out, a.fraction, a.seed)
    print(f"{left} and {right}: the queries of {a.source} split {a.fraction:g} / {1 - a.fraction:g} (seed {a.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
