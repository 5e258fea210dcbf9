"""Names read off artifacts: a run's TREC tag and its results-table columns.

Both come from the parameters of the run's artifacts (its lineage), never from the config that
asked for it, so two configurations that make the same run get the same name, and a tag always
ends in the run artifact's key: two different runs never share one.
"""

from __future__ import annotations

from .store import Artifact


def lineage(art: Artifact) -> dict[str, dict]:
    """``{kind: params}`` along the first parents of a run, from the run down to the units."""
    out: dict[str, dict] = {}
    node: Artifact | None = art
    while node is not None:
        out.setdefault(node.kind, node.params)
        node = node.parents[0] if node.parents else None
    return out


def _single(run: Artifact) -> tuple[str, str]:
    p = lineage(run)
    u, r, f = p["units"], p["unit_run"], p["family_run"]
    gran = "doc" if u["granularity"] == "document" else f"p{u['length']}"
    if u["granularity"] == "passage" and u["stride"] != u["length"]:
        gran += f"s{u['stride']}"
    agg = "" if f["aggregation"] == "identity" else f".{f['aggregation']}"
    return f"{r['query_view']}-{u['view']}.{gran}{agg}", r["backend"]


def _prf_name(unit_run: dict) -> str:
    p, q = unit_run.get("prf"), unit_run.get("query_reduction")
    return (f"-{p['method'][:3]}" if p else "") + (f"-{q['method']}{q['n_terms']}" if q else "")


def ltr_label(params: dict) -> str:
    """``lambdamart(doc+ipc+run,ow=2)``: a learned run's feature families and OUT gain, and where
    named, the identifying families allowed and the dataset it was trained on."""
    extra = "".join(
        f",{k}={v}"
        for k, v in (
            ("allow", "+".join(params.get("allow_identifying", []))),
            ("train", params.get("train")),
        )
        if v
    )
    return f"{params['method']}({'+'.join(params['features'])},ow={params['out_weight']:g}{extra})"


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


def tag(run: Artifact) -> str:
    """A readable TREC run tag (backend, PRF, views, granularity, aggregation, fusion, re-ranking)
    and the run's key."""
    if run.kind == "reranked_run":
        inner = tag(run.parents[0]).rsplit(".", 1)[0]
        return f"{inner}.{run.params['method']}{run.params['weight']:g}.{run.key[:8]}"
    if run.kind == "ltr_run":  # parents: (features, qrels); the features' first parent is the final run
        inner = tag(run.parents[0].parents[0]).rsplit(".", 1)[0]
        from .ltr import SHORT

        p = run.params
        fam = "".join(SHORT.get(f, f[0]) for f in p["features"])
        allow = (
            "-id" + "".join(SHORT.get(f, f[0]) for f in p["allow_identifying"]) if p.get("allow_identifying") else ""
        )
        train = f"-tr{p['train']}" if p.get("train") else ""
        return f"{inner}.ltr-{fam}-ow{p['out_weight']:g}{allow}{train}.{run.key[:8]}"
    if run.kind == "fused_run":
        rest, _ = _single(run.parents[0])
        views = [lineage(p)["unit_run"]["query_view"] for p in run.parents]
        names = [_single(p)[1] + _prf_name(lineage(p)["unit_run"]) for p in run.parents]
        if len(set(views)) > 1:  # N-way over query views: name each run's view
            names = [f"{n}@{v}" for n, v in zip(names, views)]
            rest = rest.split("-", 1)[1]
        joined = "+".join(names) if len("+".join(names)) <= 64 else f"{len(names)}runs"
        w = "w" if "weights" in run.params else ""
        return f"{run.params['method']}{run.params.get('k', '')}{w}-{joined}.{rest}.{run.key[:8]}"
    rest, name = _single(run)
    return f"{name}{_prf_name(lineage(run)['unit_run'])}.{rest}.{run.key[:8]}"


def columns(run: Artifact) -> dict:
    """The results table's config columns, read off the run's artifacts."""
    reranked = run.params if run.kind == "reranked_run" else None
    if reranked:
        run = run.parents[0]
    learned = run.params if run.kind == "ltr_run" else None
    if learned:
        run = run.parents[0].parents[0]
    fused = run.kind == "fused_run"
    first = run.parents[0] if fused else run
    p = lineage(first)
    u, r, f = p["units"], p["unit_run"], p["family_run"]
    runs = [lineage(x)["unit_run"] for x in (run.parents if fused else [run])]
    bm25 = next((x for x in runs if x["backend"] == "bm25"), {})
    emb = next(
        (lineage(x).get("embeddings") for x in (run.parents if fused else [run]) if "embeddings" in lineage(x)), None
    )
    passage = u["granularity"] == "passage"
    return {
        "query_fields": r["query_view"],
        "target_fields": u["view"],
        "granularity": u["granularity"],
        "passage_length": u["length"] if passage else None,
        "passage_stride": u["stride"] if passage else None,
        "aggregation": f["aggregation"] if passage else None,
        "backend": "+".join(x["backend"] for x in runs),
        "fusion": run.params["method"] if fused else None,
        "fusion_k": run.params.get("k") if fused else None,
        "bm25_k1": bm25.get("k1"),
        "bm25_b": bm25.get("b"),
        "encoder": emb["model"] if emb else None,
        "query_views": "+".join(x["query_view"] for x in runs) if fused else r["query_view"],
        "prf": "+".join(dict.fromkeys(str(prf_label(x)) for x in runs if x.get("prf"))) or None,
        "fusion_weights": "/".join(f"{w:g}" for w in run.params["weights"])
        if fused and "weights" in run.params
        else None,
        "query_reduction": "+".join(
            dict.fromkeys(f"{q['method']}({q['n_terms']})" for x in runs if (q := x.get("query_reduction")) is not None)
        )
        or None,
        "search_k": f["k"],  # families per (input) run: deeper than 100 gives re-ranking and LTR more candidates
        "ltr": ltr_label(learned) if learned else None,
        "rerank": reranked["method"] if reranked else None,
        "rerank_weight": reranked["weight"] if reranked else None,
    }
