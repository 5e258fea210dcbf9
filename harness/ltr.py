"""Learning to rank over the candidates of any runs: LightGBM's LambdaRank, cross-fitted over queries.

Fusion and re-ranking combine runs by fixed rules. A learned ranker can weigh what the runs say
(each run's score and rank, how many runs found a family, its passages) against what the data
says about the pair (shared IPC codes, IPC sections, length), and so *find* cross-domain prior art
that no rule promotes: a family far from the query's IPC3 codes but close in text.

Candidates are the union of each input run's top ``depth`` families (the final run and, for a
fusion, every fused run). Feature families (``ltr.features``; drop one for an ablation):

* ``run`` (about the pair): per input run, the score, the per-query min-max normalised score and
  the rank (a family a run did not retrieve: score missing, rank ``depth + 1``); for passage runs
  the number of retrieved passages and their mean score; the number of runs that retrieved the
  family; the query's length;
* ``domain`` (about the pair, the least a domain-aware ranker needs): whether query and candidate
  share no IPC3 code (the OUT relation itself) and no IPC section;
* ``ipc`` (about the pair): IPC3 codes shared with the query (count, Jaccard, disjoint flag), the
  same for IPC sections (the code's first character) and, where the data has full codes, IPC4 (the
  first four characters, a subclass in DAPFAM), and each side's number of IPC3 codes;
* ``ipcpair`` (about classes, learned): how often candidates of the query's IPC3 class x the
  candidate's IPC3 class (and IPC section x section) are positives, and OUT positives, in the
  training folds' judgments (smoothed rates; the best and the mean over the pair's codes).
  Learned across queries, but about class pairs ("which fields cite which"), never documents;
  computed inside cross-fitting, each row from folds other than its own and the held one;
* ``doc`` (the candidate's content, coarsely): its length in log2 buckets (1-2, 3-4, 5-8 ... words);
* ``doclen``: the exact length. **Identifying**: refused unless ``ltr.allow_identifying`` names it;
* ``prior`` (``ltr.prior=FILE``): how often the candidate is cited in judgments that are *not*
  scored (another dataset's or split's qrels), a citation prior done in the open.

**What the ranker may learn.** It learns from the judgments of the queries it is scored on (other
folds'). About query-candidate pairs, that is learning; about documents, it is the answer key:
on a fixed corpus, any value precise enough to tell documents apart (a length, a year, a count)
lets the model learn which documents *other* queries' judgments cite and rank those first (on
CACM, 94% of positive pairs have a target another query also cites). :func:`identity_check`
tests every family whose values belong to the candidate document: each document gets another
document's values (a random permutation over the corpus), the model is retrained, and a family
whose permuted copy beats a copy redrawn for every query-candidate row (which names no
document; the model without the family is reported too) on held-out queries (one-sided sign-flip
test over queries, nDCG@100 on ALL and OUT, Holm-corrected over every family and subset at
0.05) is *identifying*: the learned run is refused unless ``ltr.allow_identifying``
names the family, and then its tag and the results row say so. The check runs when a learned run
is built; ``python -m harness.ltr identity SCORES_KEY`` prints it.

Labels: 0 for a candidate that is not a positive, 1 for an IN-domain positive, 2 for an OUT-domain
one, with LambdaRank gains ``[0, 1, out_weight]``: ``out_weight=1`` learns ALL relevance, larger
values trade IN for OUT, so a researcher can trace the front.

**Cross-fitting.** Queries are split into ``folds`` folds by :func:`folds_of` (select's folds:
stratified by whether a query has OUT positives, same seed). A query's ranking always comes from
the model trained on the *other* folds, so every score this stage reports is out-of-fold. What is
guaranteed, exactly: *given the folds*, a query's judgments never move its own ranking
(``tests/test_ltr.py``); the folds themselves depend on which queries have an OUT positive, so a
judgment that turns a query's only OUT positive IN can move other queries between folds.
**Nested scores** (``nested.parquet``): for each outer fold f and each other fold g, g's queries
ranked by a model trained on the folds other than f and g. ``harness.select`` chooses fold f's
configuration on those, so neither f's model nor f's choice saw f's labels. Queries with no
positive are never scored; they are ranked by fold 0's model. LightGBM runs on one thread with
``deterministic=True``, so the same inputs give the same bytes.

**Train on one dataset, apply to another** (``ltr.train=DIR``, a DAPFAM-format folder): the same
runs are built on that dataset, one model learns from all of its judgments (an ``ltr_model``
artifact keyed by its features and qrels) and ranks this dataset's candidates; this dataset's
judgments are then never read by the ranker. This is how a DAPFAM user learns to rank: train
elsewhere, evaluate on DAPFAM.

Artifacts: the features (keyed by the input runs, topics and corpus; every objective reuses them;
the per-document values live in ``docs.parquet`` so the identity check can move them), the
identity check, and the learned run (keyed by the features, the qrels and every LightGBM setting)
with one model file per fold and ``importance.csv`` (gain and split counts per feature, family
and fold).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from . import data, env, ipc, leakage, stage
from .aggregate import families
from .artifact import Artifact
from .data import schema as S
from .data import views as V
from .data.qrels import subset
from .errors import ConfigError
from .evaluate import per_query
from .files import write_json_atomic
from .folds import from_judgments, query_folds
from .naming import inner_stem, tag
from .results import find, scores_dir
from .runs import read_trec, top_k, with_ranks, write_trec
from .significance import RESAMPLES, holm, max_statistic_test
from .stage import Context, Stage, register
from .store import default_results

log = logging.getLogger(__name__)

METHODS = ("lambdamart",)
FEATURES_VERSION = 2  # of the features builder (harness.env): bump when a change alters its files
VERSION = 2  # of the learned-run builder
IDENTITY_VERSION = 4  # of the identity check
MODEL_VERSION = 1  # of a model trained on another dataset (ltr.train)

FAMILIES = ("run", "domain", "ipc", "ipcpair", "doc", "doclen", "prior")
# Families whose values belong to the candidate document: identity-checked.
DOCUMENT_FAMILIES = ("domain", "ipc", "ipcpair", "doc", "doclen")
IDENTIFYING = ("doclen",)  # precise per-document values: refused before anything runs unless allowed
SHORT = {"run": "r", "domain": "o", "ipc": "i", "ipcpair": "c", "doc": "d", "doclen": "L", "prior": "p"}  # run tags
PAIR_SMOOTHING = 20.0  # pseudo-rows at the overall rate: a class pair seen in few rows says little
ALPHA = 0.05  # identity check: Holm-corrected over every family and subset
REPLICATES = 2  # identity check: draws of the permuted and of the redrawn copy, averaged per query


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


def ipc_features(cands: pd.DataFrame, q3: dict, d3: dict, qfull: dict | None = None, dfull: dict | None = None):
    """The ``ipc`` family (module docstring). Codes: ``{id: list of IPC3 codes}``; full codes
    (``ipcr_codes_str``, a space-separated string or a list) give the IPC4 features, NaN without
    them. A side without codes gives NaN (unknown), never "disjoint"."""
    qs = [ipc.code_set(q3.get(q)) for q in cands["query_id"]]
    ds = [ipc.code_set(d3.get(d)) for d in cands["doc_id"]]
    out = ipc.overlap(qs, ds, "ipc3")
    known = np.array([bool(x) and bool(y) for x, y in zip(qs, ds)])
    out["ipc3_disjoint"] = np.where(known, out["ipc3_shared"] == 0, np.nan).astype(float)
    out.update(ipc.overlap([ipc.sections(x) for x in qs], [ipc.sections(x) for x in ds], "section"))
    if qfull is not None and dfull is not None:
        q4 = [ipc.ipc4(qfull.get(q)) for q in cands["query_id"]]
        d4 = [ipc.ipc4(dfull.get(d)) for d in cands["doc_id"]]
        out.update(ipc.overlap(q4, d4, "ipc4"))
    else:
        out.update({"ipc4_shared": np.full(len(cands), np.nan), "ipc4_jaccard": np.full(len(cands), np.nan)})
    out["q_ipc3"] = np.array([len(x) for x in qs], float)
    out["d_ipc3"] = np.array([len(x) for x in ds], float)
    return pd.DataFrame(out)


def family_of(feature: str) -> str:
    """The feature family of a feature column (module docstring)."""
    if feature.startswith("dom_"):
        return "domain"
    if feature.startswith("pair_"):
        return "ipcpair"
    if feature.startswith(("ipc", "section", "q_ipc", "d_ipc")):
        return "ipc"
    if feature == "doc_len_log2":
        return "doc"
    if feature == "doc_len":
        return "doclen"
    if feature.startswith("prior_"):
        return "prior"
    return "run"


def _codes(values) -> str:
    """A code list (list, array or string) as one space-separated string (parquet-friendly)."""
    return " ".join(sorted(ipc.code_set(values)))


def _full(values) -> str | None:
    if values is None or (isinstance(values, float) and values != values):
        return None
    return values if isinstance(values, str) else "; ".join(str(v) for v in values if v is not None)


def side_table(ids, ipc3: dict, full: dict | None, words: dict | None = None) -> pd.DataFrame:
    """Per-query or per-document values the pair features are computed from, indexed by id:
    ``ipc3`` (space-separated codes), ``ipc_full`` (None without full codes) and ``words``."""
    ids = sorted(ids)
    out = pd.DataFrame(
        {
            "ipc3": [_codes(ipc3.get(i)) for i in ids],
            "ipc_full": [_full(full.get(i)) if full is not None else None for i in ids],
        },
        index=pd.Index(ids, name="id"),
    )
    if words is not None:
        out["words"] = [float(words.get(i, 0)) for i in ids]
    return out


def document_features(cands: pd.DataFrame, queries: pd.DataFrame, docs: pd.DataFrame, families) -> pd.DataFrame:
    """The columns of the families that read the candidate document (``domain``, ``ipc``, ``doc``,
    ``doclen``), from the side tables of :func:`side_table`; row order of ``cands``."""
    parts = []
    f = None
    if "domain" in families or "ipc" in families:
        full = queries["ipc_full"].notna().any() and docs["ipc_full"].notna().any()
        f = ipc_features(
            cands,
            queries["ipc3"].to_dict(),
            docs["ipc3"].to_dict(),
            queries["ipc_full"].to_dict() if full else None,
            docs["ipc_full"].to_dict() if full else None,
        )
    if "domain" in families:  # only whether the pair shares a class, a section: what IN / OUT means
        assert f is not None
        parts.append(
            pd.DataFrame(
                {
                    "dom_ipc3_disjoint": f["ipc3_disjoint"].to_numpy(),
                    "dom_section_disjoint": np.where(f["section_shared"].isna(), np.nan, f["section_shared"] == 0),
                }
            ).astype(float)
        )
    if "ipc" in families:
        parts.append(f)
    words = cands["doc_id"].map(docs["words"]).to_numpy(float) if "words" in docs else None
    if "doc" in families and words is not None:  # log2 buckets: 1, 2, 3-4, 5-8, ... words
        parts.append(pd.DataFrame({"doc_len_log2": np.ceil(np.log2(np.maximum(words, 1.0)))}))
    if "doclen" in families and words is not None:
        parts.append(pd.DataFrame({"doc_len": words}))
    return pd.concat(parts, axis=1) if parts else pd.DataFrame(index=range(len(cands)))


class PairStats:
    """The ``ipcpair`` family over one candidates table: for a mask of rows to learn from (labels
    ``y``), each row's smoothed positive and OUT-positive rates of its (query class, candidate
    class) pairs, at IPC3 and section level. Class pairs are exploded once; each call only counts.
    :meth:`rates` and :meth:`columns` split the two steps, so rates learned on one dataset can be
    applied to another's pairs (``ltr.train``)."""

    LEVELS = ("ipc3", "section")

    def __init__(self, cands: pd.DataFrame, queries: pd.DataFrame, docs: pd.DataFrame, y: np.ndarray | None = None):
        self.n = len(cands)
        self.y = np.zeros(self.n, int) if y is None else np.asarray(y)
        q3 = cands["query_id"].map(queries["ipc3"]).fillna("").str.split().to_numpy()
        d3 = cands["doc_id"].map(docs["ipc3"]).fillna("").str.split().to_numpy()
        self.pairs = {}
        for level in self.LEVELS:
            row, key = [], []
            for i, (a, b) in enumerate(zip(q3, d3)):
                qa = ipc.sections(a) if level == "section" else set(a)
                db = ipc.sections(b) if level == "section" else set(b)
                for x in qa:
                    for z in db:
                        row.append(i)
                        key.append(f"{x}>{z}")
            keys, inverse = np.unique(np.array(key, dtype=object), return_inverse=True)
            self.pairs[level] = (np.array(row, int), inverse.astype(int), pd.Index(keys))
        self.names = [
            f"pair_{lv}_{what}_{agg}" for lv in self.LEVELS for what in ("pos", "out") for agg in ("max", "mean")
        ]

    def rates(self, learn: np.ndarray) -> dict:
        """``{(level, what): Series of smoothed rates by class pair}`` and the overall rates, learned
        from the rows in ``learn``."""
        learn = np.asarray(learn, bool)
        out: dict = {}
        for level, (row, pair, keys) in self.pairs.items():
            use = learn[row]
            seen = np.bincount(pair[use], minlength=len(keys)).astype(float)
            for what, hit in (("pos", self.y > 0), ("out", self.y == 2)):
                base = float(hit[learn].mean()) if learn.any() else 0.0
                k = np.bincount(pair[use], weights=hit[row][use].astype(float), minlength=len(keys))
                out[(level, what)] = (
                    pd.Series((k + PAIR_SMOOTHING * base) / (seen + PAIR_SMOOTHING), index=keys),
                    base,
                )
        return out

    def columns(self, rates: dict) -> pd.DataFrame:
        """Each row's best and mean rate over its class pairs (a pair never seen: the overall rate;
        a side without codes: NaN)."""
        out = {}
        for level, (row, pair, keys) in self.pairs.items():
            for what in ("pos", "out"):
                table, base = rates[(level, what)]
                values = table.reindex(keys).fillna(base).to_numpy(float)[pair] if len(pair) else np.array([])
                g = pd.DataFrame({"row": row, "v": values}).groupby("row")["v"]
                for agg in ("max", "mean"):
                    col = np.full(self.n, np.nan)
                    vals = getattr(g, agg)()
                    col[vals.index.to_numpy()] = vals.to_numpy()
                    out[f"pair_{level}_{what}_{agg}"] = col
        return pd.DataFrame(out)

    def __call__(self, learn: np.ndarray) -> pd.DataFrame:
        return self.columns(self.rates(learn))


