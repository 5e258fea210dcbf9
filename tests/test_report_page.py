"""The results page (runs/report/<sweep>/index.html) and the Python API it shares its data with.

The page is opened in a real headless Chromium (Debian's package, driven by Playwright's Python
API); each row's command is run in a fresh process and must print the row's numbers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT, tiny_overrides

from harness.report_page import command, judged_marks, page_data, per_query_scores, top_lists

SWEEP = """
blocks:
  single:
    +experiment: doc_bm25,doc_dense
    query_fields: TA
    target_fields: TA
  fused:
    +experiment: rrf_doc
    query_fields: TA
    target_fields: TA
    fusion.k: 60
  reranked:
    +experiment: rrf_doc
    query_fields: TA
    target_fields: TA
    rerank: ipc3_disjoint
    rerank.weight: 0.1
"""
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_page_data_by_hand():
    assert command(["+experiment=doc_bm25", "hydra.launcher.n_jobs=2", "x=[1, 2]", "hydra/launcher=joblib"]) == (
        "python -m harness.run +experiment=doc_bm25 'x=[1, 2]'"
    )
    per_query = pd.DataFrame(
        {
            "subset": ["ALL", "ALL", "OUT", "ALL"],
            "query_id": ["q1", "q1", "q1", "q2"],
            "measure": ["nDCG@100", "R@100", "nDCG@100", "nDCG@100"],
            "value": [0.5, 1.0, 0.25, 0.0],
        }
    )
    assert per_query_scores(per_query, "nDCG@100") == {"q1": {"ALL": 0.5, "OUT": 0.25}, "q2": {"ALL": 0.0}}
    run = pd.DataFrame({"query_id": ["q1"] * 3, "doc_id": ["a", "b", "c"], "score": [1.0, 3.0, 3.0]})
    assert top_lists(run, 2) == {"q1": ["c", "b"]}  # trec_eval's order: ties by doc id descending
    pos = pd.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["b", "x"], "relevance": [1, 1], "domain": ["IN", "OUT"]})
    assert judged_marks(pos) == {"q1": {"b": [1.0, "IN"], "x": [1.0, "OUT"]}}
    df = pd.DataFrame(
        {
            "backend": ["bm25"],
            "fusion": [None],
            "tag": ["t"],
            "scores_key": ["k"],
            "nDCG@100/ALL": [0.5],
            "x": [float("nan")],
        }
    )
    data = page_data(
        df, {"k": "python -m harness.run +experiment=doc_bm25"}, {"k": per_query}, {"k": run}, {}, "nDCG@100"
    )
    assert data["rows"] == [
        {
            "backend": "bm25",
            "fusion": None,
            "tag": "t",
            "scores_key": "k",
            "nDCG@100/ALL": 0.5,
            "x": None,
            "_i": 0,
            "kind": "bm25",
            "command": "python -m harness.run +experiment=doc_bm25",
        }
    ]
    assert data["systems"]["k"]["top"]["q1"] == ["c", "b", "a"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A small sweep (two single systems, a fusion, a re-ranked fusion) run through the API."""
    from harness import api

    base = tmp_path_factory.mktemp("page")
    sweep_file = base / "small.yaml"
    sweep_file.write_text(SWEEP)
    cwd = os.getcwd()
    os.chdir(base)  # the commands are written to be run from where the sweep ran
    try:
        df = api.sweep(str(sweep_file), f"root={base / 'root'}", *tiny_overrides())
    finally:
        os.chdir(cwd)
    return base, df


@pytest.mark.slow
def test_api_sweep_returns_the_report_table(swept):
    base, df = swept
    csv = pd.read_csv(base / "root" / "runs" / "report" / "small" / "results.csv")
    pd.testing.assert_frame_equal(df, csv)
    assert len(df) == 4 and df["command"].str.startswith("python -m harness.run +experiment=").all()
    assert (base / "root" / "runs" / "report" / "small" / "index.html").stat().st_size > 0


