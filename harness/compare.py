"""Paired significance tests of systems against a baseline, per metric and qrels subset.

In the manner of PyTerrier's ``Experiment(baseline=..., correction="holm")``: for each system,
metric and subset (ALL / IN / OUT), over the queries both systems are scored on:

* mean, delta to the baseline, wins / losses / ties per query;
* paired t-test (``scipy.stats.ttest_rel``) and Wilcoxon signed-rank (``scipy.stats.wilcoxon``);
* Holm correction (``statsmodels.stats.multitest.multipletests``) over the compared systems, per
  metric, subset and test, and ``reject`` at ``alpha``;
* effect size (Cohen's d of the paired differences) and the 95% t confidence interval of the delta.

    python -m harness.compare --baseline doc_bm25 doc_dense rrf_doc [--results $HARNESS_ROOT/runs/results.jsonl]
    python -m harness.compare --baseline doc_bm25 rrf_doc --dataset local --where bm25.k1=0.9 --where fusion.k=60

Systems are named by experiment name, run tag or scores key as in the results table; ``--dataset``
and ``--where KEY=VALUE`` (results columns or dotted config keys) pick among rows of one name, and
rows of one configuration run again count once (the newest).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from . import data, stage
from .data import schema as S
from .results import find, scores_dir
from .store import default_results


def paired(base: np.ndarray, other: np.ndarray) -> dict:
    from scipy import stats  # heavy (half a second to import): deferred to where systems are compared

    diff = other - base
    n = len(diff)
    sd = diff.std(ddof=1) if n > 1 else 0.0
    t = stats.ttest_rel(other, base) if n > 1 and sd > 0 else None
    nonzero = diff[diff != 0]
    w = stats.wilcoxon(other, base) if len(nonzero) > 0 else None
    half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n) if n > 1 else float("nan")
    return {
        "queries": n,
        "mean": float(other.mean()),
        "baseline_mean": float(base.mean()),
        "delta": float(diff.mean()),
        "wins": int((diff > 0).sum()),
        "losses": int((diff < 0).sum()),
        "ties": int((diff == 0).sum()),
        "p_t": float(t.pvalue) if t is not None else 1.0,
        "p_wilcoxon": float(w.pvalue) if w is not None else 1.0,
        "cohens_d": float(diff.mean() / sd) if sd > 0 else 0.0,
        "ci95_low": float(diff.mean() - half),
        "ci95_high": float(diff.mean() + half),
    }


def compare(per_query: dict[str, pd.DataFrame], baseline: str, alpha: float = 0.05) -> pd.DataFrame:
    """``per_query``: system -> table (subset, query_id, measure, value). One row per system, subset, measure."""
    from statsmodels.stats.multitest import multipletests  # heavy: deferred to where systems are compared

    if baseline not in per_query:
        raise KeyError(f"baseline {baseline!r} is not among the systems {sorted(per_query)}")
    base = per_query[baseline].set_index(["subset", "measure", "query_id"])["value"].sort_index()
    rows = []
    for name, table in per_query.items():
        if name == baseline:
            continue
        other = table.set_index(["subset", "measure", "query_id"])["value"].sort_index()
        for (subset, measure), b in base.groupby(level=[0, 1], sort=False):
            o = (
                other.loc[(subset, measure)]
                if (subset, measure) in other.index.droplevel(2)
                else pd.Series(dtype=float)
            )
            b = b.droplevel([0, 1])
            common = b.index.intersection(o.index)
            rows.append(
                {
                    "system": name,
                    "baseline": baseline,
                    "subset": subset,
                    "measure": measure,
                    **paired(b.loc[common].to_numpy(float), o.loc[common].to_numpy(float)),
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    for test in ("p_t", "p_wilcoxon"):
        out[f"{test}_holm"] = np.nan
        out[f"reject_{test}"] = False
        for _, idx in out.groupby(["subset", "measure"]).groups.items():
            reject, corrected, _, _ = multipletests(out.loc[idx, test], alpha=alpha, method="holm")
            out.loc[idx, f"{test}_holm"] = corrected
            out.loc[idx, f"reject_{test}"] = reject
    return out


def per_query_by_domain(
    per_query: dict[str, pd.DataFrame], baseline: str, queries: pd.DataFrame, measure: str, subset: str = "ALL"
) -> pd.DataFrame:
    """Wins and losses against the baseline broken down by the query's IPC3 codes (a query with two
    codes counts in both)."""

    codes = queries[[S.QUERY_ID, S.IPC3]].rename(columns={S.QUERY_ID: "query_id"}).explode(S.IPC3)
    base = per_query[baseline]
    base = base[(base.subset == subset) & (base.measure == measure)].set_index("query_id")["value"]
    rows = []
    for name, t in per_query.items():
        if name == baseline:
            continue
        o = t[(t.subset == subset) & (t.measure == measure)].set_index("query_id")["value"]
        diff = (o - base).dropna().rename("delta").reset_index()
        m = diff.merge(codes, on="query_id")
        for code, g in m.groupby(S.IPC3):
            rows.append(
                {
                    "system": name,
                    "ipc3": code,
                    "queries": len(g),
                    "wins": int((g.delta > 0).sum()),
                    "losses": int((g.delta < 0).sum()),
                    "mean_delta": float(g.delta.mean()),
                }
            )
    return pd.DataFrame(rows)


def plot_differences(per_query: dict[str, pd.DataFrame], baseline: str, path: Path, measure: str, subset="ALL"):
    """Sorted per-query differences to the baseline, one panel per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [s for s in per_query if s != baseline]
    fig, axes = plt.subplots(len(others), 1, figsize=(8, 2.6 * max(1, len(others))), squeeze=False)
    base = per_query[baseline]
    base = base[(base.subset == subset) & (base.measure == measure)].set_index("query_id")["value"]
    for ax, name in zip(axes[:, 0], others):
        t = per_query[name]
        d = (
            (t[(t.subset == subset) & (t.measure == measure)].set_index("query_id")["value"] - base)
            .dropna()
            .sort_values()
        )
        ax.bar(range(len(d)), d.to_numpy(), color=np.where(d.to_numpy() >= 0, "tab:green", "tab:red"), width=1.0)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(f"{name} - {baseline}: {measure} ({subset}), per query")
        ax.set_xticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_per_query(results: Path, names: list[str], dataset: str | None = None, where=()) -> dict[str, pd.DataFrame]:
    """Per-query tables of the named systems (experiment name, run folder or scores key; filtered
    by ``dataset`` and ``where``, see :func:`harness.results.find`). Systems scored on other data
    or other judgments cannot be paired: that is an error, not a p-value."""

    return per_query_tables({name: scores_dir(results, find(results, name, dataset, where)) for name in names})


