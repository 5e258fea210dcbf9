"""The ``prior`` family's judgments (``ltr.prior``): a qrels file or folder of queries that are not scored, audited for leakage."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pandas as pd

from .. import data, leakage
from ..errors import ConfigError
from ..stage import Context

log = logging.getLogger(__name__)


def read_prior(path: str | Path, scored_queries) -> tuple[dict, str]:
    """``{doc id: number of queries citing it}`` from judgments that are not scored: a TREC qrels
    file (``qid 0 docid rel``) or a DAPFAM-format qrels parquet (or its folder). Refused when those
    judgments cover a query being scored. Returns the counts and the file's digest."""
    p = Path(path)
    if p.is_dir():
        p = p / "qrels_all.parquet"
    if not p.exists():
        raise ConfigError(f"ltr.prior={path}: no such file. Fix: a TREC qrels file or a DAPFAM qrels_all.parquet.")
    try:
        if p.suffix == ".parquet":
            q = pd.read_parquet(p).rename(columns={"relevant_id": "doc_id", "relevance_score": "relevance"})
        else:
            q = pd.read_csv(p, sep=r"\s+", header=None, names=["query_id", "iter", "doc_id", "relevance"], dtype=str)
    except (ValueError, OSError) as e:  # pandas' EmptyDataError and ParserError are ValueErrors
        raise ConfigError(
            f"ltr.prior={path}: cannot be read ({e}). Fix: a TREC qrels file or DAPFAM's qrels."
        ) from None
    missing = [c for c in ("query_id", "doc_id", "relevance") if c not in q.columns]
    if missing:
        raise ConfigError(f"ltr.prior={path}: lacks columns {missing}. Fix: a TREC qrels file or DAPFAM's qrels.")
    q = q[pd.to_numeric(q["relevance"], errors="coerce").fillna(0) > 0].astype({"query_id": str, "doc_id": str})
    if q.empty:
        raise ConfigError(
            f"ltr.prior={path}: no positive judgment, so the prior would be 0 for every document. Fix: qrels "
            f"with relevant pairs (relevance > 0)."
        )
    overlap = sorted(set(q["query_id"]) & {str(x) for x in scored_queries})
    if overlap:
        raise ConfigError(
            f"ltr.prior={path}: its judgments cover {len(overlap)} of the queries being scored (e.g. {overlap[0]}): "
            f"a prior learned from the judgments being scored is the benchmark's answer key. Fix: judgments of "
            f"other queries (another dataset, or a split whose queries this run does not score)."
        )
    cites = q.drop_duplicates(["query_id", "doc_id"]).groupby("doc_id").size().to_dict()
    return cites, hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def audit_prior(path: str, ctx: Context) -> None:
    """``ltr.prior`` from a DAPFAM-format folder: the leakage audit by content against the scored
    judgments (a bare qrels file has ids only, which :func:`read_prior` compares)."""
    folder = Path(path)
    if not (folder.is_dir() and (folder / "queries.parquet").exists() and (folder / "corpus.parquet").exists()):
        return
    _, prior = data.load_training("ltr.prior", str(folder), ctx.cfg.dataset, ctx.store.root)
    leakage.check(leakage.audit(leakage.judged(prior), leakage.judged(ctx.ds)), f"ltr.prior={path}")
