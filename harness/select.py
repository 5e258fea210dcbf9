"""Honest selection: choose a sweep's configuration by k-fold cross-validation over queries.

    python -m harness.select sweep=beyond folds=5 metric=nDCG@100 subset=ALL
    python -m harness.select sweep=beyond subset=OUT guard=ALL --dataset local   # OUT, not losing ALL

Picking the best of a grid on the very queries it is scored on reports an optimistic number: some
of the winner's lead over the others is luck on those queries. Cross-validation measures that
luck. Queries are split into ``folds`` folds (fixed ``seed``), stratified by whether a query has
OUT-domain positives, so every fold holds its share of cross-domain queries. On each fold the
configuration with the best mean on the *other* folds is chosen and scored on the held-out fold;
the pooled held-out scores are the cross-validated estimate. Next to it: the best-of-grid figure
(the same choice made on all queries) and the gap between them, the optimism of picking on test
queries.

``guard=ALL`` makes the choice constrained: the best ``subset`` mean among configurations whose
``guard`` mean is at least the baseline's on the same queries (e.g. more OUT-domain prior art
without losing overall quality). ``guard=ALL,IN`` guards several subsets at once, and
``guard_alpha=0.05`` loosens "at least the baseline's" to "not significantly below it" (a
one-sided paired t-test per guarding subset, :func:`harness.significance.guard_pass`): the rule
docs/rechoice.md states for the recommended configuration.

Significance (:mod:`harness.significance`). The headline ``held-out test:`` pairs the
cross-validated choice's out-of-fold scores (each query scored by the configuration chosen
without it) with the baseline's (``rrf_doc`` with K=60 and no lever, by default) on the same
queries: delta, 95% CI, paired t and randomisation p. Testing the best-of-grid winner on the
queries that chose it would be the winner's curse; that lead is shown only with a p-value
corrected for the number of candidates (max-statistic sign-flip test). The held-out scores are
also compared per subset and measure, Holm-corrected over that family of tests
(:func:`harness.compare.paired`).

Only finished score artifacts are read (each experiment's ``per_query.csv``): nothing is searched
again. The sweep's experiments are the rows of its report (``runs/report/<sweep>/results.csv``),
narrowed by ``--dataset`` and ``--where KEY=VALUE``; a configuration run twice counts once (newest).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import stage
from .compare import paired, per_query_tables
from .files import write_text_atomic
from .folds import from_scores, query_folds, stratified_folds  # noqa: F401  (stratified_folds: re-exported)
from .results import filter_rows, find, newest, read_rows, scores_dir
from .significance import cv_test, guard_pass, holm, max_statistic_test
from .store import default_results

SUBSETS = ("ALL", "IN", "OUT")
SEARCH_LEVERS = ("prf", "dense_prf", "query_reduction")  # config groups that change a search


def baseline_filters() -> tuple[str, ...]:
    """The paper-style baseline: rrf_doc, K=60, unweighted, no search lever and no transform stage
    of this project (each registered transform's group null: learning to rank, re-ranking, ...)."""
    transforms = [f"{s.group}=null" for s in stage.stages() if s.inner is not None and s.group]
    return (
        "fusion.k=60",
        "fusion.method=rrf",
        "fusion.weights=null",
        *(f"{g}=null" for g in SEARCH_LEVERS),
        *transforms,
    )


# ----------------------------------------------------------------------------- pure functions
def _guards(guard) -> list[pd.DataFrame]:
    return [] if guard is None else [guard] if isinstance(guard, pd.DataFrame) else list(guard)


def passing(queries, guard, baseline: str, alpha: float | None = None) -> pd.Series:
    """Which configurations pass every guard against ``baseline`` on ``queries`` (:func:`guard_pass`)."""
    ok = None
    for g in _guards(guard):
        d = g.loc[g.index.intersection(queries)].sub(g[baseline], axis=0).dropna()
        passed = pd.Series(
            guard_pass(d.sum().to_numpy(), (d**2).sum().to_numpy(), np.full(d.shape[1], float(len(d))), alpha),
            index=d.columns,
        )
        ok = passed if ok is None else ok & passed
    return ok


def choose(scores: pd.DataFrame, queries, guard=None, baseline: str | None = None, alpha: float | None = None) -> str:
    """The column of ``scores`` (query x configuration) with the best mean over ``queries``.
    With ``guard`` (a matrix of another subset, or a list of them): only configurations that pass
    each guard against ``baseline`` on those queries qualify (:func:`guard_pass`: a mean at least
    the baseline's, or with ``alpha`` not significantly below it; the baseline always passes).
    Ties: the first column."""
    means = scores.loc[scores.index.intersection(queries)].mean()
    if guard is None:
        return str(means.idxmax())
    assert baseline is not None, "a guard needs a baseline"
    ok = passing(queries, guard, baseline, alpha)[means.index]
    return str(means[ok.to_numpy()].idxmax())


def cross_validate(
    scores: pd.DataFrame,
    folds: pd.Series,
    guard=None,
    baseline: str | None = None,
    train: dict | None = None,
    train_guard: dict | list[dict] | None = None,
    alpha: float | None = None,
) -> dict:
    """k-fold selection (module docstring). ``scores``: queries x configurations of the target
    subset (a query without positives in it is absent); ``folds``: fold of every query.
    ``train`` / ``train_guard`` (nested selection): per fold f, the matrices fold f's choice is
    made on, where a learned configuration's scores come from models that never saw f's labels
    (:func:`nested_matrix`); by default the choice is made on ``scores`` / ``guard``."""
    guards = _guards(guard)
    by_fold = [] if train_guard is None else [train_guard] if isinstance(train_guard, dict) else list(train_guard)
    held, chosen, picks = [], [], {}
    held_guard: list[list] = [[] for _ in guards]
    held_base: list[list] = [[] for _ in guards]
    for f in sorted(folds.unique()):
        train_q = folds.index[folds != f]
        test = folds.index[folds == f]
        on = train[f] if train is not None else scores
        on_guard = [m[f] for m in by_fold] if by_fold else guards
        pick = choose(on, train_q, on_guard or None, baseline, alpha)
        chosen.append(pick)
        picks.update(dict.fromkeys(test, pick))
        held.append(scores.loc[scores.index.intersection(test), pick])
        for i, g in enumerate(guards):
            held_guard[i].append(g.loc[g.index.intersection(test), pick])
            held_base[i].append(g.loc[g.index.intersection(test), baseline])
    pooled = pd.concat(held)
    selected = choose(
        scores, folds.index, guards or None, baseline, alpha
    )  # every query (a guard reads its own subset's)
    best = float(scores[selected].mean())
    estimate = float(pooled.mean())
    out = {
        "cv_estimate": estimate,
        "best_of_grid": best,
        "optimism_gap": best - estimate,
        "selected": selected,
        "fold_choices": chosen,
        "queries": int(len(pooled)),
        "held_out": pooled,
        "picks": pd.Series(picks, name="configuration").sort_index(),
    }
    if guards:  # does the constraint hold on held-out queries too? (per guarding subset, in order)
        out["guard_cv_estimate"] = [float(pd.concat(h).mean()) for h in held_guard]
        out["guard_baseline"] = [float(pd.concat(b).mean()) for b in held_base]
    return out


def held_out_table(tables: dict[str, pd.DataFrame], picks: pd.Series) -> pd.DataFrame:
    """Per-query scores (every subset and measure) of the cross-validated choice: each query as
    scored by the configuration chosen on the other folds (``picks``: query -> configuration)."""
    parts = [tables[name][tables[name]["query_id"].isin(qs.index)] for name, qs in picks.groupby(picks)]
    return pd.concat(parts, ignore_index=True)


def selection_tests(
    tables: dict[str, pd.DataFrame],
    target: pd.DataFrame,
    guard,
    fold: pd.Series,
    cv: dict,
    baseline: str,
    seed: int = 0,
    train: dict | None = None,
    train_guard: dict | list[dict] | None = None,
    alpha: float | None = None,
) -> dict:
    """The held-out test of the cross-validated choice against the baseline, for the selection's
    subset and measure and for every other one, Holm-corrected over those, and the best-of-grid
    lead corrected for the number of candidates (:mod:`harness.significance`). ``train`` /
    ``train_guard``: the nested choice's matrices (:func:`cross_validate`)."""

    def diffs(m):
        return m.sub(m[baseline], axis=0)

    judged = tables[baseline]
    common = set.intersection(
        *[set(t[["subset", "measure"]].itertuples(index=False, name=None)) for t in tables.values()]
    )  # measures every configuration was scored with
    pairs = [
        p for p in judged[["subset", "measure"]].drop_duplicates().itertuples(index=False, name=None) if p in common
    ]
    res = cv_test(
        diffs(target),
        fold,
        [diffs(g) for g in _guards(guard)] or None,
        {f"{m}/{s}": diffs(matrix(tables, s, m)) for s, m in pairs},
        seed,
        choose_by_fold=None if train is None else {f: diffs(x) for f, x in train.items()},
        guard_by_fold=None
        if train_guard is None
        else [
            {f: diffs(x) for f, x in tg.items()}
            for tg in ([train_guard] if isinstance(train_guard, dict) else train_guard)
        ],
        alpha=alpha,
    )
    held = held_out_table(tables, cv["picks"])
    rows = []
    for s, m in pairs:
        h = held[(held["subset"] == s) & (held["measure"] == m)].set_index("query_id")["value"]
        b = judged[(judged["subset"] == s) & (judged["measure"] == m)].set_index("query_id")["value"]
        common = b.index.intersection(h.index)
        base = paired(b.loc[common].to_numpy(float), h.loc[common].to_numpy(float))
        rows.append(
            {
                "subset": s,
                "measure": m,
                **{k: base[k] for k in ("queries", "mean", "baseline_mean", "wins", "losses", "ties")},
                **{k: res[f"{m}/{s}"][k] for k in ("delta", "ci95_low", "ci95_high", "p")},
            }
        )
    tests = pd.DataFrame(rows)
    tests["p_holm"] = holm(tests["p"])
    head = {
        **res["target"],
        "mean": cv["cv_estimate"],
        "baseline_mean": float(target.loc[cv["held_out"].index, baseline].mean()),
    }
    grid = max_statistic_test(diffs(target).to_numpy(), list(target.columns).index(cv["selected"]), seed)
    return {"held_out_test": head, "best_of_grid_test": grid, "tests": tests.to_dict("records")}


def matrix(tables: dict[str, pd.DataFrame], subset: str, metric: str) -> pd.DataFrame:
    """Queries x configurations for one subset and measure (queries scored in that subset only)."""
    cols = {}
    for name, t in tables.items():
        sel = t[(t["subset"] == subset) & (t["measure"] == metric)]
        if sel.empty:
            raise SystemExit(
                f"{name}: no {metric} scores for {subset}. Fix: metric= one of {sorted(t['measure'].unique())}."
            )
        cols[name] = sel.set_index("query_id")["value"]
    m = pd.DataFrame(cols)
    if m.isna().any().any():
        raise SystemExit(f"the configurations were scored on different queries for {subset}; select needs one set.")
    return m.sort_index()


def learns_here(row: dict) -> bool:
    """Whether a row's ranking was learned from the judgments it is scored on (cross-fitted LTR;
    a model trained on another dataset, ``ltr.train``, was not)."""
    label = row.get("ltr")  # harness.ltr.ltr_label: names the training dataset of a transferred model
    return isinstance(label, str) and bool(label) and ",train=" not in label


def nested_matrix(tables: dict, nested: dict, subset: str, metric: str, fold: int, folds: pd.Series) -> pd.DataFrame:
    """Queries x configurations that fold ``fold``'s choice is made on: a learned configuration's
    column holds its nested scores for that outer fold (models trained without fold ``fold``),
    NaN on fold ``fold``'s own queries; the other columns are their scores as they are."""
    m = matrix(tables, subset, metric)
    for name, t in nested.items():
        sel = t[(t["outer_fold"] == fold) & (t["subset"] == subset) & (t["measure"] == metric)]
        col = sel.set_index("query_id")["value"].reindex(m.index)
        train_q = m.index[(folds.reindex(m.index) != fold).to_numpy()]
        if col.loc[train_q].isna().any():
            raise SystemExit(
                f"{name}: its nested scores for outer fold {fold} lack {int(col.loc[train_q].isna().sum())} of the "
                f"other folds' queries in {subset}: it was cross-fitted over other folds than select's. Fix: "
                f"select with folds= and seed= equal to its ltr.folds and ltr.seed."
            )
        m[name] = col
    return m


def load_nested(results: Path, rows: list[dict], folds: int, seed: int) -> dict[str, pd.DataFrame]:
    """The nested per-query scores of the rows learned from these judgments; a row without them,
    or cross-fitted over other folds than select's, is refused with the fix."""

    out = {}
    for r in rows:
        if not learns_here(r):
            continue
        t = r["config"]["ltr"]
        if int(t.get("folds", folds)) != folds or int(t.get("seed", seed)) != seed:
            raise SystemExit(
                f"select: {r['tag']} was cross-fitted over ltr.folds={t.get('folds')} ltr.seed={t.get('seed')}, "
                f"select over folds={folds} seed={seed}: a fold's labels would train the models its choice is "
                f"made on. Fix: select with folds={t.get('folds')} seed={t.get('seed')}, or --where ltr=null."
            )
        path = scores_dir(results, r) / "nested_per_query.csv"
        if not path.exists():
            raise SystemExit(
                f"select: {r['tag']} learned from these judgments but has no nested scores ({path}): its "
                f"out-of-fold scores came from models that saw the other folds, so choosing on them lets a "
                f"fold's labels pick its own configuration. Fix: rerun the sweep (ltr.nested=true, the "
                f"default, writes them), or --where ltr=null to leave learned rows out."
            )
        out[r["tag"]] = pd.read_csv(path, dtype={"query_id": str})
    return out


# ----------------------------------------------------------------------------- reading a sweep
def _identifying(row: dict) -> bool:
    """A row that learned which documents are cited: LTR features the identity check flagged
    (let through by ltr.allow_identifying), or a fine-tuned encoder that failed its identity check
    (harness.tuned). Reported, never chosen."""
    return bool(row.get("ltr_identifying")) or str(row.get("finetune_identity", "")).startswith("FAILED")


def sweep_rows(results: Path, sweep: str, dataset=None, where=()) -> list[dict]:
    report = (
        Path(results).resolve().parent / "report" / Path(sweep).stem / "results.csv"
    )  # a name or a sweep file's path, as harness.sweep takes
    if not report.exists():
        raise SystemExit(
            f"{report}: no report of sweep {sweep!r}. Fix: run it first (python -m harness.sweep sweep={sweep} ...)."
        )
    keys = set(pd.read_csv(report, usecols=["scores_key"], dtype=str)["scores_key"])
    rows = newest(filter_rows(read_rows(results), dataset, where, keys))
    if not rows:
        raise SystemExit(
            f"sweep {sweep}: no results rows with dataset={dataset} {list(where)}. Fix: loosen the filters."
        )
    return rows


def load(results: Path, rows: list[dict], baseline_row: dict) -> dict[str, pd.DataFrame]:
    folders = {r["tag"]: scores_dir(results, r) for r in rows}
    folders.setdefault(baseline_row["tag"], scores_dir(results, baseline_row))
    missing = [str(f) for f in folders.values() if not (f / "per_query.csv").exists()]
    if missing:
        raise SystemExit(
            f"no per-query scores in {missing[:3]}. Fix: rerun the sweep (it only reads cached artifacts)."
        )
    return per_query_tables(folders)


def select(
    results: Path,
    sweep: str,
    folds: int = 5,
    metric: str = "nDCG@100",
    subset: str = "ALL",
    guard: str | None = None,
    baseline: str = "rrf_doc",
    baseline_where=None,
    seed: int = 0,
    dataset=None,
    where=(),
    guard_alpha: float | None = None,
) -> dict:
    guard_subsets = [g for g in (guard or "").split(",") if g]
    if subset not in SUBSETS or any(g not in SUBSETS for g in guard_subsets):
        raise SystemExit(f"subset={subset} guard={guard}: expected one of {SUBSETS} (guard: a comma-separated list).")
    if guard_alpha is not None and not (0 < guard_alpha < 1 and guard_subsets):
        raise SystemExit(f"guard_alpha={guard_alpha}: expected a level in (0, 1), with a guard= to apply it to.")
    baseline_where = baseline_filters() if baseline_where is None else baseline_where
    rows = sweep_rows(results, sweep, dataset, where)
    # A row whose ranker learned document identities (ltr.allow_identifying let it through) learned
    # part of the answer key: it is reported, never chosen.
    identifying = [r["tag"] for r in rows if _identifying(r)]
    rows = [r for r in rows if not _identifying(r)]
    if not rows:
        raise SystemExit(
            f"sweep {sweep}: every row learned document identities (identifying LTR features, or a fine-tuned encoder that failed its identity check); nothing to choose from."
        )
    keys = {r["scores_key"] for r in rows}
    try:
        base = find(results, baseline, dataset, list(where) + list(baseline_where), keys)
    except SystemExit:
        base = find(results, baseline, dataset, list(where) + list(baseline_where))
    tables = load(results, rows, base)
    target = matrix(tables, subset, metric)
    guard_m = [matrix(tables, g, metric) for g in guard_subsets] or None
    all_q = matrix(tables, "ALL", metric).index
    judged = tables[base["tag"]]  # every table holds the same queries per subset (matrix checks it)
    _, with_out = from_scores(judged)
    fold = query_folds(all_q, with_out, folds, seed)
    nested = load_nested(results, rows, folds, seed)
    train = train_guard = None
    if nested:  # nested selection: fold f's choice is made on scores no model trained on f made
        fs = sorted(fold.unique())
        train = {f: nested_matrix(tables, nested, subset, metric, f, fold) for f in fs}
        if guard_subsets:
            train_guard = [{f: nested_matrix(tables, nested, g, metric, f, fold) for f in fs} for g in guard_subsets]
    cv = cross_validate(target, fold, guard_m, base["tag"] if guard else None, train, train_guard, guard_alpha)
    significance = selection_tests(
        tables, target, guard_m, fold, cv, base["tag"], seed, train, train_guard, guard_alpha
    )
    cv.pop("picks"), cv.pop("held_out")
    passed = passing(fold.index, guard_m, base["tag"], guard_alpha) if guard_m else None  # on every query
    by_tag = {r["tag"]: r for r in rows + [base]}
    chosen = by_tag[cv["selected"]]
    return {
        "sweep": sweep,
        "metric": metric,
        "subset": subset,
        "guard": guard,
        "guard_alpha": guard_alpha,
        "folds": folds,
        "seed": seed,
        "configurations": len(tables),
        "nested": sorted(nested),
        "left_out_identifying": identifying,
        **cv,
        "selected_experiment": chosen.get("experiment"),
        "selected_scores_key": chosen["scores_key"],
        "selected_means": {
            f"{m}/{s}": chosen.get(f"{m}/{s}") for m in chosen.get("metrics", [metric]) for s in SUBSETS
        },
        "baseline": base["tag"],
        "baseline_scores_key": base["scores_key"],
        "baseline_means": {f"{m}/{s}": base.get(f"{m}/{s}") for m in base.get("metrics", [metric]) for s in SUBSETS},
        "fold_choice_counts": pd.Series(cv["fold_choices"]).value_counts().to_dict(),
        **significance,
        "selected_config": chosen.get("config"),
        # each configuration's means on all queries, and whether it passes the guard there
        "candidates": [
            {
                "tag": t,
                "target_mean": float(target[t].mean()),
                **({f"{g}_mean": float(m[t].mean()) for g, m in zip(guard_subsets, guard_m)} if guard_m else {}),
                "passes_guard": bool(passed[t]) if passed is not None else None,
            }
            for t in target.columns
        ],
    }


def format_summary(out: dict) -> str:
    g = ""
    if out["guard"]:
        g = f", guard {out['guard']} >= baseline"
        if out.get("guard_alpha") is not None:
            g = f", guard {out['guard']} not significantly below baseline (one-sided paired t, alpha {out['guard_alpha']})"
    h, b = out["held_out_test"], out["best_of_grid_test"]
    lines = [
        f"select: sweep {out['sweep']}, {out['configurations']} configurations, {out['folds']}-fold CV (seed "
        f"{out['seed']}), {out['metric']} on {out['subset']}{g}",
        f"held-out test: delta {h['delta']:+.4f} (95% CI {h['ci95_low']:+.4f} to {h['ci95_high']:+.4f}), "
        f"p = {h['p']:.3g}; {out['metric']} {out['subset']} {h['mean']:.4f} vs {h['baseline_mean']:.4f} on "
        f"{h['queries']} queries, each scored by the configuration chosen without it, vs {out['baseline']} "
        f"(paired randomisation test of the whole cross-validated choice, {h['resamples']:,} sign flips; "
        f"bootstrap CI, {h['bootstrap']:,} resamples)",
        f"  cross-validated estimate  {out['cv_estimate']:.4f}  ({out['queries']} queries)",
        f"  best of grid              {out['best_of_grid']:.4f}  (chosen on these queries: optimistic)",
        f"  optimism gap              {out['optimism_gap']:+.4f}",
        f"  best of grid vs baseline  delta {b['delta']:+.4f}, p = {b['p_max_statistic']:.3g} corrected for "
        f"{b['candidates']} candidates (max-statistic sign-flip test, one-sided)",
    ]
    for name, est, base in zip(
        (out.get("guard") or "").split(","), out.get("guard_cv_estimate") or [], out.get("guard_baseline") or []
    ):
        lines.append(f"  guard {name:4s} held out        {est:.4f} vs baseline {base:.4f} on the same queries")
    if out.get("nested"):
        lines.append(
            f"  nested                    {len(out['nested'])} learned rows: each fold's choice made on scores of "
            f"models trained without that fold"
        )
    if out.get("left_out_identifying"):
        lines.append(
            f"  left out                  {len(out['left_out_identifying'])} rows that learned document identities (LTR features or fine-tuned encoders)"
        )
    if out.get("guard"):
        passed = [c for c in out.get("candidates", []) if c.get("passes_guard")]
        lines.append(f"  pass the guard on all queries: {len(passed)} of {len(out.get('candidates', []))}")
    lines += [
        f"  selected (on all queries) {out['selected']}",
        f"  chosen per fold           {out['fold_choice_counts']}",
        f"  held-out tests of the cross-validated choice vs {out['baseline']}, every subset and measure "
        f"(randomisation p, Holm over {len(out['tests'])} tests):",
    ]
    for t in out["tests"]:
        lines.append(
            f"    {t['measure']:10s} {t['subset']:4s} {t['mean']:.4f} vs {t['baseline_mean']:.4f} "
            f"(delta {t['delta']:+.4f}, CI {t['ci95_low']:+.4f} to {t['ci95_high']:+.4f}, {t['wins']}/"
            f"{t['losses']} wins/losses)  p {t['p']:.3g} -> Holm {t['p_holm']:.3g}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="python -m harness.select sweep=NAME [folds=5] [metric=nDCG@100] "
        "[subset=ALL|IN|OUT] [guard=ALL[,IN]] [guard_alpha=0.05] [baseline=rrf_doc] [seed=0] "
        "[--dataset D] [--where KEY=VALUE ...]",
    )
    ap.add_argument(
        "settings", nargs="*", help="KEY=VALUE: sweep, folds, metric, subset, guard, guard_alpha, baseline, seed"
    )
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--where", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--baseline-where",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help=f"picks the baseline row (default: {' '.join(baseline_filters())})",
    )
    ap.add_argument("--results", type=Path, default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    ap.add_argument(
        "--out", type=Path, default=None, help="JSON file (default runs/report/<sweep>/select-<subset>.json)"
    )
    a = ap.parse_args(argv)
    known = {"sweep", "folds", "metric", "subset", "guard", "guard_alpha", "baseline", "seed"}
    opts = {}
    for s in a.settings:
        k, _, v = s.partition("=")
        if k not in known or not v:
            ap.error(f"{s!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        opts[k] = v
    if "sweep" not in opts:
        ap.error("sweep=NAME is required")
    for k in ("folds", "seed"):
        if k in opts and not opts[k].lstrip("-").isdigit():
            ap.error(f"{k}={opts[k]!r}: expected an integer")
    if int(opts.get("seed", 0)) < 0:
        ap.error(f"seed={opts['seed']}: expected an integer >= 0 (it seeds the folds and the resampling)")

    try:
        alpha = float(opts["guard_alpha"]) if "guard_alpha" in opts else None
    except ValueError:
        ap.error(f"guard_alpha={opts['guard_alpha']!r}: expected a number in (0, 1), e.g. 0.05")
    results = a.results or default_results()
    try:
        out = select(
            results,
            opts["sweep"],
            int(opts.get("folds", 5)),
            opts.get("metric", "nDCG@100"),
            opts.get("subset", "ALL"),
            opts.get("guard"),
            opts.get("baseline", "rrf_doc"),
            a.baseline_where if a.baseline_where is not None else baseline_filters(),
            int(opts.get("seed", 0)),
            a.dataset,
            a.where,
            alpha,
        )
    except ValueError as e:
        print(f"select: {e}", file=sys.stderr)
        return 2
    print(format_summary(out))
    path = (
        a.out or Path(results).resolve().parent / "report" / Path(opts["sweep"]).stem / f"select-{out['subset']}.json"
    )

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(out, indent=1, default=str))
    except OSError as e:
        print(
            f"select: the summary above is not saved: {path} cannot be written ({e.strerror or e}). Fix: --out "
            f"PATH in a writable folder.",
            file=sys.stderr,
        )
        return 1
    print(f"  written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
