"""Where cross-domain prior art is lost: OUT-domain positives by query section x target section.

    python -m harness.domains rrf_doc xdomain --dataset local --out runs/report/domains

Every system in the paper finds OUT-domain prior art about five times less well than IN-domain;
this view says *which* domain pairs hold it and which a system misses. A section is the first
character of an IPC3 code (A-H in IPC; the first digit of cacm-xdom's Computing Reviews codes).
Each OUT positive (query q, target d) is split evenly over the cells of q's sections x d's
sections (a pair with one section on each side counts 1 in one cell), so every table sums to the
number of OUT positives. Per cell: the OUT positives, the share a system finds in its top ``k``
(recall@k), and for two systems the difference. Per query: the OUT positives one system finds in
its top ``k`` and the other does not, with both ranks.

Pure functions over run tables and qrels; the command line reads two rows of the results table
(named as in :mod:`harness.compare`) and the dataset they ran on, and writes ``domain_pairs.csv``,
``domain_pairs.png`` and ``out_misses.csv``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from . import data, ipc
from .data import schema as S
from .results import find, run_path
from .runs import read_trec, top_k, with_ranks
from .store import default_results


def out_pairs(positives: pd.DataFrame, q3: dict, d3: dict) -> pd.DataFrame:
    """One row per (OUT positive, query section, target section) with its ``weight`` (module
    docstring); positives whose query or target has no code are left out (no section to name)."""
    pos = positives[(positives["domain"] == "OUT") & (positives["relevance"].astype(float) > 0)]
    rows = []
    for q, d in zip(pos["query_id"], pos["doc_id"]):
        sq, sd = sorted(ipc.sections(q3.get(q))), sorted(ipc.sections(d3.get(d)))
        for a in sq:
            for b in sd:
                rows.append((q, d, a, b, 1.0 / (len(sq) * len(sd))))
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "query_section", "target_section", "weight"])


def found(run: pd.DataFrame, pairs: pd.DataFrame, k: int) -> pd.Series:
    """Whether each pair's target is in the run's top ``k`` for its query."""
    top = set(zip(*top_k(run, k)[["query_id", "doc_id"]].to_numpy().T)) if len(run) else set()
    return pd.Series([(q, d) in top for q, d in zip(pairs["query_id"], pairs["doc_id"])], index=pairs.index)


def pair_table(runs: dict[str, pd.DataFrame], positives: pd.DataFrame, q3: dict, d3: dict, k: int = 100):
    """Cells (query section, target section): ``out_positives`` and, per system, ``R@k <system>``;
    with two systems, ``gain`` (second minus first) and ``found_gain`` (positives)."""
    pairs = out_pairs(positives, q3, d3)
    out = pairs.groupby(["query_section", "target_section"])["weight"].sum().rename("out_positives").to_frame()
    names = list(runs)
    for name in names:
        hit = pairs["weight"].where(found(runs[name], pairs, k), 0.0)
        out[f"found {name}"] = hit.groupby([pairs["query_section"], pairs["target_section"]]).sum()
        out[f"R@{k} {name}"] = out[f"found {name}"] / out["out_positives"]
    if len(names) == 2:
        out["found_gain"] = out[f"found {names[1]}"] - out[f"found {names[0]}"]
        out["gain"] = out[f"R@{k} {names[1]}"] - out[f"R@{k} {names[0]}"]
    return out.reset_index()


def misses(a: pd.DataFrame, b: pd.DataFrame, positives: pd.DataFrame, k: int = 100, names=("a", "b")) -> pd.DataFrame:
    """OUT positives one system finds in its top ``k`` and the other does not: ``found_by``, and
    each system's rank (empty where it did not retrieve the target at all)."""
    pos = positives[(positives["domain"] == "OUT") & (positives["relevance"].astype(float) > 0)]
    ra = with_ranks(a).set_index(["query_id", "doc_id"])["rank"]
    rb = with_ranks(b).set_index(["query_id", "doc_id"])["rank"]
    idx = pd.MultiIndex.from_frame(pos[["query_id", "doc_id"]])
    t = pd.DataFrame({f"rank {names[0]}": ra.reindex(idx).to_numpy(), f"rank {names[1]}": rb.reindex(idx).to_numpy()})
    t.insert(0, "doc_id", pos["doc_id"].to_numpy())
    t.insert(0, "query_id", pos["query_id"].to_numpy())
    in_a = t[f"rank {names[0]}"].le(k)
    in_b = t[f"rank {names[1]}"].le(k)
    t["found_by"] = [names[1] if y and not x else names[0] if x and not y else None for x, y in zip(in_a, in_b)]
    out = t[t["found_by"].notna()].sort_values(["query_id", "found_by", "doc_id"]).reset_index(drop=True)
    return out[["query_id", "doc_id", "found_by", f"rank {names[0]}", f"rank {names[1]}"]].astype(
        {f"rank {names[0]}": "Int64", f"rank {names[1]}": "Int64"}
    )