def prior_features(cands: pd.DataFrame, cites: dict) -> pd.DataFrame:
    """The ``prior`` family: how many queries of judgments that are not scored cite the candidate."""
    return pd.DataFrame({"prior_cites": cands["doc_id"].map(cites).fillna(0).to_numpy(float)})


def full_table(
    feats: pd.DataFrame,
    queries: pd.DataFrame | None,
    docs: pd.DataFrame | None,
    families,
    prior: dict | None = None,
) -> pd.DataFrame:
    """The features table a model learns from: the stored pair features (``run``) and, from the
    side tables, the document families; without side tables, ``feats`` as it is."""
    if queries is None or docs is None:
        return feats
    parts = [feats.reset_index(drop=True), document_features(feats, queries, docs, families)]
    if prior is not None and "prior" in families:
        parts.append(prior_features(feats, prior))
    return pd.concat(parts, axis=1)


def feature_columns(table: pd.DataFrame, families) -> list[str]:
    return [c for c in table.columns if c not in ("query_id", "doc_id") and family_of(c) in families]


def cycle(ids: np.ndarray, rng: np.random.Generator) -> dict:
    """Each id's stand-in: the ids in a random order, each standing for the one before it (a cycle:
    no id stands for itself)."""
    order = rng.permutation(len(ids))
    return dict(zip(ids[order], ids[np.roll(order, -1)]))


