"""ir-measures (pytrec_eval provider) against an independent implementation written here."""
import math

import numpy as np
import pandas as pd
import pytest

from harness.evaluate import means, per_query


def ref_ndcg_recall(run: pd.DataFrame, qrels: pd.DataFrame, k: int = 100):
    """Textbook nDCG@k (gain = rel, log2(rank+1)) and R@k. Ideal ranking and recall's denominator
    from all judged relevant documents; ties ranked by doc id descending as trec_eval does."""
    out = {}
    for qid, qr in qrels.groupby("query_id"):
        rel = dict(zip(qr.doc_id, qr.relevance))
        r = run[run.query_id == qid].sort_values(["score", "doc_id"], ascending=[False, False]).head(k)
        dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(r.doc_id))
        ideal = sorted((v for v in rel.values() if v > 0), reverse=True)[:k]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        n_rel = sum(1 for v in rel.values() if v > 0)
        out[qid] = (dcg / idcg if idcg else 0.0, sum(1 for d in r.doc_id if rel.get(d, 0) > 0) / n_rel)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_on_random_runs(seed):
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(300)]
    qrels = pd.DataFrame([(f"q{q}", d, int(rng.integers(1, 3))) for q in range(20)
                          for d in rng.choice(docs, int(rng.integers(1, 15)), replace=False)],
                         columns=["query_id", "doc_id", "relevance"])
    # scores rounded to make ties common; some queries retrieve nothing
    run = pd.DataFrame([(f"q{q}", d, float(np.round(rng.random(), 1))) for q in range(17)
                        for d in rng.choice(docs, 150, replace=False)], columns=["query_id", "doc_id", "score"])
    got = per_query(run, qrels).pivot(index="query_id", columns="measure", values="value")
    ref = ref_ndcg_recall(run, qrels)
    assert set(got.index) == set(ref)
    for qid, (ndcg, rec) in ref.items():
        assert got.loc[qid, "nDCG@100"] == pytest.approx(ndcg, abs=1e-6)
        assert got.loc[qid, "R@100"] == pytest.approx(rec, abs=1e-6)
    # queries with positives but no retrieved documents count as 0
    assert got.loc["q19", "nDCG@100"] == 0.0


def test_ideal_comes_from_qrels_not_from_run():
    qrels = pd.DataFrame([("q", "a", 1), ("q", "b", 1)], columns=["query_id", "doc_id", "relevance"])
    run = pd.DataFrame([("q", "a", 1.0)], columns=["query_id", "doc_id", "score"])
    got = per_query(run, qrels).set_index("measure")["value"]
    assert got["R@100"] == pytest.approx(0.5)
    assert got["nDCG@100"] == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_queries_without_positives_in_a_subset_are_left_out(tmp_path):
    from harness.data import load_local
    from harness.evaluate import score
    from test_data import d, hub_folder, q, r

    path = hub_folder(tmp_path / "s", [q("Q1", ["A61"]), q("Q2", ["G06"])], [d("D1", ["A61"]), d("D2", ["B65"])],
                      [r("Q1", "D1", 1, "IN"), r("Q1", "D2", 1, "OUT"), r("Q2", "D1", 1, "OUT")])
    ds = load_local(path)
    run = pd.DataFrame([("Q1", "D1", 2.0), ("Q1", "D2", 1.0), ("Q2", "D2", 1.0)], columns=["query_id", "doc_id", "score"])
    m = means(score(run, ds)).set_index(["subset", "measure"])
    assert m.loc[("IN", "R@100"), "queries"] == 1  # Q2 has no IN positive: not averaged as 0
    assert m.loc[("IN", "R@100"), "mean"] == 1.0
    assert m.loc[("OUT", "R@100"), "queries"] == 2
    assert m.loc[("OUT", "R@100"), "mean"] == pytest.approx(0.5)


def test_unknown_measure():
    with pytest.raises(ValueError, match="ir-measures measure name"):
        per_query(pd.DataFrame(columns=["query_id", "doc_id", "score"]),
                  pd.DataFrame([("q", "a", 1)], columns=["query_id", "doc_id", "relevance"]), ["nDCG@x"])
