"""Passage run -> family run: the scores of a family's retrieved passages become one score.

* ``maxp``: the best passage (Dai & Callan's MaxP);
* ``avgp``: mean of the family's *retrieved* passages;
* ``sump``: sum of them (rewards families with many matching passages);
* ``avg_top3``: mean of the family's top 3 retrieved passage scores (fewer if it has fewer).

Only retrieved passages count: a family's unretrieved passages have no score. The search depth
(``search.depth``) must therefore be large enough that ``k`` distinct families survive; the
harness warns when a query ends up with fewer. Documents are units of one passage: ``identity``.
Vectorised with pandas group-bys; the result is sorted as trec_eval ranks (see :mod:`harness.runs`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from . import stage
from .artifact import Artifact
from .data.schema import PASSAGE_SEP
from .naming import family_tag, tag
from .runs import drop_self_hits, read_trec, sort_run, top_k, write_trec
from .stage import Stage, register

log = logging.getLogger(__name__)

AGGREGATIONS = ("maxp", "avgp", "sump", "avg_top3")  # what `aggregation=` may choose
METHODS = AGGREGATIONS + ("identity",)
VERSION = 1  # of the family-run builder (harness.env): bump when a change alters its run files


def families(unit_ids: pd.Series) -> pd.Series:
    """``D1#3`` -> ``D1``; ids without the separator are their own family."""
    return unit_ids.str.rsplit(PASSAGE_SEP, n=1).str[0]


def aggregate(run: pd.DataFrame, method: str, k: int | None = None) -> pd.DataFrame:
    """Aggregate a unit run table to families, keep the top ``k`` per query (all when None)."""
    if method not in METHODS:
        raise ValueError(f"aggregation={method!r}: expected one of {AGGREGATIONS}")
    if method == "identity":
        out = run[["query_id", "doc_id", "score"]]
    else:
        df = run.assign(family=families(run["doc_id"]))
        g = ["query_id", "family"]
        if method == "maxp":
            out = df.groupby(g, sort=False)["score"].max()
        elif method == "avgp":
            out = df.groupby(g, sort=False)["score"].mean()
        elif method == "sump":
            out = df.groupby(g, sort=False)["score"].sum()
        else:  # avg_top3
            top = df.sort_values(["query_id", "family", "score"], ascending=[True, True, False], kind="mergesort")
            out = top.groupby(g, sort=False).head(3).groupby(g, sort=False)["score"].mean()
        out = out.reset_index().rename(columns={"family": "doc_id"})
    return top_k(out, k) if k else sort_run(out)


def artifact(unit_run: Artifact, method: str, k: int, drop_self: bool) -> Artifact:
    """The family run of a unit run: its aggregation (identity for documents) and cut-off ``k``;
    ``drop_self`` only for datasets whose queries are also documents (keys without it unchanged)."""
    params: dict = {"aggregation": method, "k": k}
    if drop_self:
        params["drop_self_hits"] = True
    return Artifact(stage.FAMILY_RUN, params, (unit_run,), {"stage": VERSION})


def build(tmp: Path, art: Artifact, unit_run_file: Path, self_ids: set, depth: int) -> dict:
    """Aggregate the unit run in ``unit_run_file``, drop self-hits, cut to k, write ``run.trec``."""
    method, k = art.params["aggregation"], art.params["k"]
    run = aggregate(read_trec(unit_run_file), method)
    dropped = 0
    if art.params.get("drop_self_hits"):
        run, dropped = drop_self_hits(run, self_ids)
        log.info("dropped %d self-hit(s): queries whose own id is retrieved (dataset.drop_self_hits)", dropped)
    run = top_k(run, k)
    short = run.groupby("query_id").size()
    if (short < k).any() and method != "identity":
        log.warning(
            "%d queries have fewer than %d families after aggregation: raise search.depth (now %d)",
            int((short < k).sum()),
            k,
            depth,
        )
    name = tag(art)
    write_trec(run, tmp / "run.trec", name)
    return {"tag": name, "self_hits_dropped": dropped}


STAGE = register(
    Stage(
        stage.FAMILY_RUN,
        "runs",
        "family runs (aggregations)",
        VERSION,
        run=True,
        tag=family_tag,
        cost="aggregation",
    )
)