def permuted(docs: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Each document gets another document's values, its stand-in's in :func:`cycle`."""
    stand = cycle(docs.index.to_numpy(), np.random.default_rng(seed))
    out = docs.loc[[stand[d] for d in docs.index]].copy()
    out.index = docs.index
    return out


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


# ----------------------------------------------------------------------------- identity check (pure)
def _held_ndcg(
    table: pd.DataFrame,
    cols: list[str],
    y: np.ndarray,
    positives: pd.DataFrame,
    fold: pd.Series,
    params: dict,
    extra=None,
) -> dict:
    scores, _ = cross_fit(table[cols], y, table["query_id"], fold, params, extra)
    run = top_k(
        pd.DataFrame({"query_id": table["query_id"], "doc_id": table["doc_id"], "score": scores}), params["out_k"]
    )
    return {
        s: per_query(run, subset(positives, s), ["nDCG@100"]).set_index("query_id")["value"] for s in ("ALL", "OUT")
    }


def identity_check(
    feats: pd.DataFrame,
    positives: pd.DataFrame,
    params: dict,
    queries: pd.DataFrame,
    docs: pd.DataFrame,
    prior: dict | None = None,
    seed: int = 0,
) -> dict:
    """Does a document family act as an identity? For each family of ``params["features"]`` in
    :data:`DOCUMENT_FAMILIES`, held-out nDCG@100 (ALL, OUT) of four models: the real one; one
    whose family is computed from a *stand-in document fixed per document* (a random cycle, as
    :func:`permuted`: each document keeps one stand-in, never itself, across every query); one
    whose stand-in is *redrawn for every query-candidate row* (the same query side, the same
    distribution of document values, but nothing a document keeps from query to query: the noise
    control); and one *without* the family.

    Stand-in values describe nothing about the candidate; what the fixed one can still carry, and
    the redrawn one cannot, is which document it is. So a family is **identifying** when the
    fixed copy beats the redrawn copy on held-out queries: one-sided sign-flip test over queries
    of (permuted - redrawn), on ALL and OUT, Holm-corrected over every family and subset, at
    :data:`ALPHA`. (Against the model without the family a stand-in copy can also gain from being
    extra columns to split on; the redrawn control has those columns too.) One draw varies as much
    as the effect of a coarse family, so each arm is the per-query mean over :data:`REPLICATES`
    draws; the test is over queries, given those models."""
    fams = [f for f in params["features"] if f in DOCUMENT_FAMILIES]
    out: dict = {"alpha": ALPHA, "families": {}, "identifying": [], "seed": seed}
    if not fams:
        return out
    fold = folds_of(positives, params["folds"], params["seed"])
    table = full_table(feats, queries, docs, params["features"], prior)
    cols = feature_columns(table, params["features"])
    y = labels(table, positives)
    extra = learned_columns(table, queries, docs, y, params["features"])
    real = _held_ndcg(table, cols, y, positives, fold, params, extra)
    out["real"] = {s: float(v.mean()) for s, v in real.items()}
    ids = docs.index.to_numpy()
    draws = []
    for r in range(REPLICATES):  # (each document's stand-in, each row's stand-in)
        rng = np.random.default_rng(seed + r)
        per_doc = table["doc_id"].map(cycle(ids, rng)).to_numpy()
        draws.append((per_doc, rng.choice(ids, len(table))))
    tests = []

    def mean_of(results: list[dict]) -> dict:
        return {s: sum(r[s] for r in results) / len(results) for s in ("ALL", "OUT")}

    def stand_in(doc_ids) -> pd.DataFrame:
        return table[["query_id"]].assign(doc_id=doc_ids)

    for fam in fams:
        moved_arms: list[dict] = []
        redrawn_arms: list[dict] = []
        for per_doc, per_row in draws:
            for arm, doc_ids in ((moved_arms, per_doc), (redrawn_arms, per_row)):
                if fam == "ipcpair":  # learned in-fold from the stand-ins' codes
                    stats = PairStats(stand_in(doc_ids), queries, docs, y)
                    arm.append(_held_ndcg(table, cols, y, positives, fold, params, stats))
                else:
                    own = [c for c in cols if family_of(c) == fam]
                    t = table.copy()
                    t[own] = document_features(stand_in(doc_ids), queries, docs, [fam])[own].to_numpy()
                    arm.append(_held_ndcg(t, cols, y, positives, fold, params, extra))
        keep = [c for c in cols if family_of(c) != fam]
        arms = {
            "permuted": mean_of(moved_arms),
            "redrawn": mean_of(redrawn_arms),
            "without": _held_ndcg(table, keep, y, positives, fold, params, None if fam == "ipcpair" else extra),
        }
        entry: dict = {arm: {s: float(v.mean()) for s, v in a.items()} for arm, a in arms.items()}
        entry.update({"delta": {}, "p": {}})
        for s in ("ALL", "OUT"):
            d = (arms["permuted"][s] - arms["redrawn"][s].reindex(arms["permuted"][s].index)).to_numpy(float)
            entry["delta"][s] = float(d.mean())
            entry["p"][s] = float(max_statistic_test(d[:, None], 0, seed)["p_max_statistic"]) if len(d) else 1.0
            tests.append((fam, s))
        out["families"][fam] = entry
    out["smallest_p"] = smallest_holm_p(len(fold), len(tests))  # over ALL's queries: OUT's are fewer
    corrected = holm([out["families"][f]["p"][s] for f, s in tests])
    for (fam, s), p in zip(tests, corrected):
        out["families"][fam].setdefault("p_holm", {})[s] = float(p)
    for fam in fams:
        e = out["families"][fam]
        e["identifying"] = any(e["p_holm"][s] < ALPHA and e["delta"][s] > 0 for s in ("ALL", "OUT"))
        if e["identifying"]:
            out["identifying"].append(fam)
    return out


def smallest_holm_p(queries: int, tests: int, resamples: int = RESAMPLES) -> float:
    """The smallest Holm-corrected p-value ``tests`` one-sided sign-flip tests over ``queries``
    queries can give: the best single p is 2**-queries (every sign pattern equally likely), or
    1 / (resamples + 1), and Holm multiplies the smallest by the number of tests. When it is not
    below :data:`ALPHA`, no family could be found identifying whatever it does: "ok" would say
    nothing."""
    return min(1.0, tests * max(0.5 ** max(queries, 0), 1.0 / (resamples + 1)))


def format_identity(result: dict) -> list[str]:
    """One ``identity check:`` line per family checked (or one saying why nothing was)."""
    if result.get("transfer"):
        return [
            f"identity check: not needed: the ranker was trained on {result['transfer']}'s judgments and never read "
            f"these (ltr.train)"
        ]
    if not result["families"]:
        return ["identity check: no document-level feature family to check (features: run only)"]
    r = result["real"]
    lines = []
    for fam, e in result["families"].items():
        floor = result.get("smallest_p", 0.0)
        if e["identifying"]:
            verdict = "IDENTIFYING: it tells documents apart"
        elif floor >= result["alpha"]:
            verdict = (
                f"INCONCLUSIVE: the smallest p-value these queries and tests can reach is {floor:.3g}, not below "
                f"alpha: more queries (or fewer families) are needed before this can say ok"
            )
        else:
            verdict = "ok"
        arms = ", ".join(f"{a} {e[a]['ALL']:.4f}/{e[a]['OUT']:.4f}" for a in ("permuted", "redrawn", "without"))
        lines.append(
            f"identity check: {fam}: held-out nDCG@100 ALL/OUT real {r['ALL']:.4f}/{r['OUT']:.4f}, {arms}; "
            f"permuted - redrawn {e['delta']['ALL']:+.4f}/{e['delta']['OUT']:+.4f} (one-sided sign-flip p, Holm "
            f"over {2 * len(result['families'])} tests: {e['p_holm']['ALL']:.3g}/{e['p_holm']['OUT']:.3g}; alpha "
            f"{result['alpha']}): {verdict}"
        )
    return lines


def read_prior(path: str | Path, scored_queries) -> tuple[dict, str]:
    """``{doc id: number of queries citing it}`` from judgments that are not scored: a TREC qrels
    file (``qid 0 docid rel``) or a DAPFAM-format qrels parquet (or its folder). Refused when those
    judgments cover a query being scored. Returns the counts and the file's digest."""
    p = Path(path)
    if p.is_dir():
        p = p / "qrels_all.parquet"
    if not p.exists():
        raise ConfigError(f"ltr.prior={path}: no such file. Fix: a TREC qrels file or a DAPFAM qrels_all.parquet.")
    try:
        if p.suffix == ".parquet":
            q = pd.read_parquet(p).rename(columns={"relevant_id": "doc_id", "relevance_score": "relevance"})
        else:
            q = pd.read_csv(p, sep=r"\s+", header=None, names=["query_id", "iter", "doc_id", "relevance"], dtype=str)
    except (ValueError, OSError) as e:  # pandas' EmptyDataError and ParserError are ValueErrors
        raise ConfigError(
            f"ltr.prior={path}: cannot be read ({e}). Fix: a TREC qrels file or DAPFAM's qrels."
        ) from None
    missing = [c for c in ("query_id", "doc_id", "relevance") if c not in q.columns]
    if missing:
        raise ConfigError(f"ltr.prior={path}: lacks columns {missing}. Fix: a TREC qrels file or DAPFAM's qrels.")
    q = q[pd.to_numeric(q["relevance"], errors="coerce").fillna(0) > 0].astype({"query_id": str, "doc_id": str})
    if q.empty:
        raise ConfigError(
            f"ltr.prior={path}: no positive judgment, so the prior would be 0 for every document. Fix: qrels "
            f"with relevant pairs (relevance > 0)."
        )
    overlap = sorted(set(q["query_id"]) & {str(x) for x in scored_queries})
    if overlap:
        raise ConfigError(
            f"ltr.prior={path}: its judgments cover {len(overlap)} of the queries being scored (e.g. {overlap[0]}): "
            f"a prior learned from the judgments being scored is the benchmark's answer key. Fix: judgments of "
            f"other queries (another dataset, or a split whose queries this run does not score)."
        )
    cites = q.drop_duplicates(["query_id", "doc_id"]).groupby("doc_id").size().to_dict()
    return cites, hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def audit_prior(path: str, ctx: Context) -> None:
    """``ltr.prior`` from a DAPFAM-format folder: the leakage audit by content against the scored
    judgments (a bare qrels file has ids only, which :func:`read_prior` compares)."""
    folder = Path(path)
    if not (folder.is_dir() and (folder / "queries.parquet").exists() and (folder / "corpus.parquet").exists()):
        return
    cfg = train_dataset_config(str(folder), ctx.cfg.dataset)
    leakage.check(leakage.audit(judged(data.load(cfg, ctx.store.root)), judged(ctx.ds)), f"ltr.prior={path}")


# ----------------------------------------------------------------------------- stages
class IdentifyingFeature(Exception):
    """A feature family the identity check flags and ``ltr.allow_identifying`` does not name."""


def _passage_run(run: Artifact) -> Artifact | None:
    """The unit run of passages behind a family run (None for documents or fused runs)."""
    if run.kind != stage.FAMILY_RUN or run.params.get("aggregation") == "identity":
        return None
    return run.parents[0]


def build_features(tmp: Path, art: Artifact, run_files: list[Path], passage_files: dict[int, Path], ds) -> dict:
    """The candidates of the runs in ``run_files`` (the final run first) with their ``run``
    features, and the per-query and per-document side tables the document families read
    (``ds``: the dataset's queries, corpus view and codes)."""
    depth = art.params["depth"]
    runs = [read_trec(f) for f in run_files]
    passages = {i: read_trec(f) for i, f in passage_files.items()}
    cands = candidates(runs, depth)
    q = ds.queries
    qfull = dict(zip(q[S.QUERY_ID], q[S.IPC_FULL])) if S.IPC_FULL in q.columns else None
    try:
        dfull = ds.doc_ipc_codes if qfull is not None else None
    except Exception:  # noqa: BLE001  (a corpus without full codes: IPC4 features are NaN)
        dfull, qfull = None, None
    qtext = V.query_texts(q, art.params["query_view"])
    words = {d: len(t.split()) for d, t in V.target_texts(ds.corpus, art.params["target_view"])}
    table = pd.concat([cands, run_features(cands, runs, depth, passages)], axis=1)
    table["q_len"] = cands["query_id"].map(lambda x: len(qtext.get(x, "").split())).astype(float)
    table.to_parquet(tmp / "features.parquet", index=False)
    side_table(q[S.QUERY_ID], dict(zip(q[S.QUERY_ID], q[S.IPC3])) if S.IPC3 in q.columns else {}, qfull).to_parquet(
        tmp / "queries.parquet"
    )
    ids = set(ds.doc_ipc3) | set(words)
    side_table(ids, ds.doc_ipc3, dfull, words).to_parquet(tmp / "docs.parquet")
    return {"candidates": len(cands), "features": [c for c in table.columns if c not in ("query_id", "doc_id")]}


def build_identity(tmp: Path, features_dir: Path, positives: pd.DataFrame, params: dict, prior: dict | None) -> dict:
    """The identity check (module docstring) of ``params`` on the features in ``features_dir``."""
    f, q, d = read_features(features_dir)
    result = identity_check(f, positives, params, q, d, prior, seed=params["seed"])
    write_json_atomic(tmp / "identity.json", result)
    return {"identifying": result["identifying"]}


def build_learned(
    tmp: Path, art: Artifact, features_dir: Path, positives: pd.DataFrame, prior: dict | None, identity: dict
) -> dict:
    """The cross-fitted learned run (and its nested rankings, models, importances and folds)."""
    params = art.params
    f, q, d = read_features(features_dir)
    run, models, imp, inner = learned_run(f, positives, params, q, d, prior, nested=params["nested"])
    (tmp / "models").mkdir()
    for k, m in models.items():
        m.booster_.save_model(str(tmp / "models" / f"fold{k}.txt"))
    imp.to_csv(tmp / "importance.csv", index=False)
    folds_of(positives, params["folds"], params["seed"]).rename_axis("query_id").to_csv(tmp / "folds.csv")
    if inner is not None:
        inner.to_parquet(tmp / "nested.parquet", index=False)
    name = tag(art)
    write_trec(run, tmp / "run.trec", name)
    by_family = imp.groupby("family")["gain"].sum()
    return {
        "tag": name,
        "learned_from": "cross-fitted",
        "gain_share": (by_family / max(by_family.sum(), 1e-12)).round(4).to_dict(),
        "identity": identity,
        "identifying": [f for f in identity["identifying"] if f in params.get("allow_identifying", [])],
    }


def constant_families(x: pd.DataFrame, families) -> list[str]:
    """The feature families whose every column holds one value over ``x``'s rows (run features
    excepted: they come from the runs, never from the data's columns)."""
    out = []
    for fam in families:
        own = [c for c in x.columns if family_of(c) == fam]
        if fam != "run" and own and all(x[c].nunique(dropna=False) <= 1 for c in own):
            out.append(fam)
    return out


def build_model(tmp: Path, features_dir: Path, positives: pd.DataFrame, params: dict) -> dict:
    """One model learned from all of the training dataset's judgments (``ltr.train``), with the
    class-pair rates it saw, for another dataset's candidates."""
    f, q, d = read_features(features_dir)
    table = full_table(f, q, d, params["features"])
    cols = feature_columns(table, params["features"])
    y = labels(table, positives)
    extra = learned_columns(table, q, d, y, params["features"])
    constant = constant_families(table[cols], params["features"])
    if constant:
        raise IdentifyingFeature(
            f"ltr.train: feature famil{'y' if len(constant) == 1 else 'ies'} {constant} cannot be computed on the "
            f"training data (every row has the same value: the data lacks what they read, e.g. IPC codes or "
            f"text), so the model would learn nothing from {'it' if len(constant) == 1 else 'them'} and the row "
            f"would claim {'it' if len(constant) == 1 else 'them'}. Fix: drop {constant} from ltr.features, or "
            f"train on data that has their columns."
        )
    x = table[cols]
    if extra is not None:  # class-pair rates: each training row's from the other folds of A
        rows = _fold_of_rows(table["query_id"], folds_of(positives, params["folds"], params["seed"]))
        x = with_learned(x, extra, rows, set())
        rates = extra.rates(~np.isnan(rows))  # all of A's judged rows, for B
        pd.to_pickle(rates, tmp / "pair_rates.pkl")
    m = fit(x, y, table["query_id"], params)
    m.booster_.save_model(str(tmp / "model.txt"))
    _importance({"all": m}, list(x.columns)).to_csv(tmp / "importance.csv", index=False)
    return {"queries": int(table["query_id"].nunique())}


def build_transferred(tmp: Path, art: Artifact, model_dir: Path, features_dir: Path, train: str) -> dict:
    """This dataset's candidates ranked by the model in ``model_dir`` (its labels never read)."""
    import lightgbm as lgb  # heavy: only where a model is applied

    params = art.params
    booster = lgb.Booster(model_file=str(model_dir / "model.txt"))
    f, q, d = read_features(features_dir)
    table = full_table(f, q, d, params["features"])
    rates = model_dir / "pair_rates.pkl"
    if rates.exists():  # A's class-pair rates over this dataset's pairs
        learned = PairStats(table, q, d).columns(pd.read_pickle(rates))
        table = pd.concat([table.reset_index(drop=True), learned], axis=1)
    try:
        run = apply_model(booster, table, params["out_k"])
    except ValueError as e:
        raise IdentifyingFeature(f"ltr.train={train}: {e}") from None
    run_tag = tag(art)
    write_trec(run, tmp / "run.trec", run_tag)
    return {
        "tag": run_tag,
        "learned_from": f"trained on {train}",
        "identity": {"transfer": params["train"]},
        "identifying": [],
    }


def features_node(ctx: Context, inputs: list[Artifact]) -> Artifact:
    """The pair features of the candidates of ``inputs`` (the final run first), and the per-query
    and per-document values the document families are computed from."""
    depth = int(ctx.cfg.ltr.depth)
    art = Artifact(
        stage.LTR_FEATURES,
        {"depth": depth, "query_view": str(ctx.cfg.query_fields), "target_view": str(ctx.cfg.target_fields)},
        (*inputs, ctx.topics_node, ctx.corpus_node),
        {"stage": FEATURES_VERSION, "lightgbm": env.version("lightgbm")},
    )

    run_files = [ctx.store.path(r) / "run.trec" for r in inputs]
    passage_files = {i: ctx.store.path(u) / "run.trec" for i, r in enumerate(inputs) if (u := _passage_run(r))}
    return ctx.ensure(art, lambda tmp: build_features(tmp, art, run_files, passage_files, ctx.ds), "LTR features")


def read_features(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return (
        pd.read_parquet(folder / "features.parquet"),
        pd.read_parquet(folder / "queries.parquet"),
        pd.read_parquet(folder / "docs.parquet"),
    )


def params_of(t, out_k: int) -> dict:
    p = {
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
        "nested": bool(t.get("nested", True)),
    }
    allowed = sorted(str(f) for f in (t.get("allow_identifying") or []))
    if allowed:  # in the key and the tag only where named: other runs keep their names
        p["allow_identifying"] = allowed
    return p


def identity_node(ctx: Context, feats: Artifact, params: dict, prior: dict | None) -> Artifact:
    """The identity check of a learned run's configuration (module docstring), cached."""
    keyed = {k: v for k, v in params.items() if k not in ("allow_identifying", "nested")}
    art = Artifact(
        stage.LTR_IDENTITY,
        keyed,
        (feats, ctx.qrels_node),
        {"stage": IDENTITY_VERSION, "lightgbm": env.version("lightgbm")},
    )

    features_dir, positives = ctx.store.path(feats), ctx.ds.positives
    return ctx.ensure(
        art, lambda tmp: build_identity(tmp, features_dir, positives, params, prior), "LTR identity check"
    )


def node(ctx: Context, inputs: list[Artifact]) -> Artifact:
    """The learned run stage over the final run and its inputs (cross-fitted, or trained on another
    dataset with ``ltr.train``; module docstring)."""
    t = ctx.cfg.ltr
    feats = features_node(ctx, inputs)
    params = params_of(t, ctx.cfg.search.k)
    if t.get("train"):
        learned = transfer_node(ctx, feats, params)
        if learned is not None:
            return learned
    prior = None
    if t.get("prior"):
        prior, params["prior"] = read_prior(t.prior, ctx.ds.query_ids)
        audit_prior(str(t.prior), ctx)
    ident = identity_node(ctx, feats, params, prior)
    identity = None
    if not ctx.plan:
        identity = json.loads((ctx.store.path(ident) / "identity.json").read_text())
        for line in format_identity(identity):
            log.info("%s", line)
        refused = [f for f in identity["identifying"] if f not in params.get("allow_identifying", [])]
        if refused:
            e = identity["families"][refused[0]]
            raise IdentifyingFeature(
                f"ltr.features: the {refused[0]} family identifies documents on this dataset (its values moved to "
                f"other documents beat values redrawn for every pair by {e['delta']['ALL']:+.4f} ALL / "
                f"{e['delta']['OUT']:+.4f} OUT nDCG@100, Holm p {e['p_holm']['ALL']:.3g} / {e['p_holm']['OUT']:.3g}): "
                f"the ranker would learn which documents other queries' judgments cite. Fix: drop it from "
                f"ltr.features, or name it in ltr.allow_identifying=[{refused[0]}] to run it anyway (tagged)."
            )
    art = Artifact(
        stage.LTR_RUN, params, (feats, ctx.qrels_node), {"stage": VERSION, "lightgbm": env.version("lightgbm")}
    )

    features_dir, positives = ctx.store.path(feats), ctx.ds.positives

    def build(tmp):
        assert identity is not None  # read above whenever anything is built
        return build_learned(tmp, art, features_dir, positives, prior, identity)

    return ctx.ensure(art, build, "learned run (LambdaRank, cross-fitted)")


def train_dataset_config(train: str, like) -> DictConfig:
    """The dataset config of ``ltr.train``: ``mini``, or a DAPFAM-format folder, read with the same
    options (domain source, unknown ids, self hits) as the dataset it is applied to."""
    opts = {k: like.get(k) for k in ("domain_source", "unknown_ids", "drop_self_hits") if like.get(k) is not None}
    if train == "mini":
        mini = OmegaConf.load(Path(__file__).resolve().parent.parent / "conf" / "dataset" / "mini.yaml")
        merged = OmegaConf.merge(mini, opts)
        assert isinstance(merged, DictConfig)
        return merged
    return OmegaConf.create({"type": "local", "path": str(train), **opts})


def judged(ds) -> leakage.Judged:
    """A dataset's judgments as the leakage audit reads them: TA texts of queries and documents."""
    pos = ds.positives.rename(columns={S.DOC_ID: "doc_id"})[[S.QUERY_ID, "doc_id"]]
    return leakage.Judged(V.query_texts(ds.queries, "TA"), dict(V.target_texts(ds.corpus, "TA")), pos)


def transfer_node(ctx: Context, feats: Artifact, params: dict) -> Artifact | None:
    """``ltr.train``: the same experiment's runs on the training dataset, one model learned from
    all of its judgments, applied to this dataset's candidates (whose judgments it never reads).
    None where the training dataset is this one (cross-fitting stays the rule); refused where its
    judgments cover some of the queries scored here."""
    train = str(ctx.cfg.ltr.train)
    cfg_a = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True))
    assert isinstance(cfg_a, DictConfig)
    with open_dict(cfg_a):
        cfg_a.ltr.train = None
        cfg_a.dataset = train_dataset_config(train, ctx.cfg.dataset)
    ds_a = data.load(cfg_a.dataset, ctx.store.root)
    ctx_a = ctx.on(cfg_a, ds_a)
    if ds_a.qrels_digest == ctx.ds.qrels_digest and ds_a.topics_fingerprint == ctx.ds.topics_fingerprint:
        log.info("ltr.train=%s is the dataset being scored: cross-fitting over its queries instead", train)
        return None
    # By content, not ids: the same patents under another source's ids, and pairs read backwards
    found = leakage.audit(judged(ds_a), judged(ctx.ds))
    leakage.check(found, f"ltr.train={train}")
    log.info("ltr.train=%s: leakage audit: %s", train, found.summary())
    feats_a = features_node(ctx_a, ctx_a.candidate_runs())
    # The run's lineage (manifest, gc) holds the training dataset's artifacts; its timings do not.
    ctx.elsewhere.update(n.key for n in ctx_a.nodes if n not in ctx.nodes)
    ctx.nodes.extend(n for n in ctx_a.nodes if n not in ctx.nodes)
    keyed = {k: v for k, v in params.items() if k not in ("out_k", "nested", "allow_identifying")}
    environment = {"stage": MODEL_VERSION, "lightgbm": env.version("lightgbm")}
    model = Artifact(stage.LTR_MODEL, keyed, (feats_a, ctx_a.qrels_node), environment)

    features_a = ctx.store.path(feats_a)
    ctx.ensure(
        model,
        lambda tmp: {
            "trained_on": ds_a.name,
            "train_source": ds_a.source,
            **build_model(tmp, features_a, ds_a.positives, params),
        },
        f"LTR model trained on {train}",
    )
    name = Path(train).name or train
    art = Artifact(
        stage.LTR_RUN,
        {**params, "train": name},
        (feats, model),
        {"stage": VERSION, "lightgbm": env.version("lightgbm")},
    )

    model_dir, features_dir = ctx.store.path(model), ctx.store.path(feats)
    return ctx.ensure(
        art,
        lambda tmp: {**build_transferred(tmp, art, model_dir, features_dir, train), "leakage": found.columns()},
        f"learned run (LambdaRank trained on {train})",
    )


