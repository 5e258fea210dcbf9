"""Data layer: local DAPFAM folders, BEIR folders, mini, qrels subsets, views, exports, errors."""

import json

import pandas as pd
import pytest
from conftest import SHARED_CACM, TINY

from harness.data import DataError, load_beir, load_local, mini
from harness.data import schema as S
from harness.data import views as V
from harness.data.qrels import write_trec_qrels, write_trec_topics


def hub_folder(path, queries, corpus, qrels):
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(queries).to_parquet(path / "queries.parquet", index=False)
    pd.DataFrame(corpus).to_parquet(path / "corpus.parquet", index=False)
    pd.DataFrame(qrels).to_parquet(path / "qrels_all.parquet", index=False)
    return path


def q(qid, codes, title="t", abstract="a", claims="c", kw="k"):
    return {S.QUERY_ID: qid, S.TITLE: title, S.ABSTRACT: abstract, S.CLAIMS: claims, S.KEYWORDS: kw, S.IPC3: codes}


def d(did, codes, title="t", abstract="a", claims="c", desc="x"):
    return {S.DOC_ID: did, S.TITLE: title, S.ABSTRACT: abstract, S.CLAIMS: claims, S.DESCRIPTION: desc, S.IPC3: codes}


def r(qid, did, rel, dom):
    return {S.QUERY_ID: qid, S.DOC_ID: did, S.RELEVANCE: rel, S.DOMAIN: dom}


@pytest.fixture
def small(tmp_path):
    """Two queries; Q2 has no OUT positive; one NC row; D3 is IN by overlap through a second code."""
    return hub_folder(
        tmp_path / "small",
        [q("Q1", ["A61"]), q("Q2", ["G06", "H04"])],
        [d("D1", ["A61"]), d("D2", ["B65"]), d("D3", ["H04", "F16"]), d("D4", ["G06"])],
        [
            r("Q1", "D1", 1, "IN"),
            r("Q1", "D2", 1, "OUT"),
            r("Q1", "D4", 0, "NC"),
            r("Q2", "D3", 1, "IN"),
            r("Q2", "D4", 2, "IN"),
        ],
    )


def test_local_folder_in_hub_format(small):
    ds = load_local(small)
    assert ds.summary() == {
        "dataset": "local",
        "queries": 2,
        "documents": 4,
        "positive_pairs": 4,
        "in_pairs": 3,
        "out_pairs": 1,
        "domain_disagreements": 0,
    }
    assert set(ds.qrels("ALL").doc_id) == {"D1", "D2", "D3", "D4"} and "D4" in set(ds.qrels("IN").doc_id)
    # NC rows are negatives: never in a subset; a query without OUT positives is absent from OUT
    assert not ((ds.qrels("ALL").query_id == "Q1") & (ds.qrels("ALL").doc_id == "D4")).any()
    assert set(ds.qrels("OUT").query_id) == {"Q1"}
    assert ds.qrels("IN").relevance.tolist() == [1, 1, 2]


def test_domain_disagreement_reported_and_configurable(tmp_path, caplog):
    path = hub_folder(
        tmp_path / "dis",
        [q("Q1", ["A61"])],
        [d("D1", ["A61"]), d("D2", ["B65"])],
        [r("Q1", "D1", 1, "OUT"), r("Q1", "D2", 1, "OUT")],
    )
    ds = load_local(path)
    assert ds.domain_check.disagreements == 1
    assert ds.domain_check.examples[0][S.DOC_ID] == "D1"
    assert "disagrees" in caplog.text
    assert set(ds.qrels("OUT").doc_id) == {"D1", "D2"}  # default: trust the file
    ds2 = load_local(path, domain_source="ipc3")
    assert set(ds2.qrels("OUT").doc_id) == {"D2"} and set(ds2.qrels("IN").doc_id) == {"D1"}


FILES = {"queries": "queries.parquet", "corpus": "corpus.parquet", "qrels": "qrels_all.parquet"}


@pytest.mark.parametrize("which,column", [("queries", S.QUERY_ID), ("corpus", S.DOC_ID), ("qrels", S.RELEVANCE)])
def test_missing_required_column_names_file_and_column(small, which, column):
    f = small / FILES[which]
    pd.read_parquet(f).drop(columns=[column]).to_parquet(f, index=False)
    with pytest.raises(DataError) as e:
        load_local(small)
    assert f.name in str(e.value) and column in str(e.value) and "Fix" in str(e.value)


