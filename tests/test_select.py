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
    scores = pd.DataFrame(
        rng.random((60, 20)), index=[f"q{i:02d}" for i in range(60)], columns=[f"c{j}" for j in range(20)]
    )
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


def test_significance_guard_is_scipys_one_sided_paired_t_test():
    """guard_alpha: a configuration passes when scipy's ttest_rel(config, base, alternative="less")
    gives p >= alpha; the vectorised form in harness.significance agrees with scipy on every column,
    and several guarding subsets must all pass."""
    from scipy.stats import ttest_rel

    from harness.significance import guard_pass

    rng = np.random.default_rng(3)
    q = [f"q{i}" for i in range(40)]
    base = rng.random(40)
    cols = {"base": base, **{f"c{j}": base + rng.normal(-0.05 + 0.01 * j, 0.1, 40) for j in range(8)}}
    m = pd.DataFrame(cols, index=q)
    d = m.sub(m["base"], axis=0)
    got = guard_pass(d.sum().to_numpy(), (d**2).sum().to_numpy(), 40.0, 0.05)
    want = [c == "base" or ttest_rel(m[c], m["base"], alternative="less").pvalue >= 0.05 for c in m]
    assert list(got) == want and 0 < sum(want) < len(want)  # both outcomes occur
    target = pd.DataFrame(dict.fromkeys(m, 0.0) | {c: [1.0 + j] * 40 for j, c in enumerate(m)}, index=q)
    best_passing = max((c for c, ok in zip(m, want) if ok), key=lambda c: target[c].mean())
    assert S.choose(target, q, m, "base", alpha=0.05) == best_passing
    # a second guard that only the baseline passes leaves the baseline
    strict = pd.DataFrame({c: (base if c == "base" else base - 1.0) for c in m}, index=q)
    assert S.choose(target, q, [m, strict], "base", alpha=0.05) == "base"


def test_the_final_choice_guards_on_every_query_of_the_guarding_subset():
    """The choice on all queries reads each guard on its own subset's queries: here c loses ALL on
    the two queries with OUT positives and wins it on the two without, so it passes an ALL guard on
    all four; the guard read on the OUT subset's queries alone would drop it."""
    q = ["q0", "q1", "q2", "q3"]
    out = pd.DataFrame({"base": [0.1, 0.1], "c": [0.5, 0.5]}, index=q[:2])  # q2, q3: no OUT positive
    all_ = pd.DataFrame({"base": [0.5, 0.5, 0.5, 0.5], "c": [0.4, 0.4, 0.7, 0.7]}, index=q)
    folds = pd.Series([0, 1, 0, 1], index=q)
    assert S.cross_validate(out, folds, all_, "base")["selected"] == "c"
    assert S.choose(out, out.index, all_, "base") == "base"  # what reading the guard on OUT's queries did


