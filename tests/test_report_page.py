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
from conftest import ROOT, TINY_ENCODER, tiny_overrides

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
    pd.testing.assert_frame_equal(df.drop(columns="results_file"), csv)  # rows that know their root
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


# ---- a page no dataset can script ---------------------------------------------------------------
# Every string below is data: ids (no white space, no '#', as ids must be), texts, a name and a
# folder. Each would run script, inject an element, or close / comment out the page's data if it
# reached the page as markup.
HOSTILE_IDS = [
    "<img/src/onerror=alert(5)>",
    "<svg/onload=alert(6)>",
    "</script><script>alert(7)</script>",
    "<!--<script>",
    "q\"'\\&amp;é中",
]
HOSTILE_TEXT = (
    "<script>alert(8)</script> </script> <!--<script> <img src=x onerror=alert(9)> "
    "<svg onload=alert(10)></svg> <iframe srcdoc='<script>alert(11)</script>'></iframe> \" ' \\ &amp; &lt; é ü 中"
)
HOSTILE_NAME = "<img src=x onerror=alert(12)>&amp;<!--<script>"
HOSTILE_SWEEP = """
blocks:
  single:
    +experiment: doc_bm25
    query_fields: TA,T
    target_fields: TA
    name: '"{name}"'
  reranked:
    +experiment: doc_bm25
    query_fields: TA
    target_fields: TA
    rerank: ipc3_disjoint
    rerank.weight: 0.1
"""


def hostile_folder(folder):
    """The tiny set with hostile query and document ids, titles, abstracts and keywords."""
    from harness.data import schema as S

    q = pd.read_parquet(folder / "queries.parquet")
    c = pd.read_parquet(folder / "corpus.parquet")
    r = pd.read_parquet(folder / "qrels_all.parquet")
    qmap = {old: f"{new}{i}" for i, (old, new) in enumerate(zip(q[S.QUERY_ID], HOSTILE_IDS))}
    positives = list(dict.fromkeys(r[r[S.QUERY_ID].isin(qmap)][S.DOC_ID]))  # documents the page shows
    dmap = {old: f"d{new}{i}" for i, (old, new) in enumerate(zip(positives, HOSTILE_IDS * 3))}
    q[S.QUERY_ID] = q[S.QUERY_ID].replace(qmap)
    c[S.DOC_ID] = c[S.DOC_ID].replace(dmap)
    r[S.QUERY_ID] = r[S.QUERY_ID].replace(qmap)
    r[S.DOC_ID] = r[S.DOC_ID].replace(dmap)
    for frame in (q, c):
        hit = frame.index[:8]
        frame.loc[hit, S.TITLE] = frame.loc[hit, S.TITLE].astype(str) + " " + HOSTILE_TEXT
        frame.loc[hit, S.ABSTRACT] = HOSTILE_TEXT + " " + frame.loc[hit, S.ABSTRACT].astype(str)
    q[S.KEYWORDS] = q[S.KEYWORDS].astype(str) + " <b>kw</b>&amp;"
    q.to_parquet(folder / "queries.parquet", index=False)
    c.to_parquet(folder / "corpus.parquet", index=False)
    r.to_parquet(folder / "qrels_all.parquet", index=False)
    return set(qmap.values())


