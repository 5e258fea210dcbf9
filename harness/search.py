"""The unit run stage: a backend's search of its index with the queries of one view.

The backend (:mod:`harness.backends`) says how to index a unit set and how to search it; this
stage asks the store for the units and the index through it, searches, and writes the unit run
(a TREC run over units: passages ``family#n`` or whole documents). A search that finds the index
damaged (Lucene's CorruptIndexException, a Faiss read error) discards the index and rebuilds it
once.
"""

from __future__ import annotations

import logging

from . import passages, stage
from .artifact import Artifact
from .backends import get as backend
from .data import views as V
from .runs import write_trec
from .stage import Context, Stage, register
from .store import DamagedArtifact, MissingFiles

log = logging.getLogger(__name__)

DAMAGE = (
    "CorruptIndexException",
    "IndexFormatTooOld",
    "IndexFormatTooNew",
    "EOFException",
    "NoSuchFileException",
    "FileNotFoundException",
    "Error in faiss::",
    "read error",
)


def is_damaged(error: Exception) -> bool:
    """Whether a search error means the index files are damaged (Lucene or Faiss), not the query."""
    if isinstance(error, MissingFiles):
        return True
    text = f"{type(error).__name__} {error}"
    return any(k in text for k in DAMAGE)


def units(ctx: Context, be) -> Artifact:
    """The units of a backend: built now, or (``streams_units``) by the backend while it indexes."""
    return passages.node(ctx, be, build=not getattr(be, "streams_units", False))


def node(ctx: Context, name: str) -> Artifact:
    """The unit run of backend ``name`` under ``ctx``'s config: its index (built or reused) searched
    with the query view, ``search.depth`` deep."""
    be = backend(name)
    index = be.index(ctx, units(ctx, be))
    params = {
        "query_view": str(ctx.cfg.query_fields),
        "depth": int(ctx.cfg.search.depth),
        "backend": name,
        **be.run_params(ctx),
    }
    art = Artifact(stage.UNIT_RUN, params, (index, ctx.topics_node), be.search_env(ctx))

    def build(tmp):
        topics = V.query_texts(ctx.ds.queries, params["query_view"])
        try:
            run, seconds, empty = be.search(ctx, index, topics, params)
        except Exception as e:  # noqa: BLE001  (pyjnius raises JavaException for Lucene's errors)
            if is_damaged(e):
                raise DamagedArtifact(index, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
            raise
        if empty:
            log.warning(
                "%d queries have an empty %s text and retrieve nothing (score 0), e.g. %s",
                len(empty),
                params["query_view"],
                empty[:3],
            )
        write_trec(run, tmp / "run.trec", f"units-{art.key}")
        return {
            "search_seconds": round(seconds, 3),
            "queries": len(topics),
            "empty_queries": empty,
            "seconds_per_query": round(seconds / max(1, len(topics) - len(empty)), 5),
        }

    try:
        return ctx.ensure(art, build, f"{name} search")
    except DamagedArtifact as e:  # e.g. Lucene's CorruptIndexException: rebuild the index once
        ctx.store.discard(e.artifact, str(e))
        ctx.nodes.remove(e.artifact)
        be.index(ctx, units(ctx, be))
        return ctx.ensure(art, build, f"{name} search")


STAGE = register(
    Stage(
        stage.UNIT_RUN,
        "runs",
        "searches",
        cost="search",
        timings={"search_seconds": ("search_seconds",), "seconds_per_query": ("seconds_per_query",)},
    )
)
