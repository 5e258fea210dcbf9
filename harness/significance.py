"""Significance tests that survive selection, for :mod:`harness.select`.

A configuration chosen as the best of N on some queries and then tested on the same queries
wins partly by luck (the winner's curse): with N configurations of pure noise, the best one
"beats" the baseline at p < 0.05 in most grids. Two honest tests:

* :func:`cv_test` -- the cross-validated choice. Each query is scored by the configuration
  chosen on the *other* folds. Pairing those out-of-fold scores with the baseline's and running
  a t-test is still too optimistic: the folds' choices are made on overlapping queries, so the
  held-out differences are positively correlated (on pure noise such a t-test rejects well above
  its level, ``tests/test_select.py``). So the whole procedure is tested: under the null that
  no configuration differs from the baseline, the sign of each query's differences (every
  configuration, subset and measure at once) is exchangeable; the cross-validated choice is
  redone on each sign-flipped copy and its held-out mean difference is compared with the
  observed one (a paired randomisation test of the procedure, two-sided). The 95% interval is a
  percentile bootstrap over queries, the choice redone in each resample; it errs wide on the low
  side (a resample's repeated queries make noise configurations look better, so they are chosen
  more often than on the real queries).
* :func:`max_statistic_test` -- the best-of-grid choice, corrected for the N candidates: the same
  sign flips, and the *largest* mean difference over all N as the null distribution the
  best-of-N lead is judged against (Westfall and Young's single-step max-T; one-sided).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RESAMPLES = 10_000
BOOTSTRAP = 2_000
CHUNK = 1_000  # resamples per matrix product: bounds memory at DAPFAM's 1,247 queries


def guard_pass(sums: np.ndarray, squares: np.ndarray, counts: np.ndarray, alpha: float | None) -> np.ndarray:
    """Which configurations a guard lets through, from their per-query differences to the baseline
    (sums, sums of squares and counts over the queries the guard's subset scores). ``alpha`` None:
    a mean not below the baseline's. Otherwise: not *significantly* below it, by a one-sided
    paired t-test at ``alpha`` (``scipy.stats.ttest_rel(..., alternative="less")``'s p >= alpha,
    written out so that it runs over thousands of resamples at once)."""
    if alpha is None:
        return sums >= -1e-9
    from scipy.stats import t as student_t

    n = np.maximum(counts, 2.0)
    mean = sums / n
    se = np.sqrt(np.maximum(squares - n * mean**2, 0.0) / (n - 1) / n)
    tstat = np.where(se > 1e-15, mean / np.where(se > 1e-15, se, 1.0), np.where(mean >= -1e-12, 0.0, -np.inf))
    return tstat >= student_t.ppf(alpha, n - 1)


def _held_out_deltas(
    weights: np.ndarray,
    choose_on: np.ndarray | dict,
    evaluate: list[tuple[np.ndarray, np.ndarray]],
    folds: np.ndarray,
    guard: list[tuple[np.ndarray | dict, np.ndarray]] | None,
    alpha: float | None = None,
) -> np.ndarray:
    """Held-out mean differences of the cross-validated choice, one row per weight vector.

    ``weights``: resamples x queries (1: as observed; +-1: a sign flip; counts: a bootstrap);
    ``choose_on`` / ``guard``: queries x configurations of (configuration - baseline), 0 where a
    query is not scored; ``evaluate``: (differences, scored mask) per reported subset and measure.
    The choice per fold is the largest weighted sum over the training folds (the best mean: every
    configuration has the same queries), among configurations that pass every guard
    (:func:`guard_pass`; ``guard``: per guarding subset, its differences and its scored mask).
    ``choose_on`` / ``guard`` may be per fold (a dict: nested selection, each fold's choice made on
    its own matrix)."""
    out = np.zeros((weights.shape[0], len(evaluate)))
    rows = np.arange(weights.shape[0])
    for f in np.unique(folds):
        train, test = folds != f, folds == f
        on = choose_on[f] if isinstance(choose_on, dict) else choose_on
        sums = weights[:, train] @ on[train]
        for g_all, mask in guard or ():
            g = g_all[f] if isinstance(g_all, dict) else g_all
            w = weights[:, train]
            ok = guard_pass(w @ g[train], np.abs(w) @ g[train] ** 2, (np.abs(w) @ mask[train])[:, None], alpha)
            sums = np.where(ok, sums, -np.inf)
        pick = np.argmax(sums, axis=1)
        for j, (diff, _) in enumerate(evaluate):
            out[:, j] += (weights[:, test] @ diff[test])[rows, pick]
    counts = np.stack([np.abs(weights) @ mask for _, mask in evaluate], axis=1)
    return out / np.maximum(counts, 1)


def _frame(diffs: pd.DataFrame, queries: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    d = diffs.reindex(queries)
    return d.fillna(0.0).to_numpy(float), d.notna().all(axis=1).to_numpy(float)


def cv_test(
    choose_on: pd.DataFrame,
    folds: pd.Series,
    guard: pd.DataFrame | list[pd.DataFrame] | None = None,
    evaluate: dict[str, pd.DataFrame] | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    bootstrap: int = BOOTSTRAP,
    choose_by_fold: dict | None = None,
    guard_by_fold: dict | list[dict] | None = None,
    alpha: float | None = None,
) -> dict[str, dict]:
    """Selection-aware test of the cross-validated choice against the baseline.

    All frames are queries x configurations of (configuration - baseline) per query, NaN where a
    query has no score (no positives in that subset). ``choose_on``: what the choice maximises;
    ``guard``: a constraint, or a list of them, one per guarding subset (mean not below the
    baseline's; with ``alpha``, not significantly below: :func:`guard_pass`); ``evaluate``: further subsets and
    measures to report for the same choice. ``folds``: the fold of every query. Returns, for
    ``"target"`` (= ``choose_on``) and each ``evaluate`` entry: held-out ``delta``, ``ci95_low``,
    ``ci95_high``, ``p`` (two-sided) and ``queries``. ``choose_by_fold`` / ``guard_by_fold``
    (nested selection): per fold, the differences that fold's choice is made on instead (the
    held-out differences stay ``choose_on``'s); a sign flip or bootstrap weight of a query applies
    to all of its scores at once."""
    queries = folds.index
    names = ["target", *(evaluate or {})]
    frames = [choose_on, *(evaluate or {}).values()]
    evals = [_frame(f[choose_on.columns], queries) for f in frames]
    target = evals[0][0]
    guards = [] if guard is None else [guard] if isinstance(guard, pd.DataFrame) else list(guard)
    by_fold = [] if guard_by_fold is None else [guard_by_fold] if isinstance(guard_by_fold, dict) else guard_by_fold
    g: list = []
    for i, frame in enumerate(guards):
        values, mask = _frame(frame[choose_on.columns], queries)
        per_fold = {f: _frame(m[choose_on.columns], queries)[0] for f, m in by_fold[i].items()} if by_fold else None
        g.append((per_fold if per_fold is not None else values, mask))
    on: np.ndarray | dict = target
    if choose_by_fold is not None:
        on = {f: _frame(m[choose_on.columns], queries)[0] for f, m in choose_by_fold.items()}
    fold = folds.to_numpy()
    args = (on, evals, fold, g or None, alpha)
    observed = _held_out_deltas(np.ones((1, len(queries))), *args)[0]
    rng = np.random.default_rng(seed)
    null_parts: list[np.ndarray] = []
    boot_parts: list[np.ndarray] = []
    for start in range(0, resamples, CHUNK):
        signs = rng.choice([-1.0, 1.0], size=(min(CHUNK, resamples - start), len(queries)))
        null_parts.append(_held_out_deltas(signs, *args))
    for start in range(0, bootstrap, CHUNK):
        counts = rng.multinomial(
            len(queries), np.full(len(queries), 1 / len(queries)), size=min(CHUNK, bootstrap - start)
        ).astype(float)
        boot_parts.append(_held_out_deltas(counts, *args))
    null = np.vstack(null_parts) if null_parts else np.zeros((0, len(names)))
    boot = np.vstack(boot_parts) if boot_parts else np.full((1, len(names)), np.nan)
    out = {}
    for j, name in enumerate(names):
        p = (1 + int(np.sum(np.abs(null[:, j]) >= abs(observed[j]) - 1e-12))) / (1 + len(null))
        low, high = np.percentile(boot[:, j], [2.5, 97.5]) if bootstrap else (np.nan, np.nan)
        out[name] = {
            "delta": float(observed[j]),
            "ci95_low": float(low),
            "ci95_high": float(high),
            "p": p,
            "queries": int(evals[j][1].sum()),
            "resamples": len(null),
            "bootstrap": bootstrap,
        }
    return out


def max_statistic_test(diffs: np.ndarray, chosen: int, seed: int = 0, resamples: int = RESAMPLES) -> dict:
    """p-value of configuration ``chosen``'s mean lead over the baseline, corrected for having been
    the best of ``diffs.shape[1]`` candidates. ``diffs``: queries x configurations of (configuration
    - baseline) per query. One-sided: a lead as large as the chosen one, by any candidate."""
    d = np.asarray(diffs, float)
    observed = float(d[:, chosen].mean())
    rng = np.random.default_rng(seed)
    exceed = 0
    for start in range(0, resamples, CHUNK):
        signs = rng.choice([-1.0, 1.0], size=(min(CHUNK, resamples - start), d.shape[0]))
        exceed += int(np.sum((signs @ d / d.shape[0]).max(axis=1) >= observed - 1e-12))
    return {
        "candidates": int(d.shape[1]),
        "queries": int(d.shape[0]),
        "delta": observed,
        "p_max_statistic": (1 + exceed) / (1 + resamples),
    }


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (statsmodels' ``multipletests``), in the order given."""
    from statsmodels.stats.multitest import multipletests  # heavy: deferred to where p-values are adjusted

    return multipletests(np.asarray(pvalues, float), method="holm")[1] if len(pvalues) else np.array([])
