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

from typing import TYPE_CHECKING

import pandas as pd

from .data.schema import PASSAGE_SEP
from .runs import sort_run, top_k

if TYPE_CHECKING:
    from .experiment import Experiment
    from .store import Artifact

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


def node(exp: Experiment, unit_run: Artifact) -> Artifact:
    """The family run stage: aggregate a unit run (identity for documents), drop self-hits, cut to k."""
    import logging

    from .store import Artifact

    log = logging.getLogger(__name__)
    method = "identity" if str(exp.cfg.granularity) == "document" else str(exp.cfg.aggregation)
    k = int(exp.cfg.search.k)
    params = {"aggregation": method, "k": k}
    if exp.ds.self_ids:  # only datasets whose queries are also documents carry the flag
        params["drop_self_hits"] = True
    art = Artifact("family_run", params, (unit_run,), {"stage": VERSION})

    def build(tmp):
        from .runs import drop_self_hits, read_trec, write_trec

        run = aggregate(read_trec(exp.store.path(unit_run) / "run.trec"), method)
        dropped = 0
        if exp.ds.self_ids:
            run, dropped = drop_self_hits(run, exp.ds.self_ids)
            log.info("dropped %d self-hit(s): queries whose own id is retrieved (dataset.drop_self_hits)", dropped)
        run = top_k(run, k)
        short = run.groupby("query_id").size()
        if (short < k).any() and method != "identity":
            log.warning(
                "%d queries have fewer than %d families after aggregation: raise search.depth (now %d)",
                int((short < k).sum()),
                k,
                exp.cfg.search.depth,
            )
        tag = exp.tag(art)
        write_trec(run, tmp / "run.trec", tag)
        return {"tag": tag, "self_hits_dropped": dropped}

    return exp.ensure(art, build, f"{method} family run")