def test_holm_matches_the_formula():
    p = np.random.default_rng(2).random(6) ** 3
    order = np.argsort(p)
    m = len(p)
    want = np.minimum(1, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    np.testing.assert_allclose(S.holm(p)[order], want)


# ------------------------------------------------------------------ significance after selection
def _noise_grid(seed: int, configs: int = 60, queries: int = 80) -> pd.DataFrame:
    """A baseline and ``configs`` configurations that are the baseline plus pure noise per query:
    none of them is better, so any test that says one is should do so in about 5% of grids."""
    rng = np.random.default_rng(seed)
    base = rng.beta(2, 5, queries)
    scores = pd.DataFrame(
        base[:, None] + rng.normal(0, 0.1, (queries, configs)),
        index=[f"q{i:03d}" for i in range(queries)],
        columns=[f"c{j}" for j in range(configs)],
    )
    scores["base"] = base
    return scores


def _rejections(seeds=range(200)):
    from harness.compare import paired
    from harness.significance import cv_test, max_statistic_test

    held, t_test, grid, naive = [], [], [], []
    for seed in seeds:
        scores = _noise_grid(seed)
        folds = S.stratified_folds(scores.index, {}, 5, seed=seed)
        cv = S.cross_validate(scores, folds)
        base = scores["base"]
        diffs = scores.sub(base, axis=0)
        held.append(cv_test(diffs, folds, seed=seed, resamples=499, bootstrap=0)["target"]["p"])
        t_test.append(paired(base.loc[cv["held_out"].index].to_numpy(), cv["held_out"].to_numpy())["p_t"])
        grid.append(
            max_statistic_test(diffs.to_numpy(), list(scores.columns).index(cv["selected"]), seed, 499)[
                "p_max_statistic"
            ]
        )
        naive.append(paired(base.to_numpy(), scores[cv["selected"]].to_numpy())["p_t"])  # the old test
    return [float(np.mean(np.array(p) < 0.05)) for p in (held, t_test, grid, naive)]


def test_selection_tests_keep_their_level_on_pure_noise():
    """Sixty noise configurations around the baseline, 200 seeds. The selection-aware test of the
    cross-validated choice rejects at p < 0.05 in about 5% of seeds (binomial sd 1.5 points), the
    best-of-grid test corrected by the max statistic at most that often. The old test (the
    best-of-grid winner tested on the queries that chose it) rejects in most seeds, and even a
    t-test of the out-of-fold scores rejects too often: the folds' choices share queries."""
    held, t_test, grid, naive = _rejections()
    assert 0.01 <= held <= 0.09
    assert grid <= 0.08
    assert naive >= 0.5
    assert t_test > 0.09


def test_held_out_test_finds_a_real_gain_and_agrees_with_cross_validate():
    from harness.significance import cv_test

    scores = _noise_grid(3)
    scores["good"] = scores["base"] + 0.05 + np.random.default_rng(9).normal(0, 0.05, len(scores))
    folds = S.stratified_folds(scores.index, {}, 5, seed=0)
    cv = S.cross_validate(scores, folds)
    h = cv_test(scores.sub(scores["base"], axis=0), folds, resamples=999, bootstrap=999)["target"]
    assert cv["fold_choices"] == ["good"] * 5 and h["p"] == pytest.approx(1 / 1000)
    assert h["delta"] == pytest.approx(cv["cv_estimate"] - scores["base"].mean())
    assert h["ci95_low"] < h["delta"] < h["ci95_high"] and 0.05 < h["ci95_high"] < 0.08


def test_held_out_test_redoes_the_guarded_choice():
    """With a guard, the vectorised procedure picks what cross_validate picks on every fold: the
    observed delta equals the pooled held-out scores' mean difference."""
    from harness.significance import cv_test

    rng = np.random.default_rng(5)
    out_scores, all_scores = _noise_grid(5), _noise_grid(6)
    out_scores.iloc[:, :10] += 0.03  # better on OUT ...
    all_scores.iloc[:, :10] -= rng.random(10) * 0.05  # ... but some lose on ALL
    folds = S.stratified_folds(out_scores.index, {}, 4, seed=1)
    cv = S.cross_validate(out_scores, folds, all_scores, "base")
    h = cv_test(
        out_scores.sub(out_scores["base"], axis=0),
        folds,
        all_scores.sub(all_scores["base"], axis=0),
        resamples=99,
        bootstrap=0,
    )["target"]
    assert h["delta"] == pytest.approx(cv["cv_estimate"] - out_scores["base"].mean())


# ------------------------------------------------------------------ addressing rows
def _row(name, key, dataset="local", k1=0.9, fusion_k=None, path="/d"):
    return {
        "experiment": name,
        "scores_key": key,
        "dataset": dataset,
        "run_file": f"/x/{key}/run.trec",
        "tag": key,
        "config": {
            "bm25": {"k1": k1},
            "fusion": {"k": fusion_k} if fusion_k else None,
            "dataset": {"path": path},
            "search": {"threads": 2},
        },
    }


def test_find_filters_by_dataset_and_config_and_takes_the_newest(tmp_path):
    from harness.results import find

    res = tmp_path / "results.jsonl"
    rows = [
        _row("doc_bm25", "k1", k1=0.9),
        _row("doc_bm25", "k2", k1=1.2),
        _row("doc_bm25", "k3", dataset="mini"),
        _row("doc_bm25", "k4", k1=0.9),
    ]  # k4: k1's configuration run again (other data): newer
    rows[3]["config"]["search"]["threads"] = 8  # a runtime setting: still the same configuration
    res.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit, match="bm25.k1"):
        find(res, "doc_bm25", dataset="local")
    assert find(res, "doc_bm25", dataset="local", where=["bm25.k1=0.9"])["scores_key"] == "k4"
    assert find(res, "doc_bm25", dataset="local", where=["bm25.k1=1.2"])["scores_key"] == "k2"
    assert find(res, "doc_bm25", dataset="mini")["scores_key"] == "k3"
    with pytest.raises(SystemExit, match="none with"):
        find(res, "doc_bm25", where=["bm25.k1=2"])


