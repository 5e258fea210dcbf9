"""Honest selection (harness.select) and addressing systems by dataset and config (results.find)."""
import json

import numpy as np
import pandas as pd
import pytest

from harness import select as S


def test_optimism_gap_known_by_construction():
    """Two configurations, each perfect on one half of the queries and zero on the other. With the
    folds equal to the halves, training on one half always picks the configuration that scores 0
    on the other: the CV estimate is 0, best-of-grid 0.5, the gap 0.5."""
    q = ["q1", "q2", "q3", "q4"]
    scores = pd.DataFrame({"A": [1.0, 1.0, 0.0, 0.0], "B": [0.0, 0.0, 1.0, 1.0]}, index=q)
    folds = pd.Series([0, 0, 1, 1], index=q)
    out = S.cross_validate(scores, folds)
    assert out["cv_estimate"] == 0.0 and out["best_of_grid"] == 0.5 and out["optimism_gap"] == 0.5
    assert out["fold_choices"] == ["B", "A"]


def test_no_optimism_when_one_configuration_dominates():
    rng = np.random.default_rng(1)
    base = rng.random(40)
    scores = pd.DataFrame({"good": base + 0.1, "bad": base}, index=[f"q{i}" for i in range(40)])
    folds = S.stratified_folds(scores.index, {}, 5, seed=3)
    out = S.cross_validate(scores, folds)
    assert out["selected"] == "good" and out["fold_choices"] == ["good"] * 5
    assert out["optimism_gap"] == pytest.approx(0.0, abs=1e-12)
    assert out["cv_estimate"] == pytest.approx(scores["good"].mean())


def test_noise_configurations_show_a_positive_gap():
    """Twenty configurations of pure noise around one mean: the best of them looks better than it is."""
    rng = np.random.default_rng(0)
    scores = pd.DataFrame(rng.random((60, 20)), index=[f"q{i:02d}" for i in range(60)],
                          columns=[f"c{j}" for j in range(20)])
    out = S.cross_validate(scores, S.stratified_folds(scores.index, {}, 5, seed=0))
    assert out["best_of_grid"] == pytest.approx(scores.mean().max())
    assert out["optimism_gap"] > 0.02


def test_folds_are_stratified_by_out_positives_and_fixed_by_seed():
    ids = [f"q{i:02d}" for i in range(50)]
    strata = {q: i % 5 == 0 for i, q in enumerate(ids)}  # 10 queries with OUT positives
    f = S.stratified_folds(ids, strata, 5, seed=7)
    assert f.equals(S.stratified_folds(ids, strata, 5, seed=7))
    assert not f.equals(S.stratified_folds(ids, strata, 5, seed=8))
    per_fold = pd.DataFrame({"fold": f, "out": pd.Series(strata)}).groupby("fold")["out"].agg(["sum", "size"])
    assert per_fold["sum"].tolist() == [2] * 5 and per_fold["size"].tolist() == [10] * 5
    with pytest.raises(ValueError, match="folds"):
        S.stratified_folds(ids, strata, 1)


def test_guard_keeps_only_configurations_not_worse_than_the_baseline():
    q = [f"q{i}" for i in range(4)]
    out_scores = pd.DataFrame({"base": [0.1] * 4, "greedy": [0.9] * 4, "fair": [0.3] * 4}, index=q)
    all_scores = pd.DataFrame({"base": [0.5] * 4, "greedy": [0.2] * 4, "fair": [0.5] * 4}, index=q)
    assert S.choose(out_scores, q) == "greedy"
    assert S.choose(out_scores, q, all_scores, "base") == "fair"


def test_paired_tests_are_holm_corrected():
    q = [f"q{i}" for i in range(30)]
    rng = np.random.default_rng(2)
    rows = lambda shift: pd.DataFrame([{"subset": s, "measure": "nDCG@100", "query_id": x,  # noqa: E731
                                        "value": float(v + shift * (s == "OUT"))}
                                       for s in ("ALL", "OUT") for x, v in zip(q, rng.random(30))])
    t = S.paired_tests({"sys": rows(0.3), "base": rows(0.0)}, "sys", "base")
    assert set(t.subset) == {"ALL", "OUT"}
    p = t["p_t"].to_numpy()
    order = np.argsort(p)
    m = len(p)
    want = np.minimum(1, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    np.testing.assert_allclose(t["p_t_holm"].to_numpy()[order], want)


# ------------------------------------------------------------------ addressing rows
def _row(name, key, dataset="local", k1=0.9, fusion_k=None, path="/d"):
    return {"experiment": name, "scores_key": key, "dataset": dataset, "run_file": f"/x/{key}/run.trec", "tag": key,
            "config": {"bm25": {"k1": k1}, "fusion": {"k": fusion_k} if fusion_k else None,
                       "dataset": {"path": path}, "search": {"threads": 2}}}


def test_find_filters_by_dataset_and_config_and_takes_the_newest(tmp_path):
    from harness.results import find

    res = tmp_path / "results.jsonl"
    rows = [_row("doc_bm25", "k1", k1=0.9), _row("doc_bm25", "k2", k1=1.2), _row("doc_bm25", "k3", dataset="mini"),
            _row("doc_bm25", "k4", k1=0.9)]  # k4: k1's configuration run again (other data): newer
    rows[3]["config"]["search"]["threads"] = 8  # a runtime setting: still the same configuration
    res.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit, match="bm25.k1"):
        find(res, "doc_bm25", dataset="local")
    assert find(res, "doc_bm25", dataset="local", where=["bm25.k1=0.9"])["scores_key"] == "k4"
    assert find(res, "doc_bm25", dataset="local", where=["bm25.k1=1.2"])["scores_key"] == "k2"
    assert find(res, "doc_bm25", dataset="mini")["scores_key"] == "k3"
    with pytest.raises(SystemExit, match="none with"):
        find(res, "doc_bm25", where=["bm25.k1=2"])


def test_select_reads_a_finished_sweep_and_never_searches(tmp_path, capsys, caplog):
    """A small sweep through harness.sweep, then harness.select over its score artifacts."""
    import logging

    from harness import select as sel
    from harness import sweep
    from conftest import tiny_overrides

    spec = tmp_path / "small.yaml"
    spec.write_text("description: test\nblocks:\n  b:\n    +experiment: doc_bm25,doc_dense,rrf_doc\n"
                    "  r:\n    +experiment: rrf_doc\n    rerank: ipc3_disjoint\n    rerank.weight: 0.2,1.0\n")
    root = tmp_path / "root"
    assert sweep.main([f"sweep={spec}", f"root={root}", "query_fields=TA", "target_fields=TA", *tiny_overrides()]) == 0
    caplog.set_level(logging.INFO)
    caplog.clear()
    results = root / "runs" / "results.jsonl"
    assert sel.main(["sweep=small", "folds=3", "subset=OUT", "guard=ALL", "--results", str(results)]) == 0
    assert not [r for r in caplog.records if r.getMessage().startswith("building")]
    out = capsys.readouterr().out
    assert "cross-validated estimate" in out and "optimism gap" in out and "Holm" in out
    saved = json.loads((root / "runs" / "report" / "small" / "select-OUT.json").read_text())
    assert saved["configurations"] == 5 and saved["baseline"].startswith("rrf60-bm25+dense")
    assert saved["best_of_grid"] - saved["cv_estimate"] == pytest.approx(saved["optimism_gap"])
    assert len(saved["tests"]) == 6 and all(t["p_t_holm"] >= t["p_t"] for t in saved["tests"])