def _printed(out: str) -> dict[str, float]:
    """The ALL / IN / OUT table ``harness.run`` prints, as ``{"nDCG@100/ALL": ...}``."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(nDCG@100|R@100)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            got.update({f"{m[1]}/{s}": float(v) for s, v in zip(("ALL", "IN", "OUT"), m.groups()[1:])})
    return got


@pytest.mark.slow
def test_each_rows_command_prints_the_rows_numbers(swept):
    base, df = swept
    html = (base / "root" / "runs" / "report" / "small" / "index.html").read_text()
    picked = {
        "single": df[df["fusion"].isna()].iloc[0],
        "fused": df[df["fusion"].notna() & df["rerank"].isna()].iloc[0],
        "re-ranked": df[df["rerank"].notna()].iloc[0],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HARNESS_ROOT", None)
    for what, row in picked.items():
        assert json.dumps(row["command"])[1:-1].replace("</", "<\\/") in html  # the page shows this command
        argv = shlex.split(row["command"])
        assert argv[:3] == ["python", "-m", "harness.run"]
        r = subprocess.run([sys.executable, *argv[1:]], cwd=base, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        printed = _printed(r.stdout)
        assert printed, r.stdout
        for k, v in printed.items():
            assert v == pytest.approx(row[k], abs=5e-5), (what, k)
        assert "building" not in r.stderr, f"{what}: the command rebuilt an artifact instead of reusing the sweep's"


@pytest.mark.slow
def test_the_page_in_a_real_browser(swept, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no chromium executable (Debian: apt-get install chromium; .ci/run installs it as root)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (make install)")
    expect = playwright.expect
    base, df = swept
    page_path = base / "root" / "runs" / "report" / "small" / "index.html"
    problems: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: problems.append(f"network: {r.url}") if r.url.startswith("http") else None)
            page.goto(page_path.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            rows = page.locator("#results tbody tr")
            assert rows.count() == len(df)

            # sort: a score column's header sorts ascending, then descending
            col = list(page.locator("#results_wrapper thead th").all_inner_texts()).index("nDCG@100/OUT")
            header = page.locator("#results_wrapper thead th").nth(col)
            first_cell = rows.first.locator("td").nth(col)
            header.click()
            expect(first_cell).to_have_text(f"{df['nDCG@100/OUT'].min():.4f}")  # retried until drawn
            header.click()
            expect(first_cell).to_have_text(f"{df['nDCG@100/OUT'].max():.4f}")

            # filter: the kind of system, then back to all
            page.select_option("#filters select[data-col='kind']", "fusion + IPC3 re-rank")
            assert rows.count() == 1
            assert "ipc3" in rows.first.inner_text().lower()
            page.select_option("#filters select[data-col='kind']", "")
            assert rows.count() == len(df)
            page.fill("#results_wrapper input[type='search']", "rrf")
            assert rows.count() == int(df["fusion"].notna().sum())
            page.fill("#results_wrapper input[type='search']", "")

            # the plot: one point per row, and a click selects that row
            assert page.locator("#inout-plot .scatterlayer .point").count() == len(df)
            page.evaluate(
                "() => document.getElementById('inout-plot').emit('plotly_click', {points: [{customdata: 2}]})"
            )
            picked = page.locator("#results tbody tr.picked")
            assert picked.count() == 1 and picked.first.get_attribute("id") == "row-2"

            # the copy button copies the row's command
            page.locator("#row-0 button.copy").click()
            page.wait_for_selector("#row-0 button.copy:has-text('copied')")

            # per-query view: A and B side by side; a query shows its text and both top 10s
            page.select_option("#sysA", df.iloc[-1]["scores_key"])
            page.select_option("#sysB", df.iloc[0]["scores_key"])
            pq_rows = page.locator("#perquery tbody tr")
            assert pq_rows.count() > 0
            pq_rows.first.click()
            page.wait_for_selector("#pq-query:not([hidden])")
            assert page.locator("#pq-topA li").count() == 10 and page.locator("#pq-topB li").count() == 10
            assert page.locator("#pq-text").inner_text().strip()
            assert page.locator("#pq-topB li .rel-IN, #pq-topB li .rel-OUT").count() > 0
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "report.png").stat().st_size > 0
    assert problems == []
