"""The results page of a sweep: ``runs/report/<sweep>/index.html``, one self-contained file.

Researchers read results where they can sort, filter and click, and reproduce a row by pasting
one command, as in Pyserini's two-click reproduction pages. The page opens from disk with no
server and no network: DataTables (the bundle the ``itables`` package ships, for sorting and
filtering) and plotly.js (Plotly's offline bundle) are inlined. It holds:

* the results table (every config column, ALL / IN / OUT of every measure, timings, ``pareto``)
  with filters per config column and, per row, the ``python -m harness.run`` command that
  reproduces it and a copy button;
* the IN-vs-OUT plot of the primary measure with the Pareto front (hover names the configuration;
  a click selects its row);
* a per-query view of any two systems: per query ALL / IN / OUT of the primary measure and the
  difference, the query's text, and each system's top 10 with relevance and IN / OUT marks;
* where queries and targets carry IPC codes, the domain-pair view (:mod:`harness.domains`): OUT
  positives by query section x target section, and the R@100 gain of the best OUT system over the
  best ALL one.

The data is assembled by pure functions over the results frame, per-query tables, run tables and
qrels (:func:`page_data`); :func:`write_page` reads them from the artifacts and renders the
Jinja2 template ``templates/report.html.j2``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .data import schema as S
from .domains import pair_table
from .naming import system
from .results import run_path, scores_dir
from .runs import read_trec, top_k
from .store import write_text_atomic

TOP = 10  # families shown per query and system in the per-query view
TEXT_CHARS = 600  # characters of a query's text shown (title and abstract)


def command(overrides: list[str]) -> str:
    """The shell command that reproduces an experiment of a sweep: its overrides as written, less
    those of Hydra itself (a launcher's settings configure the sweep's jobs, not the experiment)."""
    own = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
    return "python -m harness.run " + " ".join(shlex.quote(o) for o in own)


def _num(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return round(v, 6) if isinstance(v, float) else v


def per_query_scores(table: pd.DataFrame, measure: str) -> dict[str, dict[str, float]]:
    """``{query_id: {ALL|IN|OUT: value}}`` of one measure from a scores artifact's per-query table."""
    t = table[table["measure"] == measure]
    out: dict[str, dict[str, float]] = {}
    for s, q, v in zip(t["subset"], t["query_id"].astype(str), t["value"]):
        out.setdefault(q, {})[s] = round(float(v), 6)
    return out


def top_lists(run: pd.DataFrame, k: int = TOP) -> dict[str, list[str]]:
    """Each query's top ``k`` document ids, in the run's rank order (trec_eval's)."""

    t = top_k(run, k)
    return {str(q): list(map(str, g["doc_id"])) for q, g in t.groupby("query_id", sort=False)}


def judged_marks(positives: pd.DataFrame) -> dict[str, dict[str, list]]:
    """``{query_id: {doc_id: [relevance, "IN"|"OUT"|""]}}`` for every positive judgment."""
    out: dict[str, dict[str, list]] = {}
    for q, d, r, dom in zip(positives["query_id"], positives["doc_id"], positives["relevance"], positives["domain"]):
        out.setdefault(str(q), {})[str(d)] = [_num(float(r)), dom if isinstance(dom, str) else ""]
    return out


def pareto(x, y) -> list[bool]:
    """Points no other point beats on both axes (>= on both, > on one): the IN/OUT trade-off front."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    out = []
    for i in range(len(x)):
        dominated = (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        out.append(not dominated.any())
    return out


def kind(row) -> str:
    """What sort of system a row is, for the filter and the plot's legend."""
    return system(row)


