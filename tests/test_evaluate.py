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
    qrels = pd.DataFrame(
        [
            (f"q{q}", d, int(rng.integers(1, 3)))
            for q in range(20)
            for d in rng.choice(docs, int(rng.integers(1, 15)), replace=False)
        ],
        columns=["query_id", "doc_id", "relevance"],
    )
    # scores rounded to make ties common; some queries retrieve nothing
    run = pd.DataFrame(
        [
            (f"q{q}", d, float(np.round(rng.random(), 1)))
            for q in range(17)
            for d in rng.choice(docs, 150, replace=False)
        ],
        columns=["query_id", "doc_id", "score"],
    )
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
    from test_data import d, hub_folder, q, r

    from harness.data import load_local
    from harness.evaluate import score

    path = hub_folder(
        tmp_path / "s",
        [q("Q1", ["A61"]), q("Q2", ["G06"])],
        [d("D1", ["A61"]), d("D2", ["B65"])],
        [r("Q1", "D1", 1, "IN"), r("Q1", "D2", 1, "OUT"), r("Q2", "D1", 1, "OUT")],
    )
    ds = load_local(path)
    run = pd.DataFrame(
        [("Q1", "D1", 2.0), ("Q1", "D2", 1.0), ("Q2", "D2", 1.0)], columns=["query_id", "doc_id", "score"]
    )
    m = means(score(run, ds)).set_index(["subset", "measure"])
    assert m.loc[("IN", "R@100"), "queries"] == 1  # Q2 has no IN positive: not averaged as 0
    assert m.loc[("IN", "R@100"), "mean"] == 1.0
    assert m.loc[("OUT", "R@100"), "queries"] == 2
    assert m.loc[("OUT", "R@100"), "mean"] == pytest.approx(0.5)


def test_unknown_measure():
    with pytest.raises(ValueError, match="ir-measures measure name"):
        per_query(
            pd.DataFrame(columns=["query_id", "doc_id", "score"]),
            pd.DataFrame([("q", "a", 1)], columns=["query_id", "doc_id", "relevance"]),
            ["nDCG@x"],
        )


# ------------------------------------------------------------------ judged non-relevant documents, grades
def _judged_case():
    """Q1: D1 relevant, D2 a sampled negative (NC, relevance 0), D3 never judged. Q2: only a
    negative, so it has no positive and is not scored at all."""
    from harness.data.qrels import judgments

    pos = pd.DataFrame({"query_id": ["Q1"], "doc_id": ["D1"], "relevance": [1], "domain": ["IN"]})
    judged = pd.DataFrame({"query_id": ["Q1", "Q1", "Q2"], "doc_id": ["D1", "D2", "D9"]})
    return judgments(pos, judged, "ALL")


def test_sampled_negatives_count_as_judged():
    """Worked by hand: top 3 = D1 (relevant), D2 (judged non-relevant), D3 (unjudged): Judged@3 is
    2/3 while P@3 is 1/3; Bpref is 1 when the relevant document precedes the negative, 0 after it."""
    qrels = _judged_case()
    assert sorted(qrels.itertuples(index=False, name=None)) == [("Q1", "D1", 1), ("Q1", "D2", 0)]
    run = pd.DataFrame({"query_id": ["Q1"] * 3, "doc_id": ["D1", "D2", "D3"], "score": [3.0, 2.0, 1.0]})
    got = per_query(run, qrels, ["Judged@3", "P@3", "Bpref"]).set_index("measure")["value"]
    assert got["Judged@3"] == pytest.approx(2 / 3) and got["P@3"] == pytest.approx(1 / 3) and got["Bpref"] == 1.0
    swapped = run.assign(score=[2.0, 3.0, 1.0])
    assert per_query(swapped, qrels, ["Bpref"])["value"].tolist() == [0.0]


def test_score_reads_the_judgments_with_negatives():
    class Data:  # what score() needs of a dataset
        def judgments(self, name):
            return _judged_case()

    from harness.evaluate import score

    run = pd.DataFrame({"query_id": ["Q1", "Q1"], "doc_id": ["D2", "D3"], "score": [2.0, 1.0]})
    t = score(run, Data(), ["Judged@2"], subsets=("ALL",))
    assert t["query_id"].tolist() == ["Q1"] and t["value"].tolist() == [0.5]


@pytest.mark.parametrize("seed", range(3))
def test_zero_rows_change_no_measure_that_counts_relevant_documents(seed):
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(300)]
    pos = pd.DataFrame(
        [
            (f"q{q}", d, int(rng.integers(1, 3)))
            for q in range(15)
            for d in rng.choice(docs[:150], int(rng.integers(1, 10)), replace=False)
        ],
        columns=["query_id", "doc_id", "relevance"],
    )
    zeros = pd.DataFrame(
        [(f"q{q}", d, 0) for q in range(18) for d in rng.choice(docs[150:], 20, replace=False)],
        columns=["query_id", "doc_id", "relevance"],
    )  # q15-q17: negatives only
    run = pd.DataFrame(
        [
            (f"q{q}", d, float(np.round(rng.random(), 1)))
            for q in range(18)
            for d in rng.choice(docs, 120, replace=False)
        ],
        columns=["query_id", "doc_id", "score"],
    )
    ms = ["nDCG@100", "R@100", "P@10", "AP@100", "RR"]
    a = per_query(run, pos, ms)
    b = per_query(run, pd.concat([pos, zeros]), ms)
    pd.testing.assert_frame_equal(a, b)
    assert per_query(run, pd.concat([pos, zeros]), ["Judged@10"])["value"].gt(0).any()


def test_measures_that_read_grade_values_are_refused_on_scaled_grades():
    from harness.config import ConfigError
    from harness.evaluate import check_grade_scaling, parse_measures

    fractional = pd.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "b"], "relevance": [0.5, 1.0]})
    integer = fractional.assign(relevance=[1, 2])
    for name in ("ERR@10", 'nDCG(dcg="exp-log2")@10', "P(rel=2)@10"):
        with pytest.raises(ConfigError, match=r"multiplied by 10"):
            check_grade_scaling(parse_measures([name]), fractional)
        check_grade_scaling(parse_measures([name]), integer)  # integer grades: nothing is scaled
    check_grade_scaling(parse_measures(["nDCG@100", "R@100", "P@10", "AP", "Judged@10", "Bpref"]), fractional)