@pytest.mark.slow
def test_select_reads_a_finished_sweep_and_never_searches(tmp_path, capsys, caplog):
    """A small sweep through harness.sweep, then harness.select over its score artifacts."""
    import logging

    from conftest import tiny_overrides

    from harness import select as sel
    from harness import sweep

    spec = tmp_path / "small.yaml"
    spec.write_text(
        "description: test\nblocks:\n  b:\n    +experiment: doc_bm25,doc_dense,rrf_doc\n"
        "  r:\n    +experiment: rrf_doc\n    rerank: ipc3_disjoint\n    rerank.weight: 0.2,1.0\n"
    )
    root = tmp_path / "root"
    assert sweep.main([f"sweep={spec}", f"root={root}", "query_fields=TA", "target_fields=TA", *tiny_overrides()]) == 0
    caplog.set_level(logging.INFO)
    caplog.clear()
    results = root / "runs" / "results.jsonl"
    assert sel.main(["sweep=small", "folds=3", "subset=OUT", "guard=ALL", "--results", str(results)]) == 0
    assert not [r for r in caplog.records if r.getMessage().startswith("building")]
    out = capsys.readouterr().out
    assert "cross-validated estimate" in out and "optimism gap" in out and "Holm" in out
    head = [line for line in out.splitlines() if line.startswith("held-out test:")]
    assert len(head) == 1 and "95% CI" in head[0] and "p = " in head[0]
    saved = json.loads((root / "runs" / "report" / "small" / "select-OUT.json").read_text())
    h = saved["held_out_test"]
    assert h["ci95_low"] <= h["delta"] <= h["ci95_high"] and h["delta"] == pytest.approx(h["mean"] - h["baseline_mean"])
    assert h["mean"] == pytest.approx(saved["cv_estimate"]) and saved["best_of_grid_test"]["candidates"] == 5
    assert saved["configurations"] == 5 and saved["baseline"].startswith("rrf60-bm25+dense")
    assert saved["best_of_grid"] - saved["cv_estimate"] == pytest.approx(saved["optimism_gap"])
    assert len(saved["tests"]) == 6 and all(t["p_holm"] >= t["p"] for t in saved["tests"])


def test_filters_that_leave_nothing_say_which_and_a_folder_matches_in_any_spelling(tmp_path):
    from harness.results import find

    res = tmp_path / "results.jsonl"
    folder = tmp_path / "data"
    rows = [_row("doc_bm25", "k1", path=str(folder)), _row("rrf_doc", "k2", fusion_k=60, path=str(folder))]
    res.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert find(res, "doc_bm25", dataset=str(folder) + "/")["scores_key"] == "k1"
    with pytest.raises(SystemExit, match=r"no row of the table has the key 'bm25.kk' \(mistyped\? close: \['bm25.k1'"):
        find(res, "doc_bm25", where=["bm25.kk=0.9"])
    with pytest.raises(SystemExit, match=r"--where fusion.k=60: these rows do not have 'fusion.k'.*every system"):
        find(res, "doc_bm25", where=["fusion.k=60"])
    with pytest.raises(SystemExit, match=r"--where bm25.k1=2: they have bm25.k1 in \['0.9'\]"):
        find(res, "doc_bm25", where=["bm25.k1=2"])
    with pytest.raises(SystemExit, match=r"--dataset 'elsewhere' matches none of them"):
        find(res, "doc_bm25", dataset="elsewhere")


