"""LTR features: what a learned ranker may read about a query-candidate pair (harness.ltr's docstring lists the families)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from .. import ipc
from ..aggregate import families
from ..runs import top_k, with_ranks

log = logging.getLogger(__name__)

FAMILIES = ("run", "domain", "ipc", "ipcpair", "doc", "doclen", "prior")
# Families whose values belong to the candidate document: identity-checked.
DOCUMENT_FAMILIES = ("domain", "ipc", "ipcpair", "doc", "doclen")
IDENTIFYING = ("doclen",)  # precise per-document values: refused before anything runs unless allowed
SHORT = {"run": "r", "domain": "o", "ipc": "i", "ipcpair": "c", "doc": "d", "doclen": "L", "prior": "p"}  # run tags
PAIR_SMOOTHING = 20.0  # pseudo-rows at the overall rate: a class pair seen in few rows says little


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
