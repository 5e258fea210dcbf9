"""Learning to rank over the candidates of any runs: LightGBM's LambdaRank, cross-fitted over queries.

Fusion and re-ranking combine runs by fixed rules. A learned ranker can weigh what the runs say
(each run's score and rank, how many runs found a family, its passages) against what the data
says about the pair (shared IPC codes, IPC sections, length), and so *find* cross-domain prior art
that no rule promotes: a family far from the query's IPC3 codes but close in text.

Candidates are the union of each input run's top ``depth`` families (the final run and, for a
fusion, every fused run). Feature families (``ltr.features``; drop one for an ablation):

* ``run``: per input run, the score, the per-query min-max normalised score and the rank (a
  family a run did not retrieve: score missing, rank ``depth + 1``); for passage runs the number of
  retrieved passages and their mean score; the number of runs that retrieved the family; the
  query's length;
* ``ipc``: IPC3 codes shared with the query (count, Jaccard, disjoint flag), the same for IPC
  sections (the code's first character) and, where the data has full codes, IPC4 (the first four
  characters, a subclass in DAPFAM), and each side's number of IPC3 codes;
* ``doc``: the target family's length. Over queries that share one corpus, document features can
  learn which documents are often cited: a legitimate prior, but one a reader must see, hence its
  own family and the ablation rows of ``conf/sweep/beyond2.yaml``.

Labels: 0 for a candidate that is not a positive, 1 for an IN-domain positive, 2 for an OUT-domain
one, with LambdaRank gains ``[0, 1, out_weight]``: ``out_weight=1`` learns ALL relevance, larger
values trade IN for OUT, so a researcher can trace the front.

**Cross-fitting.** Queries are split into ``folds`` folds by :func:`harness.select.stratified_folds`
(stratified by OUT positives, same seed: the folds ``harness.select`` uses). A query's ranking
always comes from the model trained on the *other* folds, so every score this stage reports is
out-of-fold; ``tests/test_ltr.py`` shuffles a held fold's judgments and checks its ranking does not
move. (Selecting among LTR configurations with ``harness.select`` adds a second-order leak: the
configuration chosen for fold f is compared on other folds' scores, whose models saw fold f.
``select``'s held-out test is still on queries the choice did not see.) Queries with no positive
are never scored; they are ranked by fold 0's model. LightGBM runs on one thread with
``deterministic=True``, so the same inputs give the same bytes.

Artifacts: the features (keyed by the input runs, topics and corpus; every objective reuses them)
and the learned run (keyed by the features, the qrels and every LightGBM setting) with one model
file per fold and ``importance.csv`` (gain and split counts per feature, family and fold).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .runs import top_k, with_ranks

if TYPE_CHECKING:
    from .experiment import Experiment
    from .store import Artifact

log = logging.getLogger(__name__)

METHODS = ("lambdamart",)
FEATURES_VERSION = 1  # of the features builder (harness.env): bump when a change alters features.parquet
VERSION = 1  # of the learned-run builder


# ----------------------------------------------------------------------------- features (pure)
def candidates(runs: list[pd.DataFrame], depth: int) -> pd.DataFrame:
    """``(query_id, doc_id)`` of every family in some run's top ``depth``, sorted."""
    parts = [top_k(r, depth)[["query_id", "doc_id"]] for r in runs]
    return pd.concat(parts).drop_duplicates().sort_values(["query_id", "doc_id"]).reset_index(drop=True)