def plot(table: pd.DataFrame, path: Path, value: str, title: str) -> None:
    """A query-section x target-section heatmap of ``value``, each cell annotated with its OUT positives."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = table.pivot(index="query_section", columns="target_section", values=value)
    count = table.pivot(index="query_section", columns="target_section", values="out_positives")
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * grid.shape[1], 1.0 + 0.7 * grid.shape[0]))
    limit = max(1e-9, float(abs(grid).max().max()))
    diverging = value == "gain"
    im = ax.imshow(
        grid.to_numpy(float),
        cmap="RdBu" if diverging else "viridis",
        vmin=-limit if diverging else 0,
        vmax=limit if diverging else 1,
    )
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            n = count.iat[i, j]
            if n == n:
                ax.text(
                    j,
                    i,
                    f"{grid.iat[i, j]:+.2f}\n{n:.0f}" if diverging else f"{grid.iat[i, j]:.2f}\n{n:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if diverging else "white",
                )
    ax.set_xticks(range(grid.shape[1]), grid.columns)
    ax.set_yticks(range(grid.shape[0]), grid.index)
    ax.set_xlabel("target section")
    ax.set_ylabel("query section")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _dataset(results: Path, row: dict):
    return data.load(OmegaConf.create(row["config"]["dataset"]), Path(results).resolve().parent.parent)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("systems", nargs=2, metavar="SYSTEM", help="two experiments (name, tag or scores key): A B")
    ap.add_argument("--results", default=None, type=Path, help="default: $HARNESS_ROOT/runs/results.jsonl")
    ap.add_argument("--dataset", default=None, help="only rows of this dataset (name or dataset.path)")
    ap.add_argument("--where", action="append", default=[], metavar="KEY=VALUE", help="as in harness.compare")
    ap.add_argument("--k", type=int, default=100, help="the cut-off of recall (default 100)")
    ap.add_argument("--out", type=Path, default=None, help="folder for domain_pairs.csv / .png and out_misses.csv")
    a = ap.parse_args(argv)
    if a.k < 1:
        ap.error(f"--k {a.k}: expected a cut-off >= 1 (e.g. 100)")
    if a.systems[0] == a.systems[1]:
        ap.error(f"{a.systems[0]!r} named twice: the view compares two systems. Fix: name another one as B.")
    if a.out is not None:
        try:
            a.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            ap.error(f"--out {a.out}: cannot be used as a folder ({e.strerror or e}). Fix: a writable folder path.")
        if not os.access(a.out, os.W_OK):
            ap.error(f"--out {a.out}: the folder is not writable. Fix: a writable folder path.")
    results = a.results or default_results()
    rows = [find(results, s, a.dataset, a.where) for s in a.systems]
    if rows[0]["config"]["dataset"] != rows[1]["config"]["dataset"]:
        raise SystemExit(f"{a.systems}: the two systems ran on different datasets. Fix: --dataset NAME.")
    ds = _dataset(results, rows[0])
    q3 = dict(zip(ds.queries[S.QUERY_ID], ds.queries[S.IPC3])) if S.IPC3 in ds.queries else {}
    if not any(len(c) for c in q3.values()) or not any(len(c) for c in (ds.doc_ipc3 or {}).values()):
        raise SystemExit(
            f"domains: {rows[0]['config']['dataset'].get('name')}: the queries or the targets carry no IPC codes, so no "
            f"OUT positive can be placed in a domain pair. Fix: a dataset with {S.IPC3}."
        )
    runs = {s: read_trec(run_path(results, r)) for s, r in zip(a.systems, rows)}
    table = pair_table(runs, ds.positives, q3, ds.doc_ipc3, a.k)
    first, second = runs.values()
    miss = misses(first, second, ds.positives, a.k, tuple(a.systems))
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(table.sort_values("out_positives", ascending=False).to_string(index=False))
    counts = miss["found_by"].value_counts()
    print(
        f"\nOUT positives in the top {a.k} of one system only: "
        + ", ".join(f"{s} {int(counts.get(s, 0))}" for s in a.systems)
    )
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(a.out / "domain_pairs.csv", index=False)
        miss.to_csv(a.out / "out_misses.csv", index=False)
        plot(table, a.out / "domain_pairs.png", "gain", f"R@{a.k} OUT gain, {a.systems[1]} over {a.systems[0]}")
        print(f"wrote {a.out / 'domain_pairs.csv'}, domain_pairs.png and out_misses.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
