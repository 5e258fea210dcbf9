"""Names read off artifacts: a run's TREC tag and its results-table columns.

Both come from the parameters of the run's artifacts (its lineage), never from the config that
asked for it, so two configurations that make the same run get the same name, and a tag always
ends in the run artifact's key: two different runs never share one. Each run stage says how it
names itself (:class:`harness.stage.Stage`'s ``tag`` and ``columns``); this module holds what
they share: the name of a single run and the columns read off its units, search and family run.
"""

from __future__ import annotations

from . import stage
from .artifact import Artifact, lineage

__all__ = ["lineage", "tag", "columns", "family_tag", "single_name", "prf_name", "prf_label", "system"]

# The results table's config columns, in order (a stage's own columns not listed here come last).
ORDER = (
    "query_fields",
    "target_fields",
    "granularity",
    "passage_length",
    "passage_stride",
    "aggregation",
    "backend",
    "fusion",
    "fusion_k",
    "bm25_k1",
    "bm25_b",
    "encoder",
    "query_views",
    "prf",
    "fusion_weights",
    "query_reduction",
    "search_k",
)


def single_name(run: Artifact) -> tuple[str, str]:
    """``(TA-FULL.p128.maxp, bm25)``: a family run's views, granularity and aggregation, and its backend."""
    p = lineage(run)
    u, r, f = p[stage.UNITS], p[stage.UNIT_RUN], p[stage.FAMILY_RUN]
    gran = "doc" if u["granularity"] == "document" else f"p{u['length']}"
    if u["granularity"] == "passage" and u["stride"] != u["length"]:
        gran += f"s{u['stride']}"
    agg = "" if f["aggregation"] == "identity" else f".{f['aggregation']}"
    return f"{r['query_view']}-{u['view']}.{gran}{agg}", r["backend"]


def prf_name(unit_run: dict) -> str:
    p, q = unit_run.get("prf"), unit_run.get("query_reduction")
    return (f"-{p['method'][:3]}" if p else "") + (f"-{q['method']}{q['n_terms']}" if q else "")


def prf_label(unit_run: dict) -> str | None:
    """``bm25:rm3(20t,5d,0.7)``: a run's feedback and the settings that tell grid rows apart."""
    p = unit_run.get("prf")
    if not p:
        return None
    keys = {
        "rm3": ("fb_terms", "fb_docs", "original_query_weight"),
        "rocchio": ("fb_terms", "fb_docs", "alpha", "beta"),
    }
    if unit_run["backend"] == "dense":
        keys = {"rocchio": ("k", "alpha", "beta"), "average": ("k",)}
    return f"{unit_run['backend']}:{p['method']}(" + ",".join(f"{p[k]:g}" for k in keys[p["method"]]) + ")"


def family_tag(run: Artifact) -> str:
    """The tag of a single (family) run: backend, PRF, views, granularity, aggregation, key."""
    rest, name = single_name(run)
    return f"{name}{prf_name(lineage(run)[stage.UNIT_RUN])}.{rest}.{run.key[:8]}"


def tag(run: Artifact) -> str:
    """A readable TREC run tag (backend, PRF, views, granularity, aggregation, fusion, re-ranking)
    and the run's key, as the run's stage names itself."""
    s = stage.get(run.kind)
    if s.tag is None:
        raise ValueError(f"a {run.kind} artifact is not a run: it has no tag")
    return s.tag(run)


def inner_stem(run: Artifact) -> str:
    """The tag of the run a transform improves on, without its key (a transform appends its own)."""
    return tag(run).rsplit(".", 1)[0]


def columns(run: Artifact) -> dict:
    """The results table's config columns, read off the run's artifacts: the transforms' own
    (learning to rank, re-ranking; empty where a stage is not in the chain), then those of the
    single or fused run underneath."""
    own: dict = {}
    for s in stage.stages():
        if s.inner is not None and s.columns is not None:
            own.update(s.columns(None))
    *transforms, run = stage.chain(run)
    for node in transforms:
        if (declared := stage.get(node.kind).columns) is not None:
            own.update(declared(node.params))
    s = stage.get(run.kind)
    inputs = list(run.parents) if s.combines else [run]
    for t in stage.stages():  # a combining stage's columns (empty where the run combines nothing)
        if t.combines and t.columns is not None:
            own = {**t.columns(run.params if t is s else None), **own}
    p = lineage(inputs[0])
    u, r, f = p[stage.UNITS], p[stage.UNIT_RUN], p[stage.FAMILY_RUN]
    runs = [lineage(x)[stage.UNIT_RUN] for x in inputs]
    bm25 = next((x for x in runs if x["backend"] == "bm25"), {})
    # every encoder of the inputs, in order, once each: an encoder ensemble names them all
    encoders = dict.fromkeys(e["model"] for x in inputs if (e := lineage(x).get(stage.EMBEDDINGS)) is not None)
    passage = u["granularity"] == "passage"
    out = {
        "query_fields": r["query_view"],
        "target_fields": u["view"],
        "granularity": u["granularity"],
        "passage_length": u["length"] if passage else None,
        "passage_stride": u["stride"] if passage else None,
        "aggregation": f["aggregation"] if passage else None,
        "backend": "+".join(x["backend"] for x in runs),
        "bm25_k1": bm25.get("k1"),
        "bm25_b": bm25.get("b"),
        "encoder": "+".join(encoders) or None,
        "query_views": "+".join(x["query_view"] for x in runs),
        "prf": "+".join(dict.fromkeys(str(prf_label(x)) for x in runs if x.get("prf"))) or None,
        "query_reduction": "+".join(
            dict.fromkeys(f"{q['method']}({q['n_terms']})" for x in runs if (q := x.get("query_reduction")) is not None)
        )
        or None,
        "search_k": f["k"],  # families per (input) run: deeper than 100 gives re-ranking and LTR more candidates
        **own,
    }
    order = {k: i for i, k in enumerate(ORDER)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(ORDER))))


def system(row) -> str:
    """A results row's kind of system (plots, the page): its backend or fusion, then what each
    lever and each transform stage in its chain adds."""
    name = "fusion" if isinstance(row.fusion, str) and row.fusion else row.backend
    for column, what in (("prf", " + PRF"), ("query_reduction", " + QR")):
        if isinstance(getattr(row, column, None), str) and getattr(row, column):
            name += what
    for s in stage.stages():
        if s.inner is not None and s.system and s.columns is not None:
            first = next(iter(s.columns(None)))  # a transform's first column says whether a row has it
            if isinstance(getattr(row, first, None), str) and getattr(row, first):
                name += s.system
    return name