# ------------------------------------------------------------------ nested selection over learned rows
def _learned_noise_tables(seed: int, queries: int = 45, cands: int = 20, configs: int = 3, folds: int = 3):
    """A baseline run and ``configs`` LambdaRank rows learned on features that carry no signal:
    per-query scores (select's tables) and the rows' nested scores, as the stages write them."""
    from harness import ltr
    from harness.data.qrels import subset
    from harness.evaluate import per_query

    rng = np.random.default_rng(seed)
    qids = [f"q{i:02d}" for i in range(queries)]
    feats = pd.DataFrame([{"query_id": q, "doc_id": f"d{j:02d}"} for q in qids for j in range(cands)]).assign(
        r0_score=rng.normal(size=queries * cands), r1_score=rng.normal(size=queries * cands)
    )
    pos = pd.DataFrame(
        [
            {"query_id": q, "doc_id": f"d{j:02d}", "relevance": 1, "domain": "OUT" if k == 0 and i % 2 else "IN"}
            for i, q in enumerate(qids)
            for k, j in enumerate(rng.choice(cands, 2, replace=False))
        ]
    )

    # Only ALL: the tests read no other subset, and scoring three would triple the 80-seed test's
    # pytrec_eval work for nothing.
    judged = {"ALL": subset(pos, "ALL")}

    def table(run, by=None):
        """Per-query nDCG@100 on ALL of the run's own queries (as harness.evaluate's score_nested
        scores them), per value of column ``by`` (an outer fold) if given: one pytrec_eval call,
        each (group, subset, query) scored as a query of its own."""
        groups = run.groupby(by) if by else [(None, run)]
        runs, qrels = [], []
        for g, r in groups:
            for s, positives in judged.items():
                q = positives[positives["query_id"].isin(set(r["query_id"]))]
                tag = f"{g}\x1f{s}\x1f"
                runs.append(r.assign(query_id=tag + r["query_id"]))
                qrels.append(q.assign(query_id=tag + q["query_id"]))
        pq = per_query(pd.concat(runs)[["query_id", "doc_id", "score"]], pd.concat(qrels), ["nDCG@100"])
        parts = pq["query_id"].str.split("\x1f", expand=True)
        out = pq.assign(query_id=parts[2], subset=parts[1])
        if by:
            out[by] = parts[0].astype(run[by].dtype)
        return out

    tables = {"base": table(feats.rename(columns={"r0_score": "score"})[["query_id", "doc_id", "score"]])}
    nested = {}
    for c in range(configs):
        params = {
            "features": ["run"],
            "folds": folds,
            "seed": seed,
            "out_k": 100,
            "out_weight": 1.0 + c,
            "n_estimators": 10,
            "learning_rate": 0.3,
            "num_leaves": 3 + c,
            "min_child_samples": 5,
            "truncation": 20,
        }
        run, _, _, inner = ltr.learned_run(feats, pos, params, nested=True)
        tables[f"ltr{c}"] = table(run)
        nested[f"ltr{c}"] = table(inner, by="outer_fold")
    fold = ltr.folds_of(pos, folds, seed)
    return tables, nested, fold


@pytest.mark.slow
@pytest.mark.long
def test_nested_selection_over_learned_rows_keeps_its_level_on_noise():
    """Learned rows on features with no signal, 80 seeds: the nested choice's held-out test (fold
    f's choice made on scores of models that never saw f) rejects at p < 0.05 in about 5% of seeds
    (binomial sd 2.4 points)."""
    from harness.significance import cv_test

    rejections = []
    for seed in range(80):
        tables, nested, fold = _learned_noise_tables(seed)
        target = S.matrix(tables, "ALL", "nDCG@100")
        train = {f: S.nested_matrix(tables, nested, "ALL", "nDCG@100", f, fold) for f in sorted(fold.unique())}
        diffs = target.sub(target["base"], axis=0)
        by_fold = {f: m.sub(m["base"], axis=0) for f, m in train.items()}
        h = cv_test(diffs, fold, seed=seed, resamples=199, bootstrap=0, choose_by_fold=by_fold)["target"]
        cv = S.cross_validate(target, fold, train=train)
        assert h["delta"] == pytest.approx(cv["cv_estimate"] - target["base"].mean())  # the same nested choice
        rejections.append(h["p"] < 0.05)
    assert np.mean(rejections) <= 0.11


