"""The domain-pair view (harness.domains) on a hand-made dataset, and its command line."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from harness import domains
from harness.data import schema as S
from harness.run import execute

Q3 = {"q1": ["A01", "B02"], "q2": ["H04"]}
D3 = {"d1": ["C03"], "d2": ["G06", "C07"], "d3": ["G01"], "i1": ["A01"], "x": ["A01"], "y": ["H04"]}
POS = pd.DataFrame(
    {
        "query_id": ["q1", "q1", "q2", "q2"],
        "doc_id": ["d1", "i1", "d2", "d3"],
        "relevance": [1, 1, 1, 1],
        "domain": ["OUT", "IN", "OUT", "OUT"],
    }
)


def run(rows):
    return pd.DataFrame(
        [(q, d, float(10 - i)) for q, docs in rows.items() for i, d in enumerate(docs)],
        columns=["query_id", "doc_id", "score"],
    )


A = run({"q1": ["d1", "x", "y"], "q2": ["x", "y", "d3"]})
B = run({"q1": ["x", "y", "d1"], "q2": ["d2", "d3", "x"]})


def test_domain_pair_table_by_hand():
    t = domains.pair_table({"a": A, "b": B}, POS, Q3, D3, k=2).set_index(["query_section", "target_section"])
    # q1 (sections A, B) -> d1 (C): half a positive in (A,C) and in (B,C); q2 (H) -> d2 (C, G): half in
    # (H,C) and (H,G); q2 -> d3 (G): one in (H,G). The IN positive i1 counts nowhere.
    assert t["out_positives"].to_dict() == {("A", "C"): 0.5, ("B", "C"): 0.5, ("H", "C"): 0.5, ("H", "G"): 1.5}
    assert t["out_positives"].sum() == 3  # the number of OUT positives
    # a finds d1 at rank 1 (top 2), d3 only at rank 3; b finds d2 (rank 1) and d3 (rank 2), d1 at rank 3
    assert t["R@2 a"].to_dict() == {("A", "C"): 1.0, ("B", "C"): 1.0, ("H", "C"): 0.0, ("H", "G"): 0.0}
    assert t["R@2 b"].to_dict() == {("A", "C"): 0.0, ("B", "C"): 0.0, ("H", "C"): 1.0, ("H", "G"): 1.0}
    assert t["gain"].to_dict() == {("A", "C"): -1.0, ("B", "C"): -1.0, ("H", "C"): 1.0, ("H", "G"): 1.0}
    assert t.loc[("H", "G"), "found_gain"] == 1.5


def test_out_positives_one_system_misses():
    m = domains.misses(A, B, POS, k=2, names=("a", "b"))
    assert m.astype(object).where(m.notna(), None).values.tolist() == [
        ["q1", "d1", "a", 1, 3],
        ["q2", "d2", "b", None, 1],
        ["q2", "d3", "b", 3, 2],
    ]


def test_uncoded_sides_have_no_cell():
    t = domains.pair_table({"a": A}, POS, {"q1": [], "q2": ["H04"]}, D3, k=2)
    assert set(t["query_section"]) == {"H"} and t["out_positives"].sum() == 2


@pytest.mark.slow
def test_domains_command_line_writes_the_view(cfg_factory, tmp_path, tiny_folder, capsys):
    from harness.data import load_local

    folder = tiny_folder
    data = ("dataset=local", f"dataset.path={folder}", "query_fields=TA", "target_fields=TA", "name=plain")
    execute(cfg_factory("+experiment=doc_bm25", *data, tiny=False))
    execute(cfg_factory("+experiment=doc_bm25", *data[:-1], "name=reduced", "query_reduction=tfidf", tiny=False))
    results = tmp_path / "store" / "runs" / "results.jsonl"
    out = tmp_path / "view"
    assert domains.main(["plain", "reduced", "--results", str(results), "--out", str(out)]) == 0
    t = pd.read_csv(out / "domain_pairs.csv")
    ds = load_local(folder)
    assert t["out_positives"].sum() == pytest.approx((ds.positives["domain"] == "OUT").sum())
    assert {"R@100 plain", "R@100 reduced", "gain"} <= set(t.columns)
    assert (out / "domain_pairs.png").stat().st_size > 0 and (out / "out_misses.csv").exists()
    assert "OUT positives in the top 100 of one system only" in capsys.readouterr().out
    # bad arguments: one line each, before anything is computed or printed
    afile = tmp_path / "a-file"
    afile.write_text("")
    for argv, says in [
        (["plain", "reduced", "--k", "-5"], "--k -5: expected a cut-off >= 1"),
        (["plain", "plain"], "'plain' named twice"),
        (["plain", "reduced", "--out", str(afile)], f"--out {afile}: cannot be used as a folder"),
    ]:
        with pytest.raises(SystemExit) as e:
            domains.main([*argv, "--results", str(results)])
        assert e.value.code == 2
        err = capsys.readouterr()
        assert says in err.err and err.out == "", err
    # a dataset without codes: said, not a blank view
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    for f in ("queries.parquet", "corpus.parquet"):
        pd.read_parquet(bare / f).drop(columns=[S.IPC3]).to_parquet(bare / f, index=False)
    nocodes = ("dataset=local", f"dataset.path={bare}", "query_fields=TA", "target_fields=TA")
    execute(cfg_factory("+experiment=doc_bm25", *nocodes, "name=bare1", tiny=False))
    execute(cfg_factory("+experiment=doc_bm25", *nocodes, "name=bare2", "bm25.k1=1.2", tiny=False))
    with pytest.raises(SystemExit, match="carry no IPC codes"):
        domains.main(["bare1", "bare2", "--results", str(results)])