@pytest.mark.parametrize(
    "which,column,what", [("queries", S.TITLE, "query_fields=T"), ("corpus", S.IPC3, "rerank=ipc3_disjoint")]
)
def test_missing_optional_column_loads_and_its_feature_names_file_and_column(small, which, column, what):
    f = small / FILES[which]
    pd.read_parquet(f).drop(columns=[column]).to_parquet(f, index=False)
    ds = load_local(small)
    assert ds.missing == {which: [column]}
    with pytest.raises(DataError) as e:
        ds.require(which, [column], what)
    assert f.name in str(e.value) and column in str(e.value) and what in str(e.value) and "Fix" in str(e.value)


def test_duplicate_ids(small):
    f = small / "corpus.parquet"
    c = pd.read_parquet(f)
    pd.concat([c, c.iloc[[0]]]).to_parquet(f, index=False)
    with pytest.raises(DataError, match=r"corpus.parquet.*relevant_id.*duplicate.*D1"):
        load_local(small)


def test_duplicate_query_ids(small):
    f = small / "queries.parquet"
    t = pd.read_parquet(f)
    pd.concat([t, t]).to_parquet(f, index=False)
    with pytest.raises(DataError, match=r"queries.parquet.*query_id.*duplicate"):
        load_local(small)


def test_empty_corpus(small):
    f = small / "corpus.parquet"
    pd.read_parquet(f).iloc[:0].to_parquet(f, index=False)
    with pytest.raises(DataError, match=r"corpus.parquet.*empty"):
        load_local(small)


@pytest.mark.parametrize("row,column", [(r("Q9", "D1", 1, "IN"), S.QUERY_ID), (r("Q1", "D9", 1, "IN"), S.DOC_ID)])
def test_qrels_naming_unknown_ids(small, row, column):
    f = small / "qrels_all.parquet"
    pd.concat([pd.read_parquet(f), pd.DataFrame([row])]).to_parquet(f, index=False)
    with pytest.raises(DataError) as e:
        load_local(small, unknown_ids="error")  # unknown documents are kept by default (trec_eval's way)
    assert (
        "qrels_all.parquet" in str(e.value)
        and repr(column) in str(e.value)
        and ("Q9" in str(e.value) or "D9" in str(e.value))
    )


def test_non_numeric_relevance(small):
    f = small / "qrels_all.parquet"
    t = pd.read_parquet(f)
    t[S.RELEVANCE] = t[S.RELEVANCE].astype(str)
    t.loc[0, S.RELEVANCE] = "yes"
    t.to_parquet(f, index=False)
    with pytest.raises(DataError, match="relevance_score.*non-numeric"):
        load_local(small)


