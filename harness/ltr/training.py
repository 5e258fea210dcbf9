"""LTR training: LightGBM's LambdaRank fitted cross-fitted over query folds, nested out-of-fold scores, and a model applied to another dataset's candidates."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..folds import from_judgments, query_folds
from ..runs import top_k
from .features import PairStats, family_of, feature_columns, full_table, labels

log = logging.getLogger(__name__)


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
    import lightgbm as lgb  # heavy: only where a model is fitted

    x = _some_column(x)
    order = np.argsort(qids.to_numpy(), kind="stable")
    q = qids.to_numpy()[order]
    _, sizes = np.unique(q, return_counts=True)  # sorted ids: groups in order
    model = lgb.LGBMRanker(**lgb_params(params))
    model.fit(x.iloc[order], y[order], group=sizes)
    if not model.booster_.feature_importance("split").sum():
        # Every score would be the same, and the run's order that of the document ids: refuse
        # rather than report it as a learned ranking.
        varying = [c for c in x.columns if x[c].nunique(dropna=False) > 1]
        raise ConfigError(
            f"ltr: no tree made a split on {len(x)} candidate rows of {len(sizes)} queries "
            f"(ltr.num_leaves={params.get('num_leaves')}, ltr.min_child_samples={params.get('min_child_samples')}, "
            f"{len(varying)} of {x.shape[1]} feature columns vary): every score would be equal. Fix: lower "
            f"ltr.min_child_samples, or choose ltr.features that vary on this dataset."
        )
    return model


def _some_column(x: pd.DataFrame) -> pd.DataFrame:
    """``x``, or one constant column where no feature is left (an ablation of everything)."""
    return x if x.shape[1] else pd.DataFrame({"none": np.zeros(len(x))}, index=x.index)


def _predict(model, x: pd.DataFrame) -> np.ndarray:
    return model.predict(_some_column(x))


def _fold_of_rows(qids: pd.Series, fold: pd.Series) -> np.ndarray:
    return qids.map(fold).to_numpy(float)  # NaN: a query without positives


def with_learned(x: pd.DataFrame, extra, f_of_row: np.ndarray, excluded: set) -> pd.DataFrame:
    """``x`` and the columns ``extra`` learns from labels (``ipcpair``): each row's from the
    labelled rows outside the ``excluded`` folds and outside the row's own fold, so no row's value
    was counted from its own fold, and none from a held fold."""
    if extra is None:
        return x
    labelled = ~np.isnan(f_of_row)
    cols = None
    for h in [*np.unique(f_of_row[labelled]), np.nan]:
        mine = np.isnan(f_of_row) if np.isnan(h) else f_of_row == h
        if not mine.any():
            continue
        learn = labelled & ~np.isin(f_of_row, list(excluded | ({h} if not np.isnan(h) else set())))
        part = extra(learn)
        if cols is None:
            cols = pd.DataFrame(np.nan, index=range(len(x)), columns=part.columns)
        cols.loc[mine, :] = part.loc[mine].to_numpy()
    out = x.reset_index(drop=True).copy()
    if cols is not None:
        for c in cols.columns:
            out[c] = cols[c].to_numpy(float)
    return out


def cross_fit(x: pd.DataFrame, y: np.ndarray, qids: pd.Series, fold: pd.Series, params: dict, extra=None):
    """Out-of-fold scores: rows of a query in fold f are scored by the model trained on the rows of
    the other folds only. ``fold``: query -> fold (queries absent from it take fold 0's model);
    ``extra``: learned columns (:func:`with_learned`). Returns (scores, {fold: model})."""
    f_of_row = _fold_of_rows(qids, fold)
    labelled = ~np.isnan(f_of_row)
    folds = sorted(fold.unique())
    scores = np.zeros(len(x))
    models = {}
    for f in folds:
        xf = with_learned(x, extra, f_of_row, {f})
        train = labelled & (f_of_row != f)
        held = (f_of_row == f) | (~labelled & (f == folds[0]))
        models[f] = fit(xf[train], y[train], qids[train], params)
        if held.any():
            scores[held] = _predict(models[f], xf[held])
    return scores, models


def nested_fit(x: pd.DataFrame, y: np.ndarray, qids: pd.Series, fold: pd.Series, params: dict, extra=None) -> dict:
    """For each outer fold f: scores of the rows of every other fold g from the model trained on the
    folds other than f and g (NaN elsewhere). What ``select`` chooses fold f's configuration on:
    neither that choice nor f's own model then saw f's labels.

    The model that leaves out f and g is the one that leaves out g and f (the same rows, columns
    and seed): one fit per pair of folds scores g's rows for outer fold f and f's rows for g, half
    the fits of one per ordered pair, with the same scores."""
    f_of_row = _fold_of_rows(qids, fold)
    labelled = ~np.isnan(f_of_row)
    folds = sorted(fold.unique())
    out = {f: np.full(len(x), np.nan) for f in folds}
    for i, f in enumerate(folds):
        for g in folds[i + 1 :]:
            xfg = with_learned(x, extra, f_of_row, {f, g})
            train = labelled & (f_of_row != f) & (f_of_row != g)
            if not train.any():
                continue
            model = None
            for outer, scored in ((f, g), (g, f)):
                rows = f_of_row == scored
                if rows.any():
                    if model is None:
                        model = fit(xfg[train], y[train], qids[train], params)
                    out[outer][rows] = _predict(model, xfg[rows])
    return out


def folds_of(positives: pd.DataFrame, k: int, seed: int) -> pd.Series:
    """The folds over the queries with a positive, stratified by OUT positives (:mod:`harness.folds`:
    the same as ``harness.select``'s)."""
    qids, with_out = from_judgments(positives)
    if k > len(qids):
        raise ConfigError(
            f"ltr.folds={k}: only {len(qids)} queries have a positive judgment, and every fold needs one. "
            f"Fix: ltr.folds <= {len(qids)}."
        )
    return query_folds(qids, with_out, k, seed)


def _importance(models: dict, cols: list[str]) -> pd.DataFrame:
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "fold": f,
                    "feature": cols,
                    "family": [family_of(c) for c in cols],
                    "gain": m.booster_.feature_importance("gain") if cols else [],
                    "split": m.booster_.feature_importance("split") if cols else [],
                }
            )
            for f, m in models.items()
        ],
        ignore_index=True,
    )


