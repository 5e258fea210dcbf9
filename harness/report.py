"""Results of a sweep: one table (CSV and Markdown) and PNG plots.

Columns: the config (views, granularity, passage length, aggregation, backend, fusion and K, PRF,
fusion weights, re-ranking),
every measure of ``metrics`` for ALL / IN / OUT, the OUT/ALL retention of the primary measure
(``metrics[0]``, default nDCG@100: how much of a system's quality survives when the prior art is
in another domain), ``pareto`` (no other system is better on both IN and OUT), and query time.
Rows are sorted by the primary measure; plots use it too:

* ``in_vs_out.png``: IN against OUT, one point per system, by kind of system; the solid line is
  the Pareto front (what OUT costs in IN), the dashed line OUT = IN. Points far below it lose
  most of their quality across domains;
* ``passage_length.png``: ALL over passage length, one line per aggregation, one panel per
  backend (document level drawn as a horizontal reference).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from . import regress
from .naming import system
from .report_page import command, pareto, write_page
from .results import read_rows, table
from .store import Store, write_text_atomic

CONFIG_COLS = [
    "experiment",
    "dataset",
    "query_fields",
    "target_fields",
    "granularity",
    "passage_length",
    "passage_stride",
    "aggregation",
    "backend",
    "fusion",
    "fusion_k",
    "query_views",
    "prf",
    "fusion_weights",
    "query_reduction",
    "search_k",
    "ltr",
    "ltr_identifying",
    "finetune_train",  # a fine-tuned encoder (harness.tuned): where it trained, and its identity check
    "finetune_identity",
    "rerank",
    "rerank_weight",
    "bm25_k1",
    "bm25_b",
    "encoder",
]


def metrics_of(rows: list[dict]) -> list[str]:
    """The measures of a set of rows, in the order of the first row's ``metrics`` (the primary first)."""
    for r in rows:
        if r.get("metrics"):
            return list(r["metrics"])
    return ["nDCG@100", "R@100"]


def metric_cols(metrics: list[str]) -> list[str]:
    return [f"{m}/{s}" for m in metrics for s in ("ALL", "IN", "OUT")]


def results_frame(rows: list[dict]) -> pd.DataFrame:
    df = table(rows)
    if df.empty:
        return df
    metrics = metrics_of(rows)
    primary = metrics[0]
    retention = f"OUT/ALL {primary}"
    df[retention] = df[f"{primary}/OUT"] / df[f"{primary}/ALL"].where(df[f"{primary}/ALL"] > 0)
    df["ms/query"] = 1000 * df["seconds_per_query"]
    df["pareto"] = pareto(df[f"{primary}/IN"].to_numpy(float), df[f"{primary}/OUT"].to_numpy(float))
    cols = [
        c
        for c in CONFIG_COLS
        + metric_cols(metrics)
        # what a model learned from judgments may have seen (harness.leakage), and the never-shown view
        + ["leakage_shared_positive_share", *(f"never_shown_{primary}/{s}" for s in ("ALL", "IN", "OUT"))]
        + [retention, "pareto", "ms/query", "index_seconds", "encode_seconds", "tag", "run_file", "scores_key"]
        if c in df
    ]
    return df[cols].sort_values(f"{primary}/ALL", ascending=False, kind="mergesort").reset_index(drop=True)


NOT_SETTINGS = {"scores_key", "run_file", "command", "pareto", "ms/query", "index_seconds", "encode_seconds", "created"}


def to_markdown(df: pd.DataFrame) -> str:
    """The table as Markdown: the experiment and its tag, the paper's factors, every other setting
    on which two rows differ (LTR, PRF, reduction, re-ranking, depth...: rows that look alike in
    the table are alike), then the scores."""
    base = ["query_fields", "target_fields", "granularity", "passage_length", "aggregation", "backend", "fusion_k"]
    scores = [c for c in df.columns if "/" in c or c == "ms/query"]
    varying = [
        c
        for c in df.columns
        if c not in base
        and c not in scores
        and c not in NOT_SETTINGS
        and c not in ("experiment", "tag")
        and df[c].astype(str).nunique(dropna=False) > 1
    ]
    show = [c for c in ["experiment", "tag", *base, *varying] if c in df] + scores
    head = "| " + " | ".join(show) + " |\n|" + "|".join("---" for _ in show) + "|\n"

    def fmt(v):
        if v is None or (isinstance(v, float) and v != v):
            return ""
        if isinstance(v, float) and v.is_integer() and abs(v) >= 1:
            return str(int(v))
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    return head + "".join("| " + " | ".join(fmt(v) for v in row) + " |\n" for row in df[show].itertuples(index=False))