def test_missing_folder_and_non_parquet(tmp_path, small):
    with pytest.raises(DataError, match="no such folder"):
        load_local(tmp_path / "nope")
    (small / "queries.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="queries.parquet.*not a readable parquet"):
        load_local(small)


def test_passage_separator_in_doc_ids_rejected(tmp_path):
    path = hub_folder(tmp_path / "sep", [q("Q1", ["A61"])], [d("D#1", ["A61"])], [r("Q1", "D#1", 1, "IN")])
    with pytest.raises(DataError, match="containing '#'"):
        load_local(path)


def test_views_join_order_and_empty_fields():
    qs = pd.DataFrame([q("Q1", [], title="Title", abstract="", claims="Claim", kw="kw1; kw2")])
    assert V.query_texts(qs, "TAC") == {"Q1": "Title\n\nClaim"}
    assert V.query_texts(qs, "T") == {"Q1": "Title"}
    assert V.query_texts(qs, "KW") == {"Q1": "kw1; kw2"}
    with pytest.raises(DataError, match="query_fields='XX'"):
        V.fields("XX", "query")
    with pytest.raises(DataError, match="every query text is empty"):
        V.query_texts(pd.DataFrame([q("Q1", [], title="", abstract="")]), "TA")


def test_target_views_stream_fields(small):
    ds = load_local(small)
    full = dict(V.target_texts(ds.corpus, "FULL", batch_size=1))
    assert full["D1"] == "t\n\na\n\nc\n\nx"
    assert dict(V.target_texts(ds.corpus, "DESC"))["D2"] == "x"


def test_mini_is_deterministic_and_dapfam_like():
    a = mini.generate(**dict(TINY, description_words=(60, 120)))
    b = mini.generate(**dict(TINY, description_words=(60, 120)))
    for x, y in zip(a, b):
        pd.testing.assert_frame_equal(x, y)
    big_q, big_c, big_r = mini.generate()
    pos = big_r[big_r[S.RELEVANCE] > 0]
    assert 0.18 <= (pos[S.DOMAIN] == "OUT").mean() <= 0.32
    assert (big_r[S.DOMAIN] == "NC").sum() == len(pos)
    # IN/OUT of the generator is exactly IPC3 overlap
    qc = dict(zip(big_q[S.QUERY_ID], big_q[S.IPC3]))
    dc = dict(zip(big_c[S.DOC_ID], big_c[S.IPC3]))
    assert all(
        bool(set(qc[a]) & set(dc[b])) == (dom == "IN")
        for a, b, dom in zip(pos[S.QUERY_ID], pos[S.DOC_ID], pos[S.DOMAIN])
    )
    # long descriptions: passages matter
    assert big_c[S.DESCRIPTION].str.split().str.len().min() >= 100


def test_mini_folder_loads_with_the_local_loader(tiny_folder):
    ds = load_local(tiny_folder)
    assert ds.summary()["documents"] == TINY["n_docs"] and ds.domain_check.disagreements == 0


def test_trec_exports_roundtrip_through_ir_measures(tmp_path, small):
    import ir_measures

    ds = load_local(small)
    for s in ("ALL", "IN", "OUT"):
        p = write_trec_qrels(ds.qrels(s), tmp_path / f"qrels.{s}.txt")
        back = pd.DataFrame(ir_measures.read_trec_qrels(str(p)))
        assert sorted(zip(back.query_id, back.doc_id, back.relevance)) == sorted(
            ds.qrels(s).itertuples(index=False, name=None)
        )
    t = write_trec_topics(V.query_texts(ds.queries, "TA"), tmp_path / "topics.tsv")
    assert t.read_text().splitlines()[0] == "Q1\tt a"


def test_beir_folder_with_codes(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "D1", "title": "pump", "text": "a pump", "ipc3": ["F04"]},
        {"_id": "D2", "title": "valve", "text": "a valve", "metadata": {"ipc3": ["F16"]}},
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "Q1", "text": "pump valve", "ipc3": ["F04"]}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nQ1\tD1\t1\nQ1\tD2\t1\n")
    ds = load_beir(root)
    assert set(ds.qrels("IN").doc_id) == {"D1"} and set(ds.qrels("OUT").doc_id) == {"D2"}
    assert dict(V.target_texts(ds.corpus, "TA")) == {"D1": "pump\n\na pump", "D2": "valve\n\na valve"}
    assert V.query_texts(ds.queries, "T") == {"Q1": "pump valve"}
    (root / "corpus.jsonl").write_text('{"_id": "D1", "text": "x"}\n{broken\n')
    with pytest.raises(DataError, match=r"corpus.jsonl:2: not valid JSON"):
        load_beir(root)


def test_ir_datasets_ids_iterate_the_same_data(tmp_path, tiny_folder):
    import ir_datasets

    from harness.data import irds

    ds = load_local(tiny_folder)
    ids = irds.register("test-tiny", lambda: ds)
    assert ids == ["test-tiny/all", "test-tiny/in", "test-tiny/out"]
    out = ir_datasets.load("test-tiny/out")
    assert sorted((x.query_id, x.doc_id) for x in out.qrels_iter()) == sorted(
        ds.qrels("OUT")[["query_id", "doc_id"]].itertuples(index=False, name=None)
    )
    assert out.docs_count() == ds.n_docs
    assert next(iter(out.queries_iter())).text == V.query_texts(ds.queries, "TA")[ds.query_ids[0]]
    assert sum(1 for _ in out.docs_iter()) == ds.n_docs


def test_irds_defaults_register_lazily(tmp_path):
    import ir_datasets

    from harness.data import irds

    ids = irds.register_defaults(tmp_path)
    assert "dapfam/all" in ids and "dapfam-mini/out" in ids
    assert "dapfam/in" in ir_datasets.registry  # registered without touching the hub


@pytest.mark.skipif(not SHARED_CACM.exists(), reason="../shared/data/cacm-xdom not present")
def test_cacm_xdom_as_local_dapfam_folder():
    ds = load_local(SHARED_CACM)
    s = ds.summary()
    assert (s["queries"], s["documents"], s["positive_pairs"], s["out_pairs"]) == (185, 3019, 1510, 375)
    assert ds.domain_check.disagreements == 0 and ds.domain_check.pairs == 1510


