"""Reciprocal Rank Fusion of family runs, through pyserini's fusion (Cormack et al., SIGIR 2009).

score(d) = sum over runs of 1 / (k + rank_r(d)), over the top ``depth`` of each run. Ranks are the
runs' own (trec_eval order, see :mod:`harness.runs`). pyserini truncates after its own tie-break
(doc id ascending); we ask it for the full union and cut to ``out_k`` in trec_eval's order, so the
written ranks are the ones trec_eval evaluates.
"""
from __future__ import annotations

import pandas as pd

from .runs import top_k, with_ranks


def to_trecrun(run: pd.DataFrame):
    from pyserini.trectools import TrecRun

    r = with_ranks(run)
    df = pd.DataFrame({"topic": r["query_id"], "q0": "Q0", "docid": r["doc_id"], "rank": r["rank"],
                       "score": r["score"], "tag": "run"})
    return TrecRun.from_dataframes([df])


def rrf(runs: list[pd.DataFrame], k: int = 60, depth: int | None = 100, out_k: int | None = 100) -> pd.DataFrame:
    """Fuse run tables by RRF; returns a run table with the top ``out_k`` per query."""
    from . import jvm  # noqa: F401  (pyserini.fusion imports pyserini.search)
    from pyserini.fusion import reciprocal_rank_fusion

    if len(runs) < 2:
        raise ValueError("RRF needs at least two runs (fusion.backends).")
    if k < 0:
        raise ValueError(f"fusion.k={k}: expected a non-negative integer (the paper's grid: 10, 30, 60, 100).")
    fused = reciprocal_rank_fusion([to_trecrun(r) for r in runs], rrf_k=int(k), depth=depth, k=None).run_data
    out = pd.DataFrame({"query_id": fused["topic"].astype(str), "doc_id": fused["docid"].astype(str),
                        "score": fused["score"].astype(float)})
    return top_k(out, out_k) if out_k else out


def node(exp, parts):
    """The fused run stage: RRF of family runs (each an artifact other experiments share)."""
    from .store import Artifact

    f = exp.cfg.fusion
    params = {"method": str(f.method), "k": int(f.k), "depth": int(f.depth), "out_k": int(exp.cfg.search.k)}
    art = Artifact("fused_run", params, tuple(parts))

    def build(tmp):
        from .runs import read_trec, write_trec

        runs = [read_trec(exp.store.path(p) / "run.trec") for p in parts]
        tag = exp.tag(art)
        write_trec(rrf(runs, params["k"], params["depth"], params["out_k"]), tmp / "run.trec", tag)
        return {"tag": tag}

    return exp.ensure(art, build, "RRF fused run")