def page_data(
    df: pd.DataFrame,
    commands: Mapping[str, str],
    per_query: Mapping[str, pd.DataFrame],
    runs: Mapping[str, pd.DataFrame],
    datasets: Mapping[str, dict],
    metric: str,
) -> dict:
    """Everything the page shows, as JSON-ready data. ``df`` is the report's results frame; the
    mappings are keyed by scores key; ``datasets`` maps a dataset fingerprint (a row's ``_dataset``) to ``{"queries": {id:
    text}, "marks": judged_marks(...), "titles": {doc_id: title}}``."""
    rows = []
    for i, r in enumerate(df.itertuples(index=False)):
        rec = {c: _num(v) for c, v in zip(df.columns, r)}
        rec["_i"] = i
        rec["kind"] = kind(r)
        rec["command"] = commands.get(rec["scores_key"], "")
        rows.append(rec)
    systems = {
        key: {"scores": per_query_scores(per_query[key], metric), "top": top_lists(runs[key])}
        for key in df["scores_key"]
        if key in per_query and key in runs
    }
    return {"metric": metric, "rows": rows, "systems": systems, "datasets": datasets}


def dataset_view(ds, docs: set[str]) -> dict:
    """The per-query view's data of one dataset: query texts, positive judgments and the titles
    of the documents shown (read from the corpus in batches, only those)."""

    q = ds.queries
    text = {}
    for rec in q.to_dict("records"):
        parts = [str(rec.get(c) or "") for c in (S.TITLE, S.ABSTRACT) if c in q]
        text[str(rec[S.QUERY_ID])] = "\n\n".join(p for p in parts if p)[:TEXT_CHARS]
    titles: dict[str, str] = {}
    if docs and S.TITLE not in ds.missing.get("corpus", []):
        for batch in ds.corpus.iter_batches([S.DOC_ID, S.TITLE], 4096):
            b = batch.to_pandas() if hasattr(batch, "to_pandas") else batch
            hit = b[b[S.DOC_ID].astype(str).isin(docs)]
            titles.update(zip(hit[S.DOC_ID].astype(str), hit[S.TITLE].fillna("").astype(str)))
    return {"queries": text, "marks": judged_marks(ds.positives), "titles": titles}


def domain_figure(df: pd.DataFrame, runs: Mapping[str, pd.DataFrame], ds, metric: str) -> str | None:
    """The domain-pair heatmap (Plotly HTML fragment, no script) of the best ALL and the best OUT
    system; None where queries or targets carry no IPC codes or there are no OUT positives."""
    import plotly.graph_objects as go

    q3 = dict(zip(ds.queries[S.QUERY_ID], ds.queries[S.IPC3])) if S.IPC3 in ds.queries else {}
    if not q3 or not ds.doc_ipc3 or df.empty:
        return None
    a = df.sort_values(f"{metric}/ALL", ascending=False, kind="mergesort").iloc[0]
    b = df.sort_values(f"{metric}/OUT", ascending=False, kind="mergesort").iloc[0]
    names = (f"A: {a['tag']}", f"B: {b['tag']}")
    shown = tuple(plotly_text(n) for n in names)
    if a["scores_key"] not in runs or b["scores_key"] not in runs:
        return None
    table = pair_table(
        {names[0]: runs[a["scores_key"]], names[1]: runs[b["scores_key"]]}, ds.positives, q3, ds.doc_ipc3
    )
    if table.empty:
        return None
    grid = table.pivot(index="query_section", columns="target_section", values="gain")
    count = table.pivot(index="query_section", columns="target_section", values="out_positives")
    rec_a = table.pivot(index="query_section", columns="target_section", values=f"R@100 {names[0]}")
    rec_b = table.pivot(index="query_section", columns="target_section", values=f"R@100 {names[1]}")
    custom = [
        [[count.iat[i, j], rec_a.iat[i, j], rec_b.iat[i, j]] for j in range(grid.shape[1])]
        for i in range(grid.shape[0])
    ]
    text = [[("" if n != n else f"{n:.0f}") for n in row] for row in count.to_numpy(float)]
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(float),
            x=[plotly_text(c) for c in grid.columns],
            y=[plotly_text(i) for i in grid.index],
            text=text,
            texttemplate="%{text}",
            customdata=custom,
            colorscale="RdBu",
            zmid=0,
            hovertemplate="query %{y} x target %{x}<br>OUT positives %{customdata[0]:.1f}<br>R@100 A %{customdata[1]:.3f}"
            "<br>R@100 B %{customdata[2]:.3f}<br>gain B - A %{z:+.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"R@100 OUT gain by domain pair (cell text: OUT positives)<br><sup>{shown[0]}<br>{shown[1]}</sup>",
        xaxis_title="target section",
        yaxis_title="query section",
        height=480,
        margin={"t": 110},
    )
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id="domains-plot")