def test_hub_loader_downloads_the_three_files_and_records_the_commit(monkeypatch, small, tmp_path):
    """The real hub path, with huggingface_hub answered from a local snapshot folder."""
    import shutil

    import huggingface_hub

    from harness.data import load_hub

    snap = tmp_path / "snapshots" / "abc123"
    (snap / "data").mkdir(parents=True)
    for f in small.iterdir():
        shutil.copy(f, snap / "data" / f.name)
    calls = []

    class Info:
        sha = "abc123"

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, repo, revision=None: Info())

    def download(repo_id, filename, repo_type=None, revision=None, cache_dir=None, local_files_only=False):
        calls.append((repo_id, filename, repo_type, revision))
        return str(snap / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    files = {"queries": "data/queries.parquet", "corpus": "data/corpus.parquet", "qrels": "data/qrels_all.parquet"}
    ds = load_hub("datalyes/DAPFAM_patent", "main", files)
    assert ds.summary()["positive_pairs"] == 4 and ds.source["revision"] == "abc123"
    assert calls[0] == ("datalyes/DAPFAM_patent", "data/queries.parquet", "dataset", "abc123")


def test_hub_failure_names_the_fix(monkeypatch):
    import huggingface_hub

    from harness.data import load_hub

    monkeypatch.setattr(
        huggingface_hub.HfApi, "dataset_info", lambda *a, **k: (_ for _ in ()).throw(OSError("offline"))
    )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(DataError, match="dataset=local dataset.path=DIR"):
        load_hub("datalyes/DAPFAM_patent", "main")


def test_ir_datasets_docs_store_looks_up_by_id(tiny_folder):
    import ir_datasets

    from harness.data import irds

    [_, _, out] = irds.register("tiny-store", lambda: load_local(tiny_folder))
    ds = ir_datasets.load(out)
    docs = {d.doc_id: d.text for d in ds.docs_iter()}
    ids = sorted(docs)[5:8]
    store = ds.docs_store()
    assert store.get(ids[0]).text == docs[ids[0]]
    assert {i: d.text for i, d in store.get_many(ids).items()} == {i: docs[i] for i in ids}


MTEB_REVISION = "780f4011d60297fc6e97a4119b0c516d13afea2d"


def hub_snapshot(cache_dir, tiny_folder, commit=MTEB_REVISION, drop=()):
    """The tiny set laid out as huggingface_hub caches ``datalyes/DAPFAM_patent`` at ``commit``: the
    dataset card's three files, DAPFAM's column names and types (list<string> IPC3, full IPC codes
    as a string, a claim date, float relevance with NC rows at 0.0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = cache_dir / "datasets--datalyes--DAPFAM_patent"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    q = pd.read_parquet(tiny_folder / "queries.parquet")
    c = pd.read_parquet(tiny_folder / "corpus.parquet")
    r = pd.read_parquet(tiny_folder / "qrels_all.parquet")
    text = ["title_en", "abstract_en", "claims_text", "description_en"]
    ipc3 = "classifications_ipcr_list_first_three_chars_list"

    def family(frame, id_col):
        out = {id_col: frame[id_col].astype(str)}
        for col in text:
            out[col] = frame[col] if col in frame else ""
        out[ipc3] = frame[ipc3].map(list)
        out["ipcr_codes_str"] = frame[ipc3].map(lambda codes: " ".join(f"{x}B 1/00" for x in codes))
        out["earliest_claim_date"] = "2001-02-03"
        return pd.DataFrame(out)

    queries = family(q, "query_id")
    queries["abstract_keywords"] = q["abstract_keywords"]
    corpus = family(c, "relevant_id")
    relations = pd.DataFrame(
        {
            "query_id": r["query_id"].astype(str),
            "relevant_id": r["relevant_id"].astype(str),
            "relevance_score": r["relevance_score"].astype("float64"),
            "domain_rel": r["domain_rel"],
        }
    )
    for name, frame in (("queries", queries), ("corpus", corpus), ("qrels_all", relations)):
        frame = frame.drop(columns=[d for d in drop if d in frame])
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(table, snap / f"{name}.parquet")
    return snap


def test_the_hub_layout_loads_offline_through_the_hub_path(tiny_folder, tmp_path, monkeypatch, cfg_factory):
    """dataset=dapfam at MTEB's pinned commit, from huggingface_hub's cache, without asking the hub."""
    import huggingface_hub
    import pyarrow.parquet as pq

    from harness import data

    snap = hub_snapshot(tmp_path / "hf", tiny_folder)
    rel = pq.read_schema(snap / "qrels_all.parquet")
    assert str(rel.field("relevance_score").type) == "double"
    assert (pd.read_parquet(snap / "qrels_all.parquet").query("domain_rel == 'NC'")["relevance_score"] == 0.0).all()

    def no_network(*a, **k):
        raise AssertionError("the hub was asked for a pinned commit that is cached")

    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", no_network)
    cfg = cfg_factory("dataset=dapfam", f"dataset.cache_dir={tmp_path / 'hf'}", tiny=False)
    assert cfg.dataset.revision == MTEB_REVISION
    ds = data.load(cfg.dataset, cfg.root)
    local = data.load_local(tiny_folder)
    assert ds.source["type"] == "hub" and ds.source["revision"] == MTEB_REVISION
    assert ds.summary() | {"dataset": None} == local.summary() | {"dataset": None}
    codes = ds.doc_ipc_codes  # full IPC codes stay available to levers (IPC4, sections)
    assert len(codes) == ds.n_docs and all(v.endswith("B 1/00") for v in codes.values() if v)
    # local_files_only refuses to ask the hub for what is not cached, naming the fix
    cfg = cfg_factory(
        "dataset=dapfam", f"dataset.cache_dir={tmp_path / 'empty'}", "dataset.local_files_only=true", tiny=False
    )
    with pytest.raises(DataError, match="local_files_only=true.*dataset=local"):
        data.load(cfg.dataset, cfg.root)


@pytest.mark.slow
def test_a_missing_optional_column_disables_its_feature_by_name(tiny_folder, tmp_path, cfg_factory):
    """Files without abstract_keywords and description_en load; KW and FULL are refused naming the
    column and the file; TA runs."""
    from harness import data
    from harness.run import execute

    snap = hub_snapshot(tmp_path / "hf", tiny_folder, drop=("abstract_keywords", "description_en"))
    ds = data.load_local(snap)
    assert ds.missing == {"queries": ["abstract_keywords"], "corpus": ["description_en"]}
    base = ("dataset=local", f"dataset.path={snap}", "+experiment=doc_bm25")
    with pytest.raises(DataError, match=r"query_fields=KW needs column\(s\) \['abstract_keywords'\].*queries.parquet"):
        execute(cfg_factory(*base, "query_fields=KW", tiny=False))
    with pytest.raises(DataError, match=r"target_fields=FULL needs column\(s\) \['description_en'\].*corpus.parquet"):
        execute(cfg_factory(*base, "target_fields=FULL", tiny=False))
    row = execute(cfg_factory(*base, "query_fields=TA", "target_fields=TA", tiny=False))
    assert row["queries_ALL"] == len(ds.queries)


def test_without_ipc3_codes_or_domain_labels_in_out_cannot_be_told(tiny_folder, tmp_path):
    from harness import data

    snap = hub_snapshot(tmp_path / "hf", tiny_folder, drop=("classifications_ipcr_list_first_three_chars_list",))
    ds = data.load_local(snap)  # the file's domain_rel labels suffice for scoring
    assert ds.summary()["out_pairs"] > 0
    df = pd.read_parquet(snap / "qrels_all.parquet").drop(columns=["domain_rel"])
    df.to_parquet(snap / "qrels_all.parquet", index=False)
    with pytest.raises(DataError, match="IN and OUT cannot be told apart"):
        data.load_local(snap)


def test_a_damaged_corpus_file_is_named_in_one_error(tmp_path):
    """Bytes changed in the middle of corpus.parquet (its pages, not its footer): whichever read
    meets them says which file and the fix, never pyarrow's bare OSError."""
    from conftest import TINY

    from harness.data import load_local, mini
    from harness.data import views as V
    from harness.data.schema import DataError

    folder = mini.write(tmp_path / "d", **dict(TINY, description_words=tuple(TINY["description_words"])))
    p = folder / "corpus.parquet"
    b = bytearray(p.read_bytes())
    b[len(b) // 2 : len(b) // 2 + 200] = b"x" * 200
    p.write_bytes(bytes(b))
    with pytest.raises(DataError, match=r"corpus.parquet: (damaged|cannot)"):
        ds = load_local(folder)
        list(V.target_texts(ds.corpus, "FULL"))