def run_features(
    cands: pd.DataFrame, runs: list[pd.DataFrame], depth: int, passages: dict | None = None
) -> pd.DataFrame:
    """The ``run`` family: per input run ``i``, ``r{i}_score``, ``r{i}_norm``, ``r{i}_rank``; with
    ``passages[i]`` (a unit run of passages ``family#n``), ``r{i}_npass`` and ``r{i}_avgp``; and
    ``n_runs``, the number of runs that retrieved the candidate."""
    from .aggregate import families

    out = pd.DataFrame(index=pd.MultiIndex.from_frame(cands[["query_id", "doc_id"]]))
    found = np.zeros(len(cands), dtype=np.int64)
    for i, run in enumerate(runs):
        r = with_ranks(top_k(run, depth))
        g = r.groupby("query_id")["score"]
        lo, hi = g.transform("min"), g.transform("max")
        r["norm"] = ((r["score"] - lo) / (hi - lo).where(hi > lo, 1.0)).where(hi > lo, 1.0)
        r = r.set_index(["query_id", "doc_id"]).reindex(out.index)
        out[f"r{i}_score"] = r["score"].to_numpy(float)
        out[f"r{i}_norm"] = r["norm"].to_numpy(float)
        out[f"r{i}_rank"] = r["rank"].fillna(depth + 1).to_numpy(float)
        found += r["rank"].notna().to_numpy()
        if passages and i in passages:
            p = passages[i].assign(family=families(passages[i]["doc_id"]))
            agg = p.groupby(["query_id", "family"])["score"].agg(["size", "mean"])
            agg.index = agg.index.set_names(["query_id", "doc_id"])
            agg = agg.reindex(out.index)
            out[f"r{i}_npass"] = agg["size"].fillna(0).to_numpy(float)
            out[f"r{i}_avgp"] = agg["mean"].to_numpy(float)
    out["n_runs"] = found.astype(float)
    return out.reset_index(drop=True)


def _sets(values) -> set:
    if values is None or (isinstance(values, float) and values != values):
        return set()
    if isinstance(values, str):
        values = values.split()
    return {str(v) for v in values if v is not None and str(v)}


IPC4 = re.compile(r"\b[A-H][0-9]{2}[A-Z]")  # an IPC subclass, as in "A61K 31/00" or "A61K31/00"


def ipc4(values) -> set:
    """IPC subclasses (four characters) of a full-codes value: IPC codes wherever they stand
    (``"A61K 31/00; G06F 16/00"``), else the first four characters of each space-, comma- or
    semicolon-separated code (other schemes, such as cacm-xdom's ``"4.22"``)."""
    if values is None or (isinstance(values, float) and values != values):
        return set()
    text = values if isinstance(values, str) else " ".join(str(v) for v in values if v is not None)
    found = set(IPC4.findall(text))
    return found or {c[:4] for c in re.split(r"[\s,;|]+", text) if c}


def _overlap(a: list[set], b: list[set], name: str) -> dict:
    shared = np.array([len(x & y) for x, y in zip(a, b)], float)
    union = np.array([len(x | y) for x, y in zip(a, b)], float)
    known = np.array([bool(x) and bool(y) for x, y in zip(a, b)])
    return {
        f"{name}_shared": np.where(known, shared, np.nan),
        f"{name}_jaccard": np.where(known, shared / np.maximum(union, 1), np.nan),
    }


def ipc_features(cands: pd.DataFrame, q3: dict, d3: dict, qfull: dict | None = None, dfull: dict | None = None):
    """The ``ipc`` family (module docstring). Codes: ``{id: list of IPC3 codes}``; full codes
    (``ipcr_codes_str``, a space-separated string or a list) give the IPC4 features, NaN without
    them. A side without codes gives NaN (unknown), never "disjoint"."""
    qs = [_sets(q3.get(q)) for q in cands["query_id"]]
    ds = [_sets(d3.get(d)) for d in cands["doc_id"]]
    out = _overlap(qs, ds, "ipc3")
    known = np.array([bool(x) and bool(y) for x, y in zip(qs, ds)])
    out["ipc3_disjoint"] = np.where(known, out["ipc3_shared"] == 0, np.nan).astype(float)
    out.update(_overlap([{c[0] for c in x} for x in qs], [{c[0] for c in x} for x in ds], "section"))
    if qfull is not None and dfull is not None:
        q4 = [ipc4(qfull.get(q)) for q in cands["query_id"]]
        d4 = [ipc4(dfull.get(d)) for d in cands["doc_id"]]
        out.update(_overlap(q4, d4, "ipc4"))
    else:
        out.update({"ipc4_shared": np.full(len(cands), np.nan), "ipc4_jaccard": np.full(len(cands), np.nan)})
    out["q_ipc3"] = np.array([len(x) for x in qs], float)
    out["d_ipc3"] = np.array([len(x) for x in ds], float)
    return pd.DataFrame(out)


def family_of(feature: str) -> str:
    """The feature family of a column of :func:`features`."""
    if feature.startswith(("ipc", "section", "q_ipc", "d_ipc")):
        return "ipc"
    if feature == "doc_len":
        return "doc"
    return "run"


