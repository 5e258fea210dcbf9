"""The folds of cross-fitting and of nested selection: one derivation, read by both.

Learning to rank (:mod:`harness.ltr`) trains fold f's model on the other folds' judgments, and
selection (:mod:`harness.select`) chooses fold f's configuration on scores no model trained on f
made; both hold only if the two split the queries the same way. Both derive the folds here, from
the same two facts about each query: it has a positive judgment (it is scored), and it has an OUT
positive (the stratum, so every fold holds about 1/k of the queries that can score on OUT). LTR
reads them off the judgments, selection off the per-query scores tables; ``tests/test_select.py``
checks that the two agree on a scored dataset.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def stratified_folds(query_ids, strata: dict, k: int, seed: int = 0) -> pd.Series:
    """Fold number (0..k-1) of each query: each stratum shuffled with ``seed`` and dealt round-robin,
    so every fold holds about 1/k of each stratum."""
    if k < 2:
        raise ValueError(f"folds={k}: cross-validation needs at least 2 folds.")
    ids = sorted(query_ids)
    if len(ids) < k:
        raise ValueError(f"folds={k} > {len(ids)} queries. Fix: fewer folds.")
    rng = np.random.default_rng(seed)
    out, offset = {}, 0
    for stratum in sorted({strata.get(q, False) for q in ids}, key=str):
        members = [q for q in ids if strata.get(q, False) == stratum]
        for i, j in enumerate(rng.permutation(len(members))):
            out[members[j]] = (i + offset) % k
        offset += len(members)  # the next stratum starts where this one stopped: folds stay balanced
    return pd.Series(out, name="fold").sort_index()


def query_folds(scored, with_out, k: int, seed: int) -> pd.Series:
    """The folds of the ``scored`` queries (those with a positive), stratified by membership of
    ``with_out`` (those with an OUT positive)."""
    with_out = set(with_out)
    return stratified_folds(scored, {q: q in with_out for q in scored}, k, seed)


def from_judgments(positives: pd.DataFrame) -> tuple[list, set]:
    """``(scored, with_out)`` read off the judgments (``query_id``, ``relevance``, ``domain``)."""
    pos = positives[positives["relevance"].astype(float) > 0]
    return sorted(pos["query_id"].unique()), set(pos.loc[pos["domain"] == "OUT", "query_id"])


def from_scores(per_query: pd.DataFrame) -> tuple[list, set]:
    """``(scored, with_out)`` read off a per-query scores table (``query_id``, ``subset``): the
    queries scored on ALL, and those scored on OUT."""
    return (
        sorted(per_query.loc[per_query["subset"] == "ALL", "query_id"].unique()),
        set(per_query.loc[per_query["subset"] == "OUT", "query_id"]),
    )