def in_out_figure(df: pd.DataFrame, metric: str, published: Sequence[Mapping] = ()) -> str:
    """The IN-vs-OUT scatter (Plotly HTML fragment with plotly.js inlined): one trace per kind of
    system, the Pareto front and OUT = IN; each point's customdata is its row's index. Published
    reference points (:func:`harness.regress.published_points`) are one more trace, marked as
    published and not run, outside the table's rows and the front."""
    import plotly.graph_objects as go

    fig = go.Figure()
    kinds = df.apply(kind, axis=1)
    for name in sorted(kinds.unique()):
        sel = df[kinds == name]
        fig.add_trace(
            go.Scatter(
                x=sel[f"{metric}/IN"],
                y=sel[f"{metric}/OUT"],
                mode="markers",
                name=plotly_text(name),
                customdata=list(sel.index),
                text=[plotly_text(t) for t in sel["tag"]],
                hovertemplate="%{text}<br>IN %{x:.4f}<br>OUT %{y:.4f}<extra></extra>",
            )
        )
    x, y = df[f"{metric}/IN"].to_numpy(float), df[f"{metric}/OUT"].to_numpy(float)
    front = sorted((a, b) for a, b, p in zip(x, y, pareto(x, y)) if p)
    fig.add_trace(
        go.Scatter(
            x=[a for a, _ in front], y=[b for _, b in front], mode="lines", name="Pareto front", line={"color": "black"}
        )
    )
    if published:
        fig.add_trace(
            go.Scatter(
                x=[p["IN"] for p in published],
                y=[p["OUT"] for p in published],
                mode="markers",
                name="published, not run",
                marker={"symbol": "star-open", "size": 12, "color": "black"},
                text=[plotly_text(f"{p['name']} ({p['reference']}): published, not run") for p in published],
                hovertemplate="%{text}<br>IN %{x:.4f}<br>OUT %{y:.4f}<extra></extra>",
            )
        )
    hi = float(max(x.max(initial=0), y.max(initial=0), *(max(p["IN"], p["OUT"]) for p in published), 0.01)) * 1.05
    fig.add_trace(
        go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="OUT = IN", line={"dash": "dash", "color": "grey"})
    )
    fig.update_layout(
        xaxis_title=f"{metric}, IN-domain prior art",
        yaxis_title=f"{metric}, OUT-of-domain prior art",
        height=520,
        hovermode="closest",
    )
    return fig.to_html(full_html=False, include_plotlyjs=True, div_id="inout-plot", config={"displaylogo": False})


def _datatables() -> tuple[str, str]:
    """DataTables (with jQuery and its extensions) as the ``itables`` package ships it, for
    inlining: (base64 of the ES module, CSS)."""
    import itables

    folder = Path(itables.__file__).parent / "html"
    js = (folder / "dt_bundle.js").read_bytes()
    return base64.b64encode(js).decode("ascii"), (folder / "dt_bundle.css").read_text(encoding="utf-8")


def plotly_text(value) -> str:
    """A value from the data or the config as Plotly text: Plotly reads labels, legends and
    titles as its own subset of HTML (``<br>``, ``<b>``, links), so markup in a tag would be
    rendered; escaped, it shows as written (Plotly decodes the entities)."""
    return html.escape(str(value), quote=True)