def per_query_tables(folders: dict[str, Path]) -> dict[str, pd.DataFrame]:
    """Per-query tables of scores folders, refusing to pair systems of different data or judgments."""

    judged = {}
    for name, folder in folders.items():  # the scores' dataset parent (content key) and qrels digest
        meta = json.loads((folder / "meta.json").read_text())
        judged[name] = (
            next(p["key"] for p in meta["parents"] if p["kind"] == stage.DATASET),
            meta["params"].get("qrels"),
        )
    if len(set(judged.values())) > 1:
        raise SystemExit(
            f"the systems were scored on different data or judgments ({judged}); paired tests need the "
            f"same queries and qrels. Fix: compare systems of one dataset (see the results table's "
            f"dataset column and scores_key)."
        )
    return {name: pd.read_csv(folder / "per_query.csv", dtype={"query_id": str}) for name, folder in folders.items()}


def _queries_of(results: Path, name: str, dataset=None, where=()):
    """The queries (with IPC3 codes) of the dataset an experiment ran on, from its manifest."""

    manifest = json.loads((scores_dir(results, find(results, name, dataset, where)) / "manifest.json").read_text())
    cfg = manifest["config"]
    try:
        return data.load(OmegaConf.create(cfg["dataset"]), Path(results).resolve().parent.parent).queries
    except Exception as e:  # the data moved: the per-query table and tests are still written
        print(f"no IPC3 breakdown: cannot reload the dataset ({e})", file=sys.stderr)
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("systems", nargs="+", help="experiments to compare with the baseline")
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--results", default=None, type=Path, help="default: $HARNESS_ROOT/runs/results.jsonl")
    ap.add_argument("--dataset", default=None, help="only rows of this dataset (name or dataset.path)")
    ap.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only rows with this value (results column or dotted config key); repeatable",
    )
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for compare.csv, per_query.csv, by_domain.csv and per_query_differences.png",
    )
    a = ap.parse_args(argv)
    if not 0 < a.alpha < 1:
        ap.error(f"--alpha {a.alpha}: expected a significance level between 0 and 1 (e.g. 0.05)")

    a.results = a.results or default_results()
    names = [a.baseline] + [s for s in a.systems if s != a.baseline]
    if len(names) < 2:
        ap.error(
            f"only the baseline {a.baseline!r} was named: nothing to compare it with. Fix: name at least one "
            f"other system."
        )
    pq = load_per_query(a.results, names, a.dataset, a.where)
    table = compare(pq, a.baseline, a.alpha)
    cols = [
        "system",
        "subset",
        "measure",
        "mean",
        "baseline_mean",
        "delta",
        "wins",
        "losses",
        "p_t",
        "p_t_holm",
        "reject_p_t",
        "p_wilcoxon",
        "p_wilcoxon_holm",
        "cohens_d",
        "ci95_low",
        "ci95_high",
        "queries",
    ]
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(table[cols].to_string(index=False))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(a.out / "compare.csv", index=False)
        pd.concat([t.assign(system=s) for s, t in pq.items()]).to_csv(a.out / "per_query.csv", index=False)
        primary = pq[a.baseline]["measure"].iloc[0]  # the baseline's metrics[0], first in its per-query table
        plot_differences(pq, a.baseline, a.out / "per_query_differences.png", primary)
        queries = _queries_of(a.results, a.baseline, a.dataset, a.where)
        if queries is not None:
            per_query_by_domain(pq, a.baseline, queries, primary).to_csv(a.out / "by_domain.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
