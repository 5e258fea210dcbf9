"""Domain-aware re-ranking: give cross-domain candidates a place in the top k.

DAPFAM calls a relevant target OUT-domain when it shares no IPC3 code with the query; such prior
art scores about 5x lower than IN-domain in every configuration of the paper, because a ranking
by similarity favours the query's own technical field. ``ipc3_disjoint`` fuses the run with its
own *IPC3-disjoint sub-list* (the run's candidates that share no IPC3 code with the query, in the
run's order) by weighted RRF:

    score(d) = 1 / (k + rank(d)) + weight * 1 / (k + rank_disjoint(d))   (second term: disjoint d only)

A candidate with no IPC3 codes is never called disjoint (its domain is unknown), and a query
without codes keeps its run. The transform reads nothing but the run and the codes in the data:
it never searches again. Its price is visible in the report: OUT rises as IN falls
(``in_vs_out.png`` marks the Pareto front).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pandas as pd

from .runs import top_k, with_ranks

if TYPE_CHECKING:
    from .experiment import Experiment
    from .store import Artifact

log = logging.getLogger(__name__)

METHODS = ("ipc3_disjoint",)
VERSION = 1  # of the re-ranked-run builder (harness.env): bump when a change alters its run files


def disjoint(run: pd.DataFrame, query_codes: dict, doc_codes: dict) -> pd.Series:
    """For each row of ``run``: True when both sides have IPC3 codes and share none."""
    qsets = {q: set(c) for q, c in query_codes.items() if c is not None and len(c)}
    out = []
    for q, d in zip(run["query_id"], run["doc_id"]):
        qs, ds = qsets.get(q), doc_codes.get(d)
        out.append(qs is not None and bool(qs) and ds is not None and len(ds) > 0 and qs.isdisjoint(ds))
    return pd.Series(out, index=run.index, dtype=bool)


def ipc3_disjoint(
    run: pd.DataFrame, query_codes: dict, doc_codes: dict, weight: float = 0.05, k: int = 60, out_k: int | None = 100
) -> pd.DataFrame:
    """Weighted RRF of a run and its IPC3-disjoint sub-list (module docstring); ranks in trec_eval's order."""
    r = with_ranks(run)
    score = 1.0 / (k + r["rank"].to_numpy(float))
    mask = disjoint(r, query_codes, doc_codes)
    if weight and mask.any():
        sub = with_ranks(r.loc[mask, ["query_id", "doc_id", "score"]])
        bonus = pd.Series(weight / (k + sub["rank"].to_numpy(float)), index=sub.set_index(["query_id", "doc_id"]).index)
        score = score + bonus.reindex(pd.MultiIndex.from_frame(r[["query_id", "doc_id"]])).fillna(0.0).to_numpy()
    out = pd.DataFrame({"query_id": r["query_id"].to_numpy(), "doc_id": r["doc_id"].to_numpy(), "score": score})
    return top_k(out, out_k) if out_k else out


def node(exp: Experiment, run: Artifact) -> Artifact:
    """The re-ranked run stage: a transform of the final (single or fused) run."""
    from .data import schema as S
    from .store import Artifact

    r = exp.cfg.rerank
    params = {"method": str(r.method), "weight": float(r.weight), "k": int(r.k), "out_k": int(exp.cfg.search.k)}
    art = Artifact("reranked_run", params, (run, exp.topics_node), {"stage": VERSION})

    def build(tmp):
        from .runs import read_trec, write_trec

        codes = dict(zip(exp.ds.queries[S.QUERY_ID], exp.ds.queries[S.IPC3]))
        out = ipc3_disjoint(
            read_trec(exp.store.path(run) / "run.trec"),
            codes,
            exp.ds.doc_ipc3,
            params["weight"],
            params["k"],
            params["out_k"],
        )
        tag = exp.tag(art)
        write_trec(out, tmp / "run.trec", tag)
        without = sum(1 for c in codes.values() if c is None or not len(c))
        if without:
            log.warning(
                "rerank: %d of %d queries have no IPC3 codes; their runs are left as they are", without, len(codes)
            )
        return {"tag": tag, "queries_without_codes": without}

    return exp.ensure(art, build, "IPC3 re-ranked run")