def script_json(data) -> str:
    """JSON for a ``<script type="application/json">`` element that no byte sequence of the data
    can close or comment out: ``<``, ``>`` and ``&`` are written as ``\\u`` escapes (as Django's
    ``json_script`` does), so ``</script>`` and ``<!--`` never appear; JSON.parse reads them back."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    for c in "<>&\u2028\u2029":
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text


_SCRIPT = re.compile(r"<script(\s[^>]*)?>(.*?)</script>", re.S | re.I)


def content_security_policy(page: str) -> str:
    """The page's Content-Security-Policy: only its own inline scripts run (by their SHA-256), with
    the DataTables module they load from a blob; no inline event handler, no eval, no network. A
    script that markup from the data managed to inject would not run."""
    hashes = []
    for attrs, body in _SCRIPT.findall(page):
        if "application/json" in (attrs or ""):
            continue  # data, never executed
        digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii")
        hashes.append(f"'sha256-{digest}'")
    return (
        "default-src 'none'; "
        f"script-src {' '.join(sorted(set(hashes)))} blob:; "
        "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def render(data: dict, inout_html: str, domains_html: str | None, name: str, where: str) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    dt_js, dt_css = _datatables()
    fields = dict(
        name=name,
        where=where,
        n=len(data["rows"]),
        metric=data["metric"],
        data_json=script_json(data),
        dt_js_b64=dt_js,
        dt_css=dt_css,
        inout_html=inout_html,
        domains_html=domains_html,
    )
    template = env.get_template("report.html.j2")
    # The policy names the scripts' hashes, and it sits in <head> outside every script: render
    # once to read the scripts, then again with the policy (the scripts are the same bytes).
    page = template.render(csp="", **fields)
    return template.render(csp=content_security_policy(page), **fields)


def write_page(
    out: Path,
    df: pd.DataFrame,
    commands: Mapping[str, str],
    results_path: Path,
    metric: str,
    name: str,
    dataset_of: Callable[[str], Any] | None = None,
    published: Sequence[Mapping] = (),
) -> Path:
    """Write ``out/index.html`` for the report's frame. ``dataset_of(scores_key)`` gives the
    loaded dataset of a row (the sweep's cache); without it, the per-query view has scores and
    rankings but no query texts, titles or marks. ``published``: reference points for the
    IN-vs-OUT plot (:func:`harness.regress.published_points`)."""

    rows = df.to_dict("records")
    per_query = {
        r["scores_key"]: pd.read_csv(scores_dir(results_path, r) / "per_query.csv", dtype={"query_id": str})
        for r in rows
    }
    runs = {r["scores_key"]: read_trec(run_path(results_path, r)) for r in rows}
    datasets: dict[str, dict] = {}
    domains_html = None
    if dataset_of is not None:
        # Datasets told apart by their content, not their name: two folders both called "local"
        # (or one edited between runs) are two datasets, each row shown with its own judgments.
        print_of: dict[str, str] = {}  # scores key -> dataset fingerprint
        loaded = {}
        for r in rows:
            ds = dataset_of(r["scores_key"])
            loaded[ds.fingerprint] = ds
            print_of[r["scores_key"]] = ds.fingerprint
        df = df.assign(_dataset=df["scores_key"].map(print_of))
        by_print = {fp: [k for k, f in print_of.items() if f == fp] for fp in loaded}
        for fp, keys in by_print.items():
            shown = {d for k in keys for docs in top_lists(runs[k]).values() for d in docs}
            datasets[fp] = dataset_view(loaded[fp], shown)
            if domains_html is None and len(by_print) == 1:
                domains_html = domain_figure(df, runs, loaded[fp], metric)
    data = page_data(df, commands, per_query, runs, datasets, metric)
    html = render(data, in_out_figure(df, metric, published), domains_html, name, os.getcwd())
    path = out / "index.html"
    write_text_atomic(path, html)
    return path
