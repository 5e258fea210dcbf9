"""Learning to rank (harness.ltr): features by hand, cross-fitting that never sees a query's own
judgments, determinism, deep candidates, and the stage through harness.run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness import ltr
from harness.config import ConfigError
from harness.run import execute
from harness.runs import read_trec

TA = ("query_fields=TA", "target_fields=TA")
PARAMS = {
    "method": "lambdamart",
    "features": ["doc", "ipc", "run"],
    "out_weight": 1.0,
    "folds": 3,
    "seed": 0,
    "n_estimators": 30,
    "learning_rate": 0.1,
    "num_leaves": 7,
    "min_child_samples": 5,
    "truncation": 100,
    "out_k": 100,
}


def run_table(rows):
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])


# ------------------------------------------------------------------ features, by hand
def test_candidates_are_the_union_of_each_runs_top_depth():
    a = run_table([("q", "d1", 3.0), ("q", "d2", 2.0), ("q", "d3", 1.0)])
    b = run_table([("q", "d4", 0.9), ("q", "d1", 0.8)])
    assert ltr.candidates([a, b], 2)["doc_id"].tolist() == ["d1", "d2", "d4"]


def test_run_features_mark_what_a_run_missed():
    a = run_table([("q", "d1", 3.0), ("q", "d2", 1.0)])
    b = run_table([("q", "d2", 0.5)])
    c = ltr.candidates([a, b], 10)
    f = ltr.run_features(c, [a, b], depth=10).set_index(c["doc_id"])
    assert f.loc["d1", "r0_rank"] == 1 and f.loc["d2", "r0_rank"] == 2
    assert f.loc["d1", "r0_norm"] == 1.0 and f.loc["d2", "r0_norm"] == 0.0  # (1 - 1) / (3 - 1)
    assert f.loc["d1", "r1_rank"] == 11 and np.isnan(f.loc["d1", "r1_score"])  # missed: depth + 1, no score
    assert f.loc["d1", "n_runs"] == 1 and f.loc["d2", "n_runs"] == 2


def test_passage_features_count_and_average_the_retrieved_passages():
    fam = run_table([("q", "d1", 5.0)])
    units = run_table([("q", "d1#0", 5.0), ("q", "d1#3", 1.0), ("q", "d2#1", 0.5)])
    f = ltr.run_features(ltr.candidates([fam], 10), [fam], 10, passages={0: units})
    assert f.loc[0, "r0_npass"] == 2 and f.loc[0, "r0_avgp"] == 3.0


def test_ipc_features_by_hand():
    c = pd.DataFrame({"query_id": ["q", "q", "q"], "doc_id": ["same", "far", "uncoded"]})
    q3 = {"q": ["A01", "B02"]}
    d3 = {"same": ["A01", "C03"], "far": ["H04"], "uncoded": []}
    full = {"q": "A01B 1/00 B02C 3/00"}
    dfull = {"same": "A01B 7/00 C03D 1/00", "far": "H04L 9/00", "uncoded": ""}
    f = ltr.ipc_features(c, q3, d3, full, dfull).set_index(c["doc_id"])
    # same: IPC3 {A01,B02} & {A01,C03} = {A01}, union of 3; sections {A,B} & {A,C} = {A}, union 3;
    # IPC4 {A01B,B02C} & {A01B,C03D} = {A01B}
    assert f.loc["same", "ipc3_shared"] == 1 and f.loc["same", "ipc3_jaccard"] == pytest.approx(1 / 3)
    assert f.loc["same", "ipc3_disjoint"] == 0 and f.loc["same", "section_jaccard"] == pytest.approx(1 / 3)
    assert f.loc["same", "ipc4_shared"] == 1
    assert f.loc["far", "ipc3_disjoint"] == 1 and f.loc["far", "section_shared"] == 0
    assert np.isnan(f.loc["uncoded", "ipc3_disjoint"])  # unknown domain: never called disjoint
    assert f.loc["uncoded", "d_ipc3"] == 0 and f.loc["same", "q_ipc3"] == 2


def test_ipc4_reads_ipc_codes_wherever_they_stand():
    assert ltr.ipc4("A61K 31/00; G06F16/00") == {"A61K", "G06F"}
    assert ltr.ipc4(["H04L 9/32", "H04L 67/00"]) == {"H04L"}
    assert ltr.ipc4("4.22 5.3") == {"4.22", "5.3"}  # another scheme: the first four characters
    assert ltr.ipc4(None) == set() and ltr.ipc4("") == set()


def test_labels_grade_out_positives_apart():
    c = pd.DataFrame({"query_id": ["q"] * 3, "doc_id": ["i", "o", "n"]})
    pos = pd.DataFrame({"query_id": ["q", "q"], "doc_id": ["i", "o"], "relevance": [1, 1], "domain": ["IN", "OUT"]})
    assert ltr.labels(c, pos).tolist() == [1, 2, 0]


def test_feature_families():
    assert {
        c: ltr.family_of(c) for c in ("r0_rank", "n_runs", "q_len", "ipc3_disjoint", "section_shared", "doc_len")
    } == {
        "r0_rank": "run",
        "n_runs": "run",
        "q_len": "run",
        "ipc3_disjoint": "ipc",
        "section_shared": "ipc",
        "doc_len": "doc",
    }


# ------------------------------------------------------------------ cross-fitting
def synthetic(n_queries=30, n_cands=40, seed=0, deep=False):
    """A features table where relevance follows ``signal`` (and, ``deep``, the input run ranks
    positives below 100)."""
    rng = np.random.default_rng(seed)
    rows, pos = [], []
    for i in range(n_queries):
        q = f"q{i:02d}"
        signal = rng.normal(size=n_cands)
        rel = np.argsort(-signal)[:4]
        for j in range(n_cands):
            rank = (101 + j) if (deep and j in rel) else (j + 1)
            rows.append({"query_id": q, "doc_id": f"d{j:03d}", "r0_rank": float(rank), "doc_len": signal[j]})
        for k, j in enumerate(rel):
            pos.append({"query_id": q, "doc_id": f"d{j:03d}", "relevance": 1, "domain": "OUT" if k == 0 else "IN"})
    return pd.DataFrame(rows), pd.DataFrame(pos)


def test_a_held_folds_judgments_never_change_its_ranking():
    feats, pos = synthetic()
    fold = ltr.folds_of(pos, PARAMS["folds"], PARAMS["seed"])
    held = set(fold.index[fold == 0])
    # Other positives for the held fold's queries (same count and domains, so the folds stay the same).
    rng = np.random.default_rng(1)
    shuffled = pos.copy()
    mask = shuffled["query_id"].isin(held)
    shuffled.loc[mask, "doc_id"] = [f"d{j:03d}" for j in rng.choice(40, mask.sum(), replace=False) % 40]
    assert ltr.folds_of(shuffled, PARAMS["folds"], PARAMS["seed"]).equals(fold)

    before, _, _ = ltr.learned_run(feats, pos, PARAMS)
    after, _, _ = ltr.learned_run(feats, shuffled, PARAMS)
    mine = before["query_id"].isin(held)
    pd.testing.assert_frame_equal(
        before[mine].reset_index(drop=True), after[after["query_id"].isin(held)].reset_index(drop=True)
    )
    assert not before[~mine].reset_index(drop=True).equals(after[~after["query_id"].isin(held)].reset_index(drop=True))
    # The check can fail: a model fit on every query (its own judgments included) moves with them.
    cols = ["r0_rank", "doc_len"]
    leaky = [
        ltr.fit(feats[cols], ltr.labels(feats, p), feats["query_id"], PARAMS).predict(feats[cols])
        for p in (pos, shuffled)
    ]
    assert not np.allclose(leaky[0][feats["query_id"].isin(held)], leaky[1][feats["query_id"].isin(held)])


def test_learning_is_deterministic():
    feats, pos = synthetic(seed=3)
    a, _, imp_a = ltr.learned_run(feats, pos, PARAMS)
    b, _, imp_b = ltr.learned_run(feats, pos, PARAMS)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(imp_a, imp_b)


def test_deep_candidates_reach_the_top_100():
    """Positives that every input run ranks below 100 come into the learned top 100 when the
    candidates go deeper (ltr.depth, search.k): R@100 rises, not only the order inside it."""
    feats, pos = synthetic(n_queries=30, n_cands=40, deep=True)
    run, _, _ = ltr.learned_run(feats, pos, PARAMS)
    top = run.merge(pos, on=["query_id", "doc_id"])
    assert len(top) > 0.8 * len(pos)  # out-of-fold, most positives (all at input ranks > 100) in the top 100


def test_ltr_depth_beyond_search_k_is_refused(cfg_factory):
    with pytest.raises(ConfigError, match=r"ltr.depth=200 > search.k=100.*Fix"):
        execute(cfg_factory("+experiment=doc_bm25", "ltr=lambdamart", "ltr.depth=200"))
    with pytest.raises(ConfigError, match=r"ltr.features=.*expected"):
        execute(cfg_factory("+experiment=doc_bm25", "ltr=lambdamart", "ltr.features=[run,prior]"))


def test_ltr_inside_a_fused_run_is_refused(cfg_factory):
    with pytest.raises(ConfigError, match=r"'ltr' inside a run entry.*learned on its own"):
        execute(cfg_factory("+experiment=rrf_doc", "fusion.runs=[{backend: bm25, ltr: lambdamart},{backend: dense}]"))


# ------------------------------------------------------------------ the stage
@pytest.mark.slow
def test_learned_run_through_harness_run_is_out_of_fold_and_cached(cfg_factory, tiny_folder, caplog):
    """On the tiny set through harness.run: a qrels file whose held-fold judgments are shuffled
    gives that fold the same ranking (the artifact is new: it is keyed by the qrels)."""
    data = ("dataset=local", f"dataset.path={tiny_folder}", "ltr=lambdamart", "ltr.folds=3", "ltr.min_child_samples=5")
    row = execute(cfg_factory("+experiment=doc_bm25", *TA, *data, tiny=False))
    folder = __import__("pathlib").Path(row["run_file"]).parent
    assert sorted(p.name for p in (folder / "models").iterdir()) == ["fold0.txt", "fold1.txt", "fold2.txt"]
    imp = pd.read_csv(folder / "importance.csv")
    assert set(imp["family"]) == {"run", "ipc", "doc"} and row["ltr"] == "lambdamart(doc+ipc+run,ow=1)"
    assert ".ltr-dir-ow1." in row["tag"]

    again = execute(cfg_factory("+experiment=doc_bm25", *TA, *data, tiny=False))
    assert again["run_file"] == row["run_file"]  # reused

    qrels = pd.read_parquet(tiny_folder / "qrels_all.parquet")
    from harness.data import load_local

    ds = load_local(tiny_folder)
    fold = ltr.folds_of(ds.positives, 3, 0)
    held = list(fold.index[fold == 0])
    docs = sorted(ds.doc_ipc3)
    rng = np.random.default_rng(0)
    m = qrels["query_id"].isin(held) & (qrels["relevance_score"] > 0)
    qrels.loc[m, "relevant_id"] = rng.choice(
        [d for d in docs if d not in set(qrels["relevant_id"])], m.sum(), replace=False
    )
    qrels.to_parquet(tiny_folder / "qrels_all.parquet", index=False)
    assert ltr.folds_of(load_local(tiny_folder).positives, 3, 0).equals(fold)

    shuffled = execute(cfg_factory("+experiment=doc_bm25", *TA, *data, tiny=False))
    assert shuffled["run_file"] != row["run_file"]
    a, b = read_trec(row["run_file"]), read_trec(shuffled["run_file"])
    pd.testing.assert_frame_equal(
        a[a["query_id"].isin(held)].reset_index(drop=True), b[b["query_id"].isin(held)].reset_index(drop=True)
    )
    assert (
        not a[~a["query_id"].isin(held)]
        .reset_index(drop=True)
        .equals(b[~b["query_id"].isin(held)].reset_index(drop=True))
    )
