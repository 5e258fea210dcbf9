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
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import pandas as pd

from . import ipc, stage
from .artifact import Artifact
from .data import schema as S
from .errors import ConfigError, number
from .naming import inner_stem, tag
from .runs import read_trec, top_k, with_ranks, write_trec
from .stage import Context, Stage, register

log = logging.getLogger(__name__)

METHODS = ("ipc3_disjoint",)
VERSION = 1  # of the re-ranked-run builder (harness.env): bump when a change alters its run files


def disjoint(run: pd.DataFrame, query_codes: dict, doc_codes: dict) -> pd.Series:
    """For each row of ``run``: True when both sides have IPC3 codes and share none (:func:`harness.ipc.disjoint`)."""
    out = [ipc.disjoint(query_codes.get(q), doc_codes.get(d)) for q, d in zip(run["query_id"], run["doc_id"])]
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


def artifact(run: Artifact, topics: Artifact, r, out_k: int) -> Artifact:
    """The re-ranked run of the final (single or fused) run under the ``rerank`` group ``r``."""
    params = {"method": str(r.method), "weight": float(r.weight), "k": int(r.k), "out_k": int(out_k)}
    return Artifact(stage.RERANKED_RUN, params, (run, topics), {"stage": VERSION})


def build(tmp: Path, art: Artifact, run_file: Path, query_codes: dict, doc_codes: dict) -> dict:
    """Re-rank the run in ``run_file`` by the queries' and documents' IPC3 codes into ``run.trec``."""
    params = art.params
    out = ipc3_disjoint(read_trec(run_file), query_codes, doc_codes, params["weight"], params["k"], params["out_k"])
    name = tag(art)
    write_trec(out, tmp / "run.trec", name)
    without = sum(1 for c in query_codes.values() if c is None or not len(c))
    if without:
        log.warning(
            "rerank: %d of %d queries have no IPC3 codes; their runs are left as they are", without, len(query_codes)
        )
    return {"tag": name, "queries_without_codes": without}


def node(ctx: Context, runs: list[Artifact]) -> Artifact:
    """The re-ranked run of the current run ``runs[0]`` under ``ctx``'s ``rerank`` group."""
    run = runs[0]
    art = artifact(run, ctx.topics_node, ctx.cfg.rerank, int(ctx.cfg.search.k))
    q = ctx.ds.queries
    codes = dict(zip(q[S.QUERY_ID], q[S.IPC3]))
    run_file = ctx.store.path(run) / "run.trec"
    return ctx.ensure(art, lambda tmp: build(tmp, art, run_file, codes, ctx.ds.doc_ipc3), "IPC3 re-ranked run")


def reranked_tag(run: Artifact) -> str:
    return f"{inner_stem(run.parents[0])}.{run.params['method']}{run.params['weight']:g}.{run.key[:8]}"


def reranked_columns(params: dict | None) -> dict:
    return {"rerank": params["method"] if params else None, "rerank_weight": params["weight"] if params else None}


class RerankMethod(StrEnum):
    ipc3_disjoint = "ipc3_disjoint"


@dataclass
class RerankConf:
    """Domain-aware re-ranking of the final run (the ``rerank`` group)."""

    method: RerankMethod = RerankMethod.ipc3_disjoint
    weight: float = 0.1
    k: int = 60


def check(cfg) -> None:
    r = cfg.get("rerank")
    if r is None:
        return
    number(r.weight, "rerank.weight", 0.0, hint=" (0 leaves the run as it is)")
    if r.k < 0:
        raise ConfigError(f"rerank.k={r.k}: expected a non-negative integer (RRF's constant).")


STAGE = register(
    Stage(
        stage.RERANKED_RUN,
        "runs",
        "re-ranked runs (IPC3)",
        VERSION,
        group="rerank",
        run=True,
        node=node,
        inner=lambda run: run.parents[0],
        requires=lambda r: [(part, [S.IPC3], f"rerank={r.method}") for part in ("queries", "corpus")],
        tag=reranked_tag,
        columns=reranked_columns,
        system=" + IPC3 re-rank",
        in_fused_input="re-ranked on its own",
        cost="transform",
        schema=RerankConf,
        check=check,
    )
)