def test_page_json_and_policy_by_hand():
    from harness.report_page import content_security_policy, script_json

    text = script_json({"a": "</script><!--<script>&amp;\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!--<script>&amp;\u2028"}
    page = '<script>ok()</script><script type="application/json">{"x":1}</script><script type="module">m()</script>'
    policy = content_security_policy(page)
    assert policy.count("'sha256-") == 2 and "unsafe-inline" not in policy.split("style-src")[0]


@pytest.mark.slow
def test_a_hostile_dataset_and_config_script_nothing(tmp_path, tiny_folder):
    if CHROMIUM is None:
        pytest.skip("no chromium executable (Debian: apt-get install chromium; .ci/run installs it as root)")
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (make install)")
    from harness import api

    folder = tmp_path / "data <svg onload=alert(13)> &amp; é"
    tiny_folder.rename(folder)
    qids = hostile_folder(folder)
    sweep_file = tmp_path / "h<!--<script>.yaml"
    sweep_file.write_text(HOSTILE_SWEEP.replace("{name}", HOSTILE_NAME))
    df = api.sweep(
        str(sweep_file), f"root={tmp_path / 'root'}", "dataset=local", f"dataset.path='{folder}'", *TINY_ENCODER
    )
    assert len(df) == 3 and (df["experiment"] == HOSTILE_NAME).sum() == 2
    page_path = tmp_path / "root" / "runs" / "report" / sweep_file.stem / "index.html"
    html_text = page_path.read_text()
    assert "<img src=x" not in html_text and "alert(8)" not in html_text.split("<body>")[0]

    dialogs: list[str] = []
    problems: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(page_path.as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            assert page.title() == f"Sweep {sweep_file.stem}: 3 experiments"
            assert page.locator("#results tbody tr").count() == len(df)
            cells = page.locator("#results tbody td").all_inner_texts()
            assert HOSTILE_NAME in cells  # shown as written
            # the search index holds the text as written, too
            page.fill("#results_wrapper input[type='search']", "onerror=alert(12)")
            assert page.locator("#results tbody tr").count() == 2
            page.fill("#results_wrapper input[type='search']", "")
            # every query of the per-query view, each hostile id shown as text
            pq = page.locator("#perquery")
            page.select_option("#perquery_wrapper select", "100")
            shown = set(pq.locator("tbody tr td:first-child").all_inner_texts())
            assert qids <= shown and len(shown) == len(set(api.per_query(df.iloc[0])["query_id"]))
            for q in sorted(qids):
                page.evaluate("q => window.showQuery(q)", q)
                assert page.locator("#pq-title").inner_text().startswith(q + ":")
                assert page.locator("#pq-topA li").count() == 10
            box = page.locator("#inout-plot .scatterlayer .point").first.bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # the hover label
            page.wait_for_selector("#inout-plot .hoverlayer .hovertext")
            hover = page.locator("#inout-plot .hoverlayer").text_content()
            assert any(t in hover for t in df["tag"]), hover  # the tag as written
            # nothing from the data became an element or a handler
            injected = page.evaluate(
                """() => [...document.querySelectorAll('*')].filter(e =>
                    ['IMG', 'IFRAME'].includes(e.tagName) || (e.tagName === 'B' && e.textContent === 'kw')
                    || (e.tagName === 'SCRIPT' && e.type !== 'application/json' && e.textContent.includes('alert('))
                    || [...e.attributes].some(a => a.name.startsWith('on'))).map(e => e.outerHTML.slice(0, 80))"""
            )
        finally:
            browser.close()
    assert dialogs == [] and injected == [], (dialogs, injected)
    assert problems == []


def test_results_md_carries_every_setting_that_tells_rows_apart():
    from harness.report import to_markdown

    df = pd.DataFrame(
        {
            "experiment": ["x", "x"],
            "tag": ["bm25.TA-TA.doc.aa", "bm25.TA-TA.doc.ltr.bb"],
            "query_fields": ["TA", "TA"],
            "backend": ["bm25", "bm25"],
            "ltr": [None, "lambdamart(run,domain)"],
            "search_depth": [1000, 1000],
            "scores_key": ["k1", "k2"],
            "nDCG@100/ALL": [0.5, 0.6],
        }
    )
    lines = to_markdown(df).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == ["experiment", "tag", "query_fields", "backend", "ltr", "nDCG@100/ALL"]
    assert len({line for line in lines[2:]}) == 2 and "lambdamart(run,domain)" in lines[3]


@pytest.mark.slow
def test_two_datasets_of_one_name_keep_their_own_judgments(tmp_path, tiny_folder):
    """Two folders, both dataset=local, one with half the judgments: each row of the page is shown
    with its own dataset's marks (told apart by fingerprint, not name)."""
    from harness import api
    from harness.data import schema as S

    other = tmp_path / "other"
    shutil.copytree(tiny_folder, other)
    qrels = pd.read_parquet(other / "qrels_all.parquet")
    qrels.iloc[::2].to_parquet(other / "qrels_all.parquet", index=False)
    sweep_file = tmp_path / "twins.yaml"
    sweep_file.write_text(
        "blocks:\n"
        + "".join(
            f"  {b}:\n    +experiment: doc_bm25\n    query_fields: TA\n    target_fields: TA\n"
            f"    dataset: local\n    dataset.path: '{p}'\n    name: {b}\n"
            for b, p in (("full", tiny_folder), ("half", other))
        )
    )
    df = api.sweep(str(sweep_file), f"root={tmp_path / 'root'}", *TINY_ENCODER)
    assert set(df["experiment"]) == {"full", "half"} and df["dataset"].nunique() == 1
    html_text = (tmp_path / "root" / "runs" / "report" / "twins" / "index.html").read_text()
    data = json.loads(re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html_text, re.S)[1])
    of = {r["experiment"]: r["_dataset"] for r in data["rows"]}
    assert of["full"] != of["half"]
    n = {e: sum(len(m) for m in data["datasets"][d]["marks"].values()) for e, d in of.items()}
    full = pd.read_parquet(tiny_folder / "qrels_all.parquet")
    assert n == {"full": int((full[S.RELEVANCE] > 0).sum()), "half": int((qrels.iloc[::2][S.RELEVANCE] > 0).sum())}
