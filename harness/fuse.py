"""Fusion of family runs through pyserini's trectools: RRF, interpolation, average.

* ``rrf``: score(d) = sum_i w_i / (k + rank_i(d)) (Cormack et al., SIGIR 2009; weights all 1 is
  pyserini's ``reciprocal_rank_fusion``);
* ``interpolation``: sum_i w_i * minmax_i(d), each run's scores min-max normalised per query
  (BM25 and cosine scores live on different scales, so raw scores are never mixed);
* ``average``: mean of the normalised scores (pyserini's ``normalize`` fusion, divided by n).

The input runs are ``fusion.backends`` (one per backend, this experiment's views) or
``fusion.runs``, a list of per-run overrides of this experiment's config (:func:`run_config`).
Only the top ``depth`` of each run count; a document missing from a run adds nothing for it.
Ranks are the runs' own (trec_eval order, see :mod:`harness.runs`). pyserini truncates after its
own tie-break (doc id ascending); we ask it for the full union and cut to ``out_k`` in trec_eval's
order, so the written ranks are the ones trec_eval evaluates.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import stage
from .artifact import Artifact, lineage
from .naming import prf_name, single_name, tag
from .runs import read_trec, top_k, with_ranks, write_trec
from .stage import Stage, register

METHODS = ("rrf", "interpolation", "average")
VERSION = 1  # of the fused-run builder (harness.env): bump when a change alters its run files


def to_trecrun(run: pd.DataFrame):
    from pyserini.trectools import TrecRun

    r = with_ranks(run)
    df = pd.DataFrame(
        {"topic": r["query_id"], "q0": "Q0", "docid": r["doc_id"], "rank": r["rank"], "score": r["score"], "tag": "run"}
    )
    return TrecRun.from_dataframes([df])


def fuse(
    runs: list[pd.DataFrame],
    method: str = "rrf",
    k: int = 60,
    weights: list[float] | None = None,
    depth: int | None = 100,
    out_k: int | None = 100,
) -> pd.DataFrame:
    """Fuse run tables; returns a run table with the top ``out_k`` per query."""
    from pyserini.trectools import AggregationMethod, RescoreMethod, TrecRun

    if len(runs) < 2:
        raise ValueError("fusion needs at least two runs (fusion.backends or fusion.runs).")
    if method not in METHODS:
        raise ValueError(f"fusion.method={method!r}: expected one of {METHODS}")
    if k < 0:
        raise ValueError(f"fusion.k={k}: expected a non-negative integer (the paper's grid: 10, 30, 60, 100).")
    weights = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(runs):
        raise ValueError(f"fusion.weights: {len(weights)} weights for {len(runs)} runs.")
    if method == "average":
        weights = [1.0 / len(runs)] * len(runs)
    parts = []
    for run, w in zip(runs, weights):
        t = to_trecrun(top_k(run, depth) if depth else run)  # min-max over the rows that are fused
        t = t.rescore(RescoreMethod.RRF, rrf_k=int(k)) if method == "rrf" else t.rescore(RescoreMethod.NORMALIZE)
        parts.append(t if w == 1.0 else t.rescore(RescoreMethod.SCALE, scale=w))
    fused = TrecRun.merge(parts, AggregationMethod.SUM, depth=depth, k=None).run_data
    out = pd.DataFrame(
        {
            "query_id": fused["topic"].astype(str),
            "doc_id": fused["docid"].astype(str),
            "score": fused["score"].astype(float),
        }
    )
    return top_k(out, out_k) if out_k else out


def params_of(f, out_k: int, weights: list[float]) -> dict:
    """The fused run's key: method, RRF constant, depth, and weights only where they are not all 1
    (so unweighted fusions keep the keys they always had; ``average`` has none). ``weights``: the
    checked weights of :func:`harness.config.fusion_weights`."""
    params = {"method": str(f.method), "depth": int(f.depth), "out_k": int(out_k)}
    if str(f.method) == "rrf":  # the RRF constant; normalised-score fusions have none
        params["k"] = int(f.k)
    if str(f.method) != "average" and any(w != 1.0 for w in weights):
        params["weights"] = list(weights)
    return params


def artifact(parts: list[Artifact], params: dict) -> Artifact:
    """The fused run of family runs (each an artifact other experiments share)."""
    return Artifact(stage.FUSED_RUN, params, tuple(parts), {"stage": VERSION})


def build(tmp: Path, art: Artifact, run_files: list[Path]) -> dict:
    """Fuse the runs in ``run_files`` (the parents' order) into ``run.trec``."""
    params = art.params
    name = tag(art)
    write_trec(
        fuse(
            [read_trec(f) for f in run_files],
            params["method"],
            params.get("k", 60),
            params.get("weights"),
            params["depth"],
            params["out_k"],
        ),
        tmp / "run.trec",
        name,
    )
    return {"tag": name}


def describe(art: Artifact) -> str:
    return "RRF fused run" if art.params["method"] == "rrf" else f"{art.params['method']} fused run"


def fused_tag(run: Artifact) -> str:
    """``rrf60-bm25+dense.TA-FULL.doc.<key>``: method and K, the fused runs (by backend and
    feedback; by query view where the views differ), then the first run's views."""
    rest, _ = single_name(run.parents[0])
    views = [lineage(p)[stage.UNIT_RUN]["query_view"] for p in run.parents]
    names = [single_name(p)[1] + prf_name(lineage(p)[stage.UNIT_RUN]) for p in run.parents]
    if len(set(views)) > 1:  # N-way over query views: name each run's view
        names = [f"{n}@{v}" for n, v in zip(names, views)]
        rest = rest.split("-", 1)[1]
    joined = "+".join(names) if len("+".join(names)) <= 64 else f"{len(names)}runs"
    w = "w" if "weights" in run.params else ""
    return f"{run.params['method']}{run.params.get('k', '')}{w}-{joined}.{rest}.{run.key[:8]}"


def fused_columns(params: dict | None) -> dict:
    p = params or {}
    return {
        "fusion": p.get("method"),
        "fusion_k": p.get("k"),
        "fusion_weights": "/".join(f"{w:g}" for w in p["weights"]) if "weights" in p else None,
    }


STAGE = register(
    Stage(
        stage.FUSED_RUN,
        "runs",
        "fused runs",
        VERSION,
        group="fusion",
        run=True,
        combines=True,
        tag=fused_tag,
        columns=fused_columns,
        in_fused_input="a fusion itself",
        cost="transform",
    )
)
