"""The LTR identity check: a family whose per-document values, moved to other documents, still help names documents (harness.ltr's docstring)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ..data.qrels import subset
from ..evaluate import per_query
from ..runs import top_k
from ..significance import RESAMPLES, holm, max_statistic_test
from .features import (
    DOCUMENT_FAMILIES,
    PairStats,
    cycle,
    document_features,
    family_of,
    feature_columns,
    full_table,
    labels,
)
from .training import cross_fit, folds_of, learned_columns

log = logging.getLogger(__name__)

ALPHA = 0.05  # identity check: Holm-corrected over every family and subset
REPLICATES = 2  # identity check: draws of the permuted and of the redrawn copy, averaged per query


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


# ----------------------------------------------------------------------------- stages
class IdentifyingFeature(Exception):
    """A feature family the identity check flags and ``ltr.allow_identifying`` does not name."""