def test_nested_matrix_takes_the_outer_folds_scores_and_refuses_other_folds():
    tables, nested, fold = _learned_noise_tables(0, queries=18, configs=1)
    m = S.nested_matrix(tables, nested, "ALL", "nDCG@100", 0, fold)
    own = fold.index[fold == 0]
    assert m.loc[own, "ltr0"].isna().all() and m.loc[own, "base"].notna().all()
    n = nested["ltr0"]
    want = n[(n["outer_fold"] == 0) & (n["subset"] == "ALL")].set_index("query_id")["value"]
    pd.testing.assert_series_equal(m["ltr0"].dropna().sort_index(), want.sort_index(), check_names=False)
    other = fold.copy()
    other.iloc[:3] = (other.iloc[:3] + 1) % 3  # select's folds differ from the ones the row was cross-fitted on
    with pytest.raises(SystemExit, match=r"other folds than select's"):
        S.nested_matrix(tables, nested, "ALL", "nDCG@100", int(other.iloc[0]), other)


def test_select_refuses_a_learned_row_without_nested_scores(tmp_path):
    row = _row("xdomain", "k9")
    row["config"]["ltr"] = {"folds": 5, "seed": 0}
    row["ltr"] = "lambdamart(ipc+run,ow=3)"
    with pytest.raises(SystemExit, match=r"no nested scores.*ltr.nested=true"):
        S.load_nested(tmp_path / "runs" / "results.jsonl", [row], 5, 0)
    with pytest.raises(SystemExit, match=r"ltr.folds=5 .*select over folds=3.*Fix: select with folds=5"):
        S.load_nested(tmp_path / "runs" / "results.jsonl", [row], 3, 0)
    row["ltr"] = "lambdamart(ipc+run,ow=3,train=other)"  # trained elsewhere: nothing learned from these judgments
    assert S.load_nested(tmp_path / "runs" / "results.jsonl", [row], 5, 0) == {}


def test_learning_to_rank_and_selection_split_the_queries_alike(tiny_folder):
    """LTR reads its folds off the judgments, selection off the per-query scores tables. On judgments
    where a third of the queries have no OUT positive and two none at all, and a run that finds
    few positives, the two give the same folds for every k and seed."""
    from harness import folds, ltr
    from harness.data import load_local
    from harness.evaluate import score

    qrels = pd.read_parquet(tiny_folder / "qrels_all.parquet")
    queries = sorted(qrels["query_id"].unique())
    no_out, unjudged = set(queries[::3]), set(queries[1:3])
    keep = ~((qrels["query_id"].isin(no_out) & (qrels["domain_rel"] == "OUT")) | qrels["query_id"].isin(unjudged))
    qrels[keep].to_parquet(tiny_folder / "qrels_all.parquet", index=False)
    ds = load_local(tiny_folder)
    pos = ds.positives
    rng = np.random.default_rng(0)
    docs = sorted(ds.doc_ipc3)
    run = pd.DataFrame(
        [(q, d, float(s)) for q in queries for s, d in enumerate(rng.choice(docs, 10, replace=False))],
        columns=["query_id", "doc_id", "score"],
    )
    table = score(run, ds)
    scored, with_out = folds.from_scores(table)
    assert scored == sorted(set(queries) - unjudged) and with_out == set(queries) - no_out - unjudged
    for k in (2, 3):
        for seed in (0, 1, 7):
            assert ltr.folds_of(pos, k, seed).equals(folds.query_folds(scored, with_out, k, seed))