def labels(cands: pd.DataFrame, positives: pd.DataFrame) -> np.ndarray:
    """0: not a positive; 1: an IN-domain positive; 2: an OUT-domain one (grade > 0 is positive)."""
    pos = positives[positives["relevance"].astype(float) > 0]
    dom = dict(zip(zip(pos["query_id"], pos["doc_id"]), pos["domain"]))
    return np.array([{None: 0, "OUT": 2}.get(dom.get(k), 1) for k in zip(cands["query_id"], cands["doc_id"])])


# ----------------------------------------------------------------------------- cross-fitting (pure)
def lgb_params(p: dict) -> dict:
    return {
        "objective": "lambdarank",
        "n_estimators": int(p["n_estimators"]),
        "learning_rate": float(p["learning_rate"]),
        "num_leaves": int(p["num_leaves"]),
        "min_child_samples": int(p["min_child_samples"]),
        "lambdarank_truncation_level": int(p["truncation"]),
        "label_gain": [0.0, 1.0, float(p["out_weight"])],
        "random_state": int(p["seed"]),
        "deterministic": True,
        "force_row_wise": True,
        "n_jobs": 1,
        "verbose": -1,
    }


def fit(x: pd.DataFrame, y: np.ndarray, qids: pd.Series, params: dict):
    """One LambdaRank model over the rows of ``x`` (grouped by ``qids``, in order)."""
    import lightgbm as lgb

    order = np.argsort(qids.to_numpy(), kind="stable")
    q = qids.to_numpy()[order]
    _, sizes = np.unique(q, return_counts=True)  # sorted ids: groups in order
    model = lgb.LGBMRanker(**lgb_params(params))
    model.fit(x.iloc[order], y[order], group=sizes)
    return model


def cross_fit(x: pd.DataFrame, y: np.ndarray, qids: pd.Series, fold: pd.Series, params: dict):
    """Out-of-fold scores: rows of a query in fold f are scored by the model trained on the rows of
    the other folds only. ``fold``: query -> fold (queries absent from it take fold 0's model).
    Returns (scores, {fold: model})."""
    f_of_row = qids.map(fold)
    scores = np.zeros(len(x))
    models = {}
    for f in sorted(fold.unique()):
        train = (f_of_row != f) & f_of_row.notna()
        held = (f_of_row == f) | (f_of_row.isna() & (f == min(fold.unique())))
        models[f] = fit(x[train.to_numpy()], y[train.to_numpy()], qids[train], params)
        if held.any():
            scores[held.to_numpy()] = models[f].predict(x[held.to_numpy()])
    return scores, models


def folds_of(positives: pd.DataFrame, k: int, seed: int) -> pd.Series:
    """``harness.select``'s folds over the queries with a positive (stratified by OUT positives)."""
    from .select import stratified_folds

    pos = positives[positives["relevance"].astype(float) > 0]
    qids = sorted(pos["query_id"].unique())
    has_out = set(pos.loc[pos["domain"] == "OUT", "query_id"])
    return stratified_folds(qids, {q: q in has_out for q in qids}, k, seed)


def learned_run(feats: pd.DataFrame, positives: pd.DataFrame, params: dict) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """The cross-fitted run over a features table (``query_id``, ``doc_id``, features), its models
    and the feature importances per fold."""
    cols = [c for c in feats.columns if c not in ("query_id", "doc_id") and family_of(c) in params["features"]]
    fold = folds_of(positives, params["folds"], params["seed"])
    y = labels(feats, positives)
    scores, models = cross_fit(feats[cols], y, feats["query_id"], fold, params)
    run = pd.DataFrame({"query_id": feats["query_id"], "doc_id": feats["doc_id"], "score": scores})
    imp = pd.concat(
        [
            pd.DataFrame(
                {
                    "fold": f,
                    "feature": cols,
                    "family": [family_of(c) for c in cols],
                    "gain": m.booster_.feature_importance("gain"),
                    "split": m.booster_.feature_importance("split"),
                }
            )
            for f, m in models.items()
        ],
        ignore_index=True,
    )
    return top_k(run, params["out_k"]), models, imp