def learned_columns(table: pd.DataFrame, queries, docs, y: np.ndarray, families):
    """The callable of the families learned from labels (``ipcpair``), or None."""
    if "ipcpair" not in families or queries is None or docs is None:
        return None
    return PairStats(table, queries, docs, y)


def learned_run(
    feats: pd.DataFrame,
    positives: pd.DataFrame,
    params: dict,
    queries: pd.DataFrame | None = None,
    docs: pd.DataFrame | None = None,
    prior: dict | None = None,
    nested: bool = False,
):
    """The cross-fitted run over a features table (``query_id``, ``doc_id``, features; with side
    tables, the document families are computed from them), its models, the feature importances per
    fold and, with ``nested``, the nested run (``outer_fold``, ``query_id``, ``doc_id``, ``score``)."""
    table = full_table(feats, queries, docs, params["features"], prior)
    cols = feature_columns(table, params["features"])
    fold = folds_of(positives, params["folds"], params["seed"])
    y = labels(table, positives)
    extra = learned_columns(table, queries, docs, y, params["features"])
    scores, models = cross_fit(table[cols], y, table["query_id"], fold, params, extra)
    cols = cols + (extra.names if extra is not None else [])
    run = pd.DataFrame({"query_id": table["query_id"], "doc_id": table["doc_id"], "score": scores})
    inner = None
    if nested:
        parts = []
        base = [c for c in cols if family_of(c) != "ipcpair"]
        for f, s in nested_fit(table[base], y, table["query_id"], fold, params, extra).items():
            keep = ~np.isnan(s)
            r = top_k(
                pd.DataFrame({"query_id": table["query_id"][keep], "doc_id": table["doc_id"][keep], "score": s[keep]}),
                params["out_k"],
            )
            parts.append(r.assign(outer_fold=int(f)))
        inner = pd.concat(parts, ignore_index=True)[["outer_fold", "query_id", "doc_id", "score"]]
    return top_k(run, params["out_k"]), models, _importance(models, cols), inner


def apply_model(booster, table: pd.DataFrame, k: int) -> pd.DataFrame:
    """Rank ``table``'s candidates with a model trained elsewhere (``ltr.train``): the columns are
    the model's own feature names, in its order."""
    names = booster.feature_name()
    missing = [c for c in names if c not in table.columns]
    if missing:
        raise ValueError(
            f"the model trained on another dataset uses features {missing[:5]} that these candidates lack: "
            f"the two experiments differ in their input runs. Fix: the same experiment on both datasets."
        )
    scores = booster.predict(table[names])
    return top_k(pd.DataFrame({"query_id": table["query_id"], "doc_id": table["doc_id"], "score": scores}), k)