# ----------------------------------------------------------------------------- how the stages name themselves
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


def learned_tag(run: Artifact) -> str:
    """The run it improves on, then ``ltr-<families>-ow<gain>``, the identifying families allowed
    and the training dataset where named, and the key."""
    p = run.params
    fam = "".join(SHORT.get(f, f[0]) for f in p["features"])
    allow = "-id" + "".join(SHORT.get(f, f[0]) for f in p["allow_identifying"]) if p.get("allow_identifying") else ""
    train = f"-tr{p['train']}" if p.get("train") else ""
    return f"{inner_stem(learned_from(run))}.ltr-{fam}-ow{p['out_weight']:g}{allow}{train}.{run.key[:8]}"


def learned_from(run: Artifact) -> Artifact:
    """The run a learned run improves on: its features' first parent (the final run)."""
    return run.parents[0].parents[0]


# Registered by the imported module only: `python -m harness.ltr` runs this file as __main__ too,
# and a second registration of the same stages (other function objects) is refused by the registry.
STAGES = (
    ()
    if __name__ == "__main__"
    else (
        register(Stage(stage.LTR_FEATURES, "runs", "LTR feature tables", FEATURES_VERSION, cost="transform")),
        register(Stage(stage.LTR_IDENTITY, "runs", "LTR identity checks", IDENTITY_VERSION, cost="transform")),
        register(
            Stage(stage.LTR_MODEL, "runs", "LTR models trained on another dataset", MODEL_VERSION, cost="transform")
        ),
        register(
            Stage(
                stage.LTR_RUN,
                "runs",
                "learned runs (LTR)",
                VERSION,
                group="ltr",
                run=True,
                node=node,
                inner=learned_from,
                requires=lambda t: (
                    [(part, [S.IPC3], "ltr.features=[..., ipc]") for part in ("queries", "corpus")]
                    if "ipc" in t.features
                    else []
                ),
                tag=learned_tag,
                columns=lambda params: {"ltr": ltr_label(params) if params else None},
                system=" + LTR",
                in_fused_input="learned on its own",
                cost="transform",
            )
        ),
    )
)