# ----------------------------------------------------------------------------- stages
def _passages(exp: Experiment, run: Artifact) -> pd.DataFrame | None:
    """The unit run of passages behind a family run (None for documents or fused runs)."""
    from .runs import read_trec

    if run.kind != "family_run" or run.params.get("aggregation") == "identity":
        return None
    return read_trec(exp.store.path(run.parents[0]) / "run.trec")


def features_node(exp: Experiment, inputs: list[Artifact]) -> Artifact:
    """The features of the candidates of ``inputs`` (the final run first)."""
    from . import env
    from .data import schema as S
    from .data import views as V
    from .store import Artifact

    depth = int(exp.cfg.ltr.depth)
    art = Artifact(
        "ltr_features",
        {"depth": depth, "query_view": str(exp.cfg.query_fields), "target_view": str(exp.cfg.target_fields)},
        (*inputs, exp.topics_node, exp.corpus_node),
        {"stage": FEATURES_VERSION, "lightgbm": env.version("lightgbm")},
    )

    def build(tmp):
        from .runs import read_trec

        runs = [read_trec(exp.store.path(r) / "run.trec") for r in inputs]
        passages = {i: p for i, r in enumerate(inputs) if (p := _passages(exp, r)) is not None}
        cands = candidates(runs, depth)
        q = exp.ds.queries
        qfull = dict(zip(q[S.QUERY_ID], q[S.IPC_FULL])) if S.IPC_FULL in q.columns else None
        try:
            dfull = exp.ds.doc_ipc_codes if qfull is not None else None
        except Exception:  # noqa: BLE001  (a corpus without full codes: IPC4 features are NaN)
            dfull, qfull = None, None
        qtext = V.query_texts(q, art.params["query_view"])
        doc_len = {d: len(t.split()) for d, t in V.target_texts(exp.ds.corpus, art.params["target_view"])}
        table = pd.concat(
            [
                cands,
                run_features(cands, runs, depth, passages),
                ipc_features(cands, dict(zip(q[S.QUERY_ID], q[S.IPC3])), exp.ds.doc_ipc3, qfull, dfull),
            ],
            axis=1,
        )
        table["q_len"] = cands["query_id"].map(lambda x: len(qtext.get(x, "").split())).astype(float)
        table["doc_len"] = cands["doc_id"].map(doc_len).astype(float)
        table.to_parquet(tmp / "features.parquet", index=False)
        return {"candidates": len(cands), "features": [c for c in table.columns if c not in ("query_id", "doc_id")]}

    return exp.ensure(art, build, "LTR features")


def params_of(t, out_k: int) -> dict:
    return {
        "method": str(t.method),
        "features": sorted(str(f) for f in t.features),
        "out_weight": float(t.out_weight),
        "folds": int(t.folds),
        "seed": int(t.seed),
        "n_estimators": int(t.n_estimators),
        "learning_rate": float(t.learning_rate),
        "num_leaves": int(t.num_leaves),
        "min_child_samples": int(t.min_child_samples),
        "truncation": int(t.truncation),
        "out_k": int(out_k),
    }


def node(exp: Experiment, inputs: list[Artifact]) -> Artifact:
    """The learned run stage over the final run and its inputs (cross-fitted; module docstring)."""
    from . import env
    from .store import Artifact

    feats = features_node(exp, inputs)
    params = params_of(exp.cfg.ltr, exp.cfg.search.k)
    art = Artifact("ltr_run", params, (feats, exp.qrels_node), {"stage": VERSION, "lightgbm": env.version("lightgbm")})

    def build(tmp):
        from .runs import write_trec

        table = pd.read_parquet(exp.store.path(feats) / "features.parquet")
        run, models, imp = learned_run(table, exp.ds.positives, params)
        (tmp / "models").mkdir()
        for f, m in models.items():
            m.booster_.save_model(str(tmp / "models" / f"fold{f}.txt"))
        imp.to_csv(tmp / "importance.csv", index=False)
        tag = exp.tag(art)
        write_trec(run, tmp / "run.trec", tag)
        by_family = imp.groupby("family")["gain"].sum()
        return {"tag": tag, "gain_share": (by_family / by_family.sum()).round(4).to_dict()}

    return exp.ensure(art, build, "learned run (LambdaRank, cross-fitted)")