def plot_in_vs_out(df: pd.DataFrame, path: Path, metric: str = "nDCG@100", published=()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    systems = df.apply(system, axis=1)
    markers = "os^DvP*Xh<>p"
    for i, name in enumerate(sorted(systems.unique())):
        sel = df[systems == name]
        ax.scatter(sel[f"{metric}/IN"], sel[f"{metric}/OUT"], label=name, marker=markers[i % len(markers)], alpha=0.75)
    x, y = df[f"{metric}/IN"].to_numpy(float), df[f"{metric}/OUT"].to_numpy(float)
    front = sorted((a, b) for a, b, p in zip(x, y, pareto(x, y)) if p)
    if front:
        ax.plot(
            [a for a, _ in front],
            [b for _, b in front],
            "-",
            color="black",
            lw=1,
            zorder=0,
            label="Pareto front (IN vs OUT)",
        )
    if published:  # a paper's values (harness.regress): drawn, not run
        ax.scatter(
            [p["IN"] for p in published],
            [p["OUT"] for p in published],
            marker="*",
            s=90,
            facecolors="none",
            edgecolors="black",
            label="published, not run",
        )
    top = max((max(p["IN"], p["OUT"]) for p in published), default=0.0)
    hi = float(max(df[f"{metric}/IN"].max(), df[f"{metric}/OUT"].max(), top, 0.01)) * 1.05
    ax.plot([0, hi], [0, hi], "--", color="grey", lw=1, label="OUT = IN")
    ax.set_xlabel(f"{metric}, IN-domain prior art")
    ax.set_ylabel(f"{metric}, OUT-of-domain prior art")
    ax.set_title("IN vs OUT, one point per system")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def plot_passage_length(df: pd.DataFrame, path: Path, metric: str = "nDCG@100") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = df[df["fusion"].isna() | (df["fusion"] == "")] if "fusion" in df else df
    backends = sorted(single["backend"].dropna().unique())
    fig, axes = plt.subplots(1, max(1, len(backends)), figsize=(5 * max(1, len(backends)), 4), squeeze=False)
    for ax, backend in zip(axes[0], backends):
        b = single[single["backend"] == backend]
        p = b[b["granularity"] == "passage"]
        for agg, g in p.groupby("aggregation"):
            g = g.groupby("passage_length")[f"{metric}/ALL"].max().sort_index()
            ax.plot(g.index, g.values, marker="o", label=agg)
        d = b[b["granularity"] == "document"]
        if len(d):
            ax.axhline(d[f"{metric}/ALL"].max(), ls="--", color="grey", label="document (best)")
        if len(p):
            ax.set_xscale("log", base=2)
        ax.set_title(f"{backend}: {metric} (ALL) by passage length")
        ax.set_xlabel("passage length (tokens)")
        ax.set_ylabel(metric)
        ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def summary(results_path: Path, keys: list[str], n: int = 5) -> str:
    """What came out, as a console table in the manner of PyTerrier's ``pt.Experiment``: the best
    ``n`` rows by the primary measure on ALL, then the best on IN and on OUT where they are others
    (marked), each with its measures on ALL / IN / OUT and its query time."""
    wanted = set(keys)
    rows = [r for r in read_rows(results_path) if r.get("scores_key") in wanted]
    df = results_frame(rows)
    if df.empty:
        return "  no results"
    metrics = metrics_of(rows)
    primary = metrics[0]
    picks = [(i, "") for i in range(min(n, len(df)))]
    for subset in ("IN", "OUT"):
        best = int(df[f"{primary}/{subset}"].to_numpy(float).argmax())
        if all(best != i for i, _ in picks):
            picks.append((best, f"best {subset}"))
    names = [str(df.at[i, "tag"]).rsplit(".", 1)[0] + (f"  ({why})" if why else "") for i, why in picks]
    width = max(len(x) for x in names)
    cols = [f"{m}/{s_}" for m in metrics[:2] for s_ in ("ALL", "IN", "OUT")]
    head = f"  {'system':{width}s}  " + "  ".join(f"{c:>12s}" for c in cols) + f"  {'ms/query':>8s}"
    lines = [f"  best by {primary} (ALL), of {len(df)} experiments:", head]
    for (i, _), name in zip(picks, names):
        vals = "  ".join(f"{df.at[i, c]:12.4f}" for c in cols)
        lines.append(f"  {name:{width}s}  {vals}  {df.at[i, 'ms/query']:8.1f}")
    return "\n".join(lines)


def write_report(
    store: Store,
    results_path: Path,
    keys: list[str],
    name: str,
    overrides: dict[str, list[str]] | None = None,
    dataset_of=None,
) -> Path:
    """Table, plots and results page (``index.html``, :mod:`harness.report_page`) of the
    experiments with these scores keys. ``overrides`` (scores key -> the sweep's overrides) gives
    each row its ``command``; ``dataset_of`` (scores key -> loaded dataset) the page's query texts."""
    wanted = set(keys)
    rows = [r for r in read_rows(results_path) if r.get("scores_key") in wanted]
    out = store.report_dir(name)
    primary = metrics_of(rows)[0]
    df = regress.annotate(results_frame(rows), store.root, primary)  # rows a regression checked
    if df.empty:
        return out
    published = regress.published_points(set(df["dataset"].dropna().astype(str)), primary)
    commands = {k: command(o) for k, o in (overrides or {}).items()}
    df["command"] = df["scores_key"].map(commands)
    tmp = out / "results.csv.tmp"
    df.to_csv(tmp, index=False)
    os.replace(tmp, out / "results.csv")
    write_text_atomic(out / "results.md", f"# Sweep `{name}`: {len(df)} experiments\n\n" + to_markdown(df))
    plot_in_vs_out(df, out / "in_vs_out.png", primary, published)
    plot_passage_length(df, out / "passage_length.png", primary)
    write_page(out, df, commands, results_path, primary, name, dataset_of, published)
    return out