# ----------------------------------------------------------------------------- command line
def learned_artifact(results: Path, scores_key: str) -> tuple[dict, Path | None]:
    """The results row of ``scores_key`` and the folder of its learned run (None: no learned ranker)."""
    row = find(results, scores_key)
    folder = scores_dir(results, row)
    runs = Path(results).resolve().parent
    meta = json.loads((folder / "meta.json").read_text())
    while meta["kind"] != stage.LTR_RUN:
        if meta["kind"] != stage.SCORES and stage.get(meta["kind"]).inner is None:  # no transform left
            return row, None
        parent = meta["parents"][0]
        folder = runs / parent["kind"] / parent["key"]
        meta = json.loads((folder / "meta.json").read_text())
    return row, folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.ltr", description="Learning to rank: checks of learned runs.")
    sub = ap.add_subparsers(dest="command", required=True)
    idc = sub.add_parser("identity", help="the identity check of a results row's learned ranker (module docstring)")
    idc.add_argument("scores_key", help="a results row: its scores key, run tag or experiment name")
    idc.add_argument("--results", type=Path, default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    a = ap.parse_args(argv)
    results = a.results or default_results()
    try:
        row, folder = learned_artifact(results, a.scores_key)
    except (OSError, ValueError) as e:
        print(f"identity check: cannot read the row {a.scores_key}: {e}", file=sys.stderr)
        return 2
    if folder is None:
        print(
            f"identity check: {row['tag']} has no learned ranker: nothing was learned from judgments, nothing to check"
        )
        return 0
    meta = json.loads((folder / "meta.json").read_text())
    if "identity" not in meta:
        print(
            f"identity check: {folder} was built before the identity check existed. Fix: rerun the row's "
            f"experiment (it builds a new learned run and checks it).",
            file=sys.stderr,
        )
        return 2
    for line in format_identity(meta["identity"]):
        print(line)
    flagged = meta["identity"].get("identifying", [])
    if flagged:
        print(f"identity check: {row['tag']}: identifying families {flagged} (allowed by ltr.allow_identifying)")
        return 1
    return 0


if __name__ == "__main__":
    from harness.ltr import main as imported_main  # the registered module's, not this __main__ copy's

    sys.exit(imported_main())
