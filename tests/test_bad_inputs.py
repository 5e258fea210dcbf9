"""Bad inputs, one table: every row gives a clear error (file or key, and the fix) or the documented
handling with the right score. A score is either right or not printed.

All rows share one artifact root that holds a finished reference experiment; after each row that
wrote anything to the root, that experiment must be reused unchanged (nothing rebuilt, the same
bytes), so no bad input can damage what was computed before it. A row that wrote nothing there
(most fail while the config is composed or the data read) cannot have, and skips the rerun.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ir_measures
import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, TINY, make_cfg
from hydra.errors import HydraException

from harness.config import ConfigError
from harness.data import DataError
from harness.data import schema as S
from harness.run import execute
from harness.store import StoreError

SCORES = [f"{m}/{s}" for m in ("nDCG@100", "R@100") for s in ("ALL", "IN", "OUT")]
BASE = ("+experiment=doc_bm25", "query_fields=TA", "target_fields=TA", "bm25.k1=0.9", "bm25.b=0.4")


def run(root: Path, folder: Path | None, *overrides: str, dataset: str = "local") -> dict:
    data = [f"dataset={dataset}", f"dataset.path={folder}"] if folder else []
    return execute(make_cfg(root, *data, *BASE, *overrides, tiny=False))


def scores(row: dict) -> dict:
    return {k: row.get(k) for k in SCORES}


def same_scores(a: dict, b: dict) -> None:
    for k in SCORES:
        assert a[k] == pytest.approx(b[k], abs=1e-9), (k, a[k], b[k])


@dataclass
class World:
    """The shared root, the clean data and the reference experiment that every row must leave alone."""

    root: Path
    clean: Path
    ref: dict
    snapshot: dict
    tmp: Path
    n: int = 0

    def copy(self) -> Path:
        self.n += 1
        dst = self.tmp / f"case{self.n}"
        shutil.copytree(self.clean, dst)
        return dst


def snapshot(root: Path, row: dict) -> dict:
    """Bytes of every file of every finished artifact the reference row used."""
    man = json.loads((root / "runs" / "scores" / row["scores_key"] / "manifest.json").read_text())
    out = {}
    for a in man["artifacts"] + [{"kind": "scores", "key": row["scores_key"]}]:
        top = "runs" if a["kind"] in ("unit_run", "family_run", "fused_run", "scores") else "indexes"
        folder = root / top / a["kind"] / a["key"]
        for p in folder.rglob("*"):
            if p.is_file():
                out[str(p)] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    from harness.data import mini

    tmp = tmp_path_factory.mktemp("bad")
    clean = mini.write(tmp / "clean", **dict(TINY, description_words=tuple(TINY["description_words"])))
    root = tmp / "root"
    ref = run(root, clean)
    return World(root, clean, ref, snapshot(root, ref), tmp)


# ---------------------------------------------------------------- how rows change things
def edit(file: str, fn: Callable[[pd.DataFrame], pd.DataFrame]):
    def mutate(folder: Path) -> None:
        p = folder / file
        fn(pd.read_parquet(p)).to_parquet(p, index=False)

    return mutate


def codes_as(fmt: Callable[[list], str], drop_domain: bool = True):
    """IPC3 lists rewritten as strings in queries and corpus; without domain_rel, IN/OUT comes
    from the codes alone, so a wrong parse would change IN/OUT scores."""

    def mutate(folder: Path) -> None:
        for f in ("queries.parquet", "corpus.parquet"):
            edit(f, lambda t: t.assign(**{S.IPC3: [fmt(list(c)) for c in t[S.IPC3]]}))(folder)
        if drop_domain:
            edit("qrels_all.parquet", lambda t: t.drop(columns=[S.DOMAIN]))(folder)

    return mutate


def grades(fn):
    return edit("qrels_all.parquet", lambda t: t.assign(**{S.RELEVANCE: fn(t[S.RELEVANCE])}))


def set_row(file: str, col: str, value, row: int = 0):
    def fn(t):
        t = t.copy()
        t[col] = t[col].astype(object)
        t.at[t.index[row], col] = value
        return t

    return edit(file, fn)


def unknown_doc(folder: Path) -> None:
    edit(
        "qrels_all.parquet",
        lambda t: pd.concat(
            [
                t,
                pd.DataFrame(
                    [{S.QUERY_ID: t[S.QUERY_ID].iloc[0], S.DOC_ID: "GHOST-1", S.RELEVANCE: 1, S.DOMAIN: "OUT"}]
                ),
            ]
        ),
    )(folder)


def queries_in_corpus(folder: Path) -> None:
    q = pd.read_parquet(folder / "queries.parquet")
    c = pd.read_parquet(folder / "corpus.parquet")
    extra = q.rename(columns={S.QUERY_ID: S.DOC_ID})[c.columns]
    pd.concat([c, extra], ignore_index=True).to_parquet(folder / "corpus.parquet", index=False)


def binary_text(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(folder / "corpus.parquet")
    raw = [s.encode("latin-1", errors="replace") + b"\xe9\xff" for s in t.column(S.TITLE).to_pylist()]
    i = t.schema.get_field_index(S.TITLE)
    pq.write_table(t.set_column(i, S.TITLE, pa.array(raw, type=pa.binary())), folder / "corpus.parquet")


def invalid_utf8_in_string_column(folder: Path) -> None:
    """Bytes that are not UTF-8 stored in a string column (pyarrow writes them unchecked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(folder / "corpus.parquet")
    raw = [s.encode() for s in t.column(S.TITLE).to_pylist()]
    raw[3] = b"caf\xe9 \xff"
    arr = pa.array(raw, type=pa.binary()).view(pa.string())
    pq.write_table(t.set_column(t.schema.get_field_index(S.TITLE), S.TITLE, arr), folder / "corpus.parquet")


def only_all(row, world, folder):
    """No codes and no labels: IN/OUT cannot be computed, so they are not printed; ALL is."""
    assert row["nDCG@100/ALL"] == pytest.approx(world.ref["nDCG@100/ALL"], abs=1e-12)
    assert row["queries_IN"] is None and row["queries_OUT"] is None and row.get("nDCG@100/OUT") is None


def not_parquet(file: str):
    return lambda folder: (folder / file).write_text("query_id,title_en\nQ1,x\n")


# ---------------------------------------------------------------- what rows expect
@dataclass
class Row:
    id: str
    mutate: Callable[[Path], None] | None = None
    overrides: tuple = ()
    error: tuple | None = None  # (exception type, regex the message must match)
    same: bool = False  # the clean data's scores, exactly
    check: Callable | None = None  # check(row, world, folder) for other documented handling
    logs: str | None = None  # a warning that must be logged
    fix: bool = True  # the error names a fix


def graded_equals_integer(row, world, folder):
    """0.5 / 1.0 grades score as 1 / 2 (nDCG is unchanged by a common factor)."""
    twin = world.copy()
    grades(lambda r: np.where(r > 0, np.where(np.arange(len(r)) % 2 == 0, 1, 2), 0))(twin)
    same_scores(scores(row), scores(run(world.root, twin)))
    assert row["nDCG@100/ALL"] != pytest.approx(world.ref["nDCG@100/ALL"], abs=1e-6)  # really graded


def no_self_hits(row, world, folder):
    run_file = pd.read_csv(row["run_file"], sep=" ", header=None, dtype=str)
    assert not (run_file[0] == run_file[2]).any()
    assert run_file.groupby(0).size().min() == 100  # the cut is made after dropping, not before


def self_hits_kept(row, world, folder):
    run_file = pd.read_csv(row["run_file"], sep=" ", header=None, dtype=str)
    assert (run_file[0] == run_file[2]).sum() > 0


def unknown_kept(row, world, folder):
    """The ghost document counts as relevant but unretrievable: trec_eval's answer on the same files."""
    qrels = pd.read_parquet(folder / "qrels_all.parquet")
    qrels = qrels[qrels[S.RELEVANCE] > 0].rename(
        columns={S.QUERY_ID: "query_id", S.DOC_ID: "doc_id", S.RELEVANCE: "relevance"}
    )
    run_file = pd.read_csv(
        row["run_file"],
        sep=" ",
        header=None,
        names=["query_id", "q0", "doc_id", "r", "score", "t"],
        dtype={"query_id": str, "doc_id": str},
    )
    want = ir_measures.calc_aggregate([ir_measures.R @ 100], qrels[["query_id", "doc_id", "relevance"]], run_file)
    assert row["R@100/ALL"] == pytest.approx(want[ir_measures.R @ 100], abs=1e-9)
    assert row["R@100/ALL"] < world.ref["R@100/ALL"]
    same_scores(
        {**scores(row), "R@100/ALL": 0, "nDCG@100/ALL": 0, "R@100/OUT": 0, "nDCG@100/OUT": 0},
        {**scores(world.ref), "R@100/ALL": 0, "nDCG@100/ALL": 0, "R@100/OUT": 0, "nDCG@100/OUT": 0},
    )


def measure_equals_ir_measures(name):
    def check(row, world, folder):
        qrels = pd.read_parquet(world.clean / "qrels_all.parquet").rename(
            columns={S.QUERY_ID: "query_id", S.DOC_ID: "doc_id", S.RELEVANCE: "relevance"}
        )
        # every judged row (the sampled negatives too), for the queries that have a positive
        qrels = qrels[qrels["query_id"].isin(set(qrels.loc[qrels["relevance"] > 0, "query_id"]))]
        run_file = pd.read_csv(
            row["run_file"],
            sep=" ",
            header=None,
            names=["query_id", "q0", "doc_id", "r", "score", "t"],
            dtype={"query_id": str, "doc_id": str},
        )
        m = ir_measures.parse_measure(name)
        assert row[f"{m}/ALL"] == pytest.approx(ir_measures.calc_aggregate([m], qrels, run_file)[m], abs=1e-9)

    return check


ROWS = [
    # ---- data: classification codes
    Row("ipc3_python_list_repr", codes_as(lambda c: repr(c)), same=True, logs="holds strings, not lists"),
    Row("ipc3_numpy_repr", codes_as(lambda c: str(np.array(c))), same=True, logs="holds strings, not lists"),
    Row("ipc3_space_separated", codes_as(lambda c: " ".join(c)), same=True),
    Row("ipc3_semicolons", codes_as(lambda c: ";".join(c)), same=True),
    Row("ipc3_json_string", codes_as(lambda c: json.dumps(c)), same=True),
    Row("ipc3_missing_without_labels", codes_as(lambda c: []), check=only_all, logs="count in ALL only"),
    Row(
        "domain_rel_lowercase",
        edit("qrels_all.parquet", lambda t: t.assign(**{S.DOMAIN: t[S.DOMAIN].str.lower()})),
        same=True,
    ),
    Row(
        "domain_rel_unknown_label",
        set_row("qrels_all.parquet", S.DOMAIN, "MAYBE"),
        error=(DataError, r"qrels_all.parquet.*domain_rel.*MAYBE.*Fix"),
    ),
    # ---- data: relevance grades
    Row("relevance_float_0_9", grades(lambda r: np.where(r > 0, 0.9, 0.0)), same=True),
    Row("relevance_float_0_5", grades(lambda r: np.where(r > 0, 0.5, 0.0)), same=True),
    Row(
        "relevance_graded_fractions",
        grades(lambda r: np.where(r > 0, np.where(np.arange(len(r)) % 2 == 0, 0.5, 1.0), 0)),
        check=graded_equals_integer,
    ),
    Row(
        "qrels_empty",
        edit("qrels_all.parquet", lambda t: t.iloc[:0]),
        error=(DataError, r"qrels_all.parquet: no positive judgment.*Fix"),
    ),
    Row("qrels_all_zero", grades(lambda r: r * 0), error=(DataError, r"qrels_all.parquet: no positive judgment")),
    Row(
        "relevance_infinite",
        grades(lambda r: np.where(r > 0, np.inf, 0.0)),
        error=(DataError, r"qrels_all.parquet.*relevance_score.*infinite.*Fix"),
    ),
    Row(
        "relevance_text",
        edit(
            "qrels_all.parquet", lambda t: t.assign(**{S.RELEVANCE: ["yes"] + t[S.RELEVANCE].astype(str).tolist()[1:]})
        ),
        error=(DataError, r"qrels_all.parquet.*relevance_score.*non-numeric"),
    ),
    # ---- data: ids
    Row(
        "query_id_with_space",
        set_row("queries.parquet", S.QUERY_ID, "Q 1"),
        error=(DataError, r"queries.parquet.*'query_id'.*white space.*'Q 1'.*Fix"),
    ),
    Row(
        "doc_id_with_tab",
        set_row("corpus.parquet", S.DOC_ID, "D\t1"),
        error=(DataError, r"corpus.parquet.*'relevant_id'.*white space.*Fix"),
    ),
    Row(
        "qrels_id_with_space",
        set_row("qrels_all.parquet", S.DOC_ID, "MINI D1"),
        error=(DataError, r"qrels_all.parquet.*'relevant_id'.*white space.*Fix"),
    ),
    Row(
        "empty_doc_id", set_row("corpus.parquet", S.DOC_ID, ""), error=(DataError, r"corpus.parquet.*empty or contain")
    ),
    Row(
        "duplicate_doc_id",
        edit("corpus.parquet", lambda t: pd.concat([t, t.iloc[:1]])),
        error=(DataError, r"corpus.parquet.*duplicate.*Fix"),
    ),
    Row("missing_doc_id", set_row("corpus.parquet", S.DOC_ID, None), error=(DataError, r"corpus.parquet.*missing id")),
    Row(
        "passage_separator_in_id", set_row("corpus.parquet", S.DOC_ID, "D#1"), error=(DataError, r"corpus.parquet.*'#'")
    ),
    Row(
        "qrels_unknown_query",
        edit(
            "qrels_all.parquet",
            lambda t: pd.concat(
                [t, pd.DataFrame([{S.QUERY_ID: "NOPE", S.DOC_ID: t[S.DOC_ID].iloc[0], S.RELEVANCE: 1, S.DOMAIN: "IN"}])]
            ),
        ),
        error=(DataError, r"qrels_all.parquet.*query id.*NOPE.*Fix"),
    ),
    Row("qrels_unknown_doc_keep", unknown_doc, check=unknown_kept, logs="kept as relevant but unretrievable"),
    Row(
        "qrels_ids_all_unknown",
        edit("qrels_all.parquet", lambda t: t.assign(**{S.DOC_ID: t[S.DOC_ID] + ".0"})),
        error=(DataError, r"qrels_all.parquet.*none of the .* positive judgments names a document.*Fix"),
    ),
    Row("qrels_unknown_doc_drop", unknown_doc, ("dataset.unknown_ids=drop",), same=True, logs="GHOST-1"),
    Row(
        "qrels_unknown_doc_error",
        unknown_doc,
        ("dataset.unknown_ids=error",),
        error=(DataError, r"qrels_all.parquet.*'relevant_id'.*GHOST-1.*Fix"),
    ),
    Row(
        "unknown_ids_bad_value",
        None,
        ("dataset.unknown_ids=ignore",),
        error=(HydraException, r"dataset.unknown_ids=ignore.*expected one of \[keep, drop, error\]"),
    ),
    Row("query_in_corpus_dropped", queries_in_corpus, check=no_self_hits, logs="also corpus ids"),
    Row("query_in_corpus_kept", queries_in_corpus, ("dataset.drop_self_hits=false",), check=self_hits_kept),
    Row(
        "drop_self_hits_not_bool",
        None,
        ("dataset.drop_self_hits=maybe",),
        error=(HydraException, r"dataset.drop_self_hits=maybe.*'maybe' is not a valid bool"),
        fix=False,
    ),
    # ---- data: files
    Row("text_column_bytes", binary_text, error=(DataError, r"corpus.parquet.*'title_en' holds bytes.*Fix")),
    Row(
        "text_not_utf8_in_string_column",
        invalid_utf8_in_string_column,
        error=(DataError, r"corpus.parquet: column 'title_en' holds text that is not valid UTF-8.*Fix"),
    ),
    Row(
        "corpus_not_parquet",
        not_parquet("corpus.parquet"),
        error=(DataError, r"corpus.parquet.*not a readable parquet"),
    ),
    Row(
        "qrels_missing_column",
        edit("qrels_all.parquet", lambda t: t.drop(columns=[S.RELEVANCE])),
        error=(DataError, r"qrels_all.parquet.*missing column.*relevance_score"),
    ),
    Row(
        "queries_file_missing",
        lambda f: (f / "queries.parquet").unlink(),
        error=(DataError, r"queries.parquet: file not found"),
    ),
    # ---- config
    Row("bm25_k1_negative", None, ("bm25.k1=-1",), error=(ConfigError, r"bm25.k1=-1.*expected a number >= 0")),
    Row(
        "bm25_k1_text",
        None,
        ("bm25.k1=abc",),
        error=(HydraException, r"bm25.k1=abc.*could not be converted to Float"),
        fix=False,
    ),
    Row(
        "granularity_unknown",
        None,
        ("granularity=paragraph",),
        error=(HydraException, r"granularity=paragraph.*expected one of \[document, passage\]"),
    ),
    Row(
        "fusion_depth_above_k",
        None,
        ("fusion=rrf", "fusion.depth=200"),
        error=(ConfigError, r"fusion.depth=200 > search.k=100.*Fix"),
    ),
    Row("bm25_b_above_one", None, ("bm25.b=1.5",), error=(ConfigError, r"bm25.b=1.5.*between 0.0 and 1.0")),
    Row("metric_unparsable", None, ("metrics=[nDCG@abc]",), error=(ConfigError, r"nDCG@abc.*ir-measures.*Fix")),
    Row("metric_empty_list", None, ("metrics=[]",), error=(ConfigError, r"metrics=\[\].*Fix")),
    Row("metric_without_brackets", None, ("metrics=nDCG@10",), check=measure_equals_ir_measures("nDCG@10")),
    Row("metric_other_provider", None, ("metrics=[Judged@10]",), check=measure_equals_ir_measures("Judged@10")),
    Row("search_k_zero", None, ("search.k=0",), error=(ConfigError, r"search.k=0")),
    Row("index_threads_zero", None, ("index.threads=0",), error=(ConfigError, r"index.threads=0.*positive integer")),
    Row("lock_timeout_negative", None, ("store.lock_timeout=-1",), error=(ConfigError, r"store.lock_timeout=-1.0")),
    Row("gpu_speedup_zero", None, ("cost.gpu_speedup=0",), error=(ConfigError, r"cost.gpu_speedup=0.0")),
    # every setting counts: a key is used or refused, inside fusion runs too; no degenerate value
    Row(
        "fusion_run_nested",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25},{fusion:rrf}]"),
        error=(ConfigError, r"'fusion' inside a run entry: an input run cannot be a fusion itself.*Fix"),
    ),
    Row(
        "fusion_run_fusion_key",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25},{backend:dense,fusion.k:10}]"),
        error=(ConfigError, r"'fusion.k' inside a run entry.*Fix"),
    ),
    Row(
        "fusion_run_rerank",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25,rerank:ipc3_disjoint},{backend:dense}]"),
        error=(ConfigError, r"'rerank' inside a run entry.*re-ranked on its own.*Fix"),
    ),
    Row(
        "fusion_run_unknown_key",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25,bm25.kk:1},{backend:dense}]"),
        error=(ConfigError, r"fusion.runs: bm25.kk=1"),
    ),
    Row(
        "fusion_run_prf_key_of_other_method",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25,prf.alpha:2,prf:rm3},{backend:dense}]"),
        error=(ConfigError, r"prf.alpha=2.0: prf=rm3 does not use it"),
    ),
    Row(
        "fusion_weights_all_zero",
        None,
        ("fusion=rrf", "fusion.weights=[0,0]"),
        error=(ConfigError, r"fusion.weights\[\]=\[0.0, 0.0\]: every weight is 0.*Fix"),
    ),
    Row(
        "fusion_run_weights_all_zero",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25,weight:0},{backend:dense,weight:0}]"),
        error=(ConfigError, r"every weight is 0"),
    ),
    Row(
        "bm25_rocchio_alpha_beta_zero",
        None,
        ("prf=rocchio", "prf.alpha=0", "prf.beta=0"),
        error=(ConfigError, r"prf.alpha=0 and prf.beta=0: Rocchio's expanded query would be empty.*Fix"),
    ),
    Row(
        "dense_rocchio_alpha_beta_zero",
        None,
        ("backend=dense", "dense_prf=rocchio", "dense_prf.alpha=0", "dense_prf.beta=0"),
        error=(ConfigError, r"dense_prf.alpha=0 and dense_prf.beta=0.*Fix"),
    ),
    Row(
        "prf_key_of_other_method",
        None,
        ("prf=rm3", "prf.alpha=2"),
        error=(ConfigError, r"prf.alpha=2.0: prf=rm3 does not use it.*Fix"),
    ),
    Row(
        "rocchio_key_of_rm3",
        None,
        ("prf=rocchio", "prf.original_query_weight=0.9"),
        error=(ConfigError, r"prf.original_query_weight=0.9: prf=rocchio does not use it"),
    ),
    Row(
        "dense_prf_average_alpha",
        None,
        ("backend=dense", "dense_prf=average", "dense_prf.alpha=0.9"),
        error=(ConfigError, r"dense_prf.alpha=0.9: dense_prf=average does not use it"),
    ),
    Row(
        "bm25_prf_on_dense",
        None,
        ("backend=dense", "prf=rm3"),
        error=(ConfigError, r"prf=rm3: a bm25 lever, and this experiment searches with \['dense'\] only.*Fix"),
    ),
    Row(
        "dense_prf_on_bm25",
        None,
        ("dense_prf=average",),
        error=(ConfigError, r"dense_prf=average: a dense lever.*\['bm25'\] only"),
    ),
    Row(
        "dense_prf_on_bm25_only_fusion_runs",
        None,
        ("fusion=rrf", "fusion.runs=[{backend:bm25},{backend:bm25,query_fields:T}]", "dense_prf=average"),
        error=(ConfigError, r"dense_prf=average: a dense lever"),
    ),
    # ---- learning to rank that could not learn: refused, never a constant ranking reported as learned
    Row(
        "ltr_one_leaf",
        None,
        ("ltr=lambdamart", "ltr.num_leaves=1"),
        error=(ConfigError, r"ltr.num_leaves=1: a tree of one leaf"),
    ),
    Row(
        "ltr_negative_seed",
        None,
        ("ltr=lambdamart", "ltr.seed=-1"),
        error=(ConfigError, r"ltr.seed=-1: expected an integer >= 0"),
    ),
    Row(
        "ltr_more_folds_than_queries",
        None,
        ("ltr=lambdamart", "ltr.folds=500"),
        error=(ConfigError, r"ltr.folds=500: only \d+ queries have a positive.*Fix: ltr.folds <= \d+"),
    ),
    Row(
        "ltr_ipc_features_over_empty_codes",
        codes_as(lambda c: []),
        ("ltr=lambdamart", "ltr.features=[domain]"),
        error=(ConfigError, r"ltr: no tree made a split.*0 of \d+ feature columns vary.*Fix"),
    ),
    Row(
        "ltr_no_tree_can_split",
        None,
        ("ltr=lambdamart", "ltr.min_child_samples=100000"),
        error=(ConfigError, r"ltr: no tree made a split.*ltr.min_child_samples=100000.*Fix"),
    ),
    Row(
        "fractional_grades_err",
        grades(lambda r: r.astype(float) * 0.5),
        ("metrics=[nDCG@100,ERR@10]",),
        error=(ConfigError, r"metrics: ERR@10 depend\(s\) on the grade values.*multiplied by 10.*Fix"),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(world, row, caplog):
    folder = world.copy() if row.mutate else world.clean  # nothing writes into a dataset folder
    if row.mutate:
        row.mutate(folder)
    before = store_state(world.root)
    caplog.set_level(logging.WARNING)
    if row.error:
        exc, pattern = row.error
        with pytest.raises(exc) as e:
            run(world.root, folder, *row.overrides)
        text = f"{e.value} {e.value.__cause__ or ''}"  # Hydra names the override, its cause the values
        assert re.search(pattern, text), text
        if row.fix:
            assert "Fix" in text or "expected" in text, text
    else:
        got = run(world.root, folder, *row.overrides)
        if row.same:
            same_scores(scores(got), scores(world.ref))
        if row.check:
            row.check(got, world, folder)
    if row.logs:
        assert row.logs in caplog.text, caplog.text
    if store_state(world.root) != before:  # only a row that wrote to the store can have damaged it
        assert_reference_untouched(world, caplog)


def store_state(root: Path) -> dict:
    """Every file under the artifact root with its size and mtime, but for locks and the digest
    cache (written by any load, keyed by file identity, never read as an artifact)."""
    skip = (".lock", ".owner", "digests.json")
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in Path(root).rglob("*")
        if p.is_file() and not p.name.endswith(skip)
    }


def assert_reference_untouched(world: World, caplog) -> None:
    caplog.clear()
    caplog.set_level(logging.INFO)
    again = run(world.root, world.clean)
    assert "building" not in caplog.text, caplog.text
    assert again["scores_key"] == world.ref["scores_key"]
    assert snapshot(world.root, again) == world.snapshot


# ---------------------------------------------------------------- store state
def _artifact(root: Path, row: dict, kind: str) -> Path:
    if kind == "scores":
        return root / "runs" / "scores" / row["scores_key"]
    man = json.loads((root / "runs" / "scores" / row["scores_key"] / "manifest.json").read_text())
    key = next(a["key"] for a in man["artifacts"] if a["kind"] == kind)
    top = "runs" if kind in ("unit_run", "family_run", "fused_run", "scores") else "indexes"
    return root / top / kind / key


def truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def flip_bytes_same_size(p: Path) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8] = bytes(255 - b for b in data[mid : mid + 8])
    p.write_bytes(bytes(data))


def remove_runs_below(root: Path, row: dict) -> None:
    """Forget the runs of one experiment so that its next run must search its (damaged) index."""
    for kind in ("unit_run", "family_run", "scores"):
        shutil.rmtree(_artifact(root, row, kind))


def damage_segment(root, row):
    index = _artifact(root, row, "lucene") / "index"
    victim = max(
        (p for p in index.iterdir() if p.is_file() and not p.name.startswith(("segments", "write.lock"))),
        key=lambda p: p.stat().st_size,
    )
    victim.unlink()


def damage_segments_file_same_size(root, row):
    index = _artifact(root, row, "lucene") / "index"
    flip_bytes_same_size(next(index.glob("segments_*")))
    remove_runs_below(root, row)


STORE_ROWS = {
    # damage: what is done to the finished artifacts of a second experiment; verify: run with verify=true
    "unit_run_truncated": (
        lambda root, row: (
            truncate(_artifact(root, row, "unit_run") / "run.trec") or shutil.rmtree(_artifact(root, row, "family_run"))
        ),
        False,
        "has .* bytes",
    ),
    "family_run_truncated": (
        lambda root, row: (
            truncate(_artifact(root, row, "family_run") / "run.trec") or shutil.rmtree(_artifact(root, row, "scores"))
        ),
        False,
        "has .* bytes",
    ),
    "scores_file_deleted": (
        lambda root, row: (_artifact(root, row, "scores") / "per_query.csv").unlink(),
        False,
        "is missing",
    ),
    "meta_json_garbage": (
        lambda root, row: (_artifact(root, row, "scores") / "meta.json").write_text("{nope"),
        False,
        "unreadable",
    ),
    "lucene_segment_deleted": (damage_segment, False, "is missing"),
    "lucene_same_size_corruption_verify": (
        lambda root, row: (
            flip_bytes_same_size(
                max(
                    (p for p in (_artifact(root, row, "lucene") / "index").iterdir() if p.is_file()),
                    key=lambda p: p.stat().st_size,
                )
            )
            or remove_runs_below(root, row)
        ),
        True,
        "another SHA-256",
    ),
    "lucene_corrupt_segments_file": (damage_segments_file_same_size, False, "damaged"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(STORE_ROWS))
def test_damaged_artifact_is_rebuilt_with_the_right_score(world, case, caplog):
    damage, verify, message = STORE_ROWS[case]
    # A second experiment of its own (another index than the reference's: TAC, not TA, targets)
    k1 = (f"bm25.k1={0.5 + 0.01 * list(STORE_ROWS).index(case)}", "target_fields=TAC")
    first = run(world.root, world.clean, *k1)
    damage(world.root, first)
    caplog.set_level(logging.WARNING)
    again = run(world.root, world.clean, *k1, *(["verify=true"] if verify else []))
    assert caplog.records and any(r.levelno == logging.WARNING for r in caplog.records)
    assert re.search(message, caplog.text), caplog.text
    same_scores(scores(again), scores(first))
    assert Path(again["run_file"]).read_bytes() == Path(first["run_file"]).read_bytes()
    assert_reference_untouched(world, caplog)


@pytest.mark.slow
def test_edit_in_the_middle_of_a_large_corpus_changes_the_fingerprint(world):
    """Same size, same first and last 4 MiB: only a whole-content digest sees the edit."""
    from harness.data.digest import file_digest

    big = world.tmp / "big.bin"
    big.write_bytes(b"a" * (5 << 20) + b"MIDDLE" + b"z" * (5 << 20))
    cache = world.tmp / "digests.json"
    before = file_digest(big, cache)
    assert file_digest(big, cache) == before and json.loads(cache.read_text())  # cached by stat
    data = big.read_bytes().replace(b"MIDDLE", b"middle")
    big.write_bytes(data)
    assert file_digest(big, cache) != before


@pytest.mark.slow
def test_corpus_edit_rebuilds_instead_of_reusing_the_old_index(world):
    folder = world.copy()
    c = pd.read_parquet(folder / "corpus.parquet")
    c.loc[0, S.TITLE] = c.loc[0, S.TITLE][::-1]  # same length, other text
    c.to_parquet(folder / "corpus.parquet", index=False)
    row = run(world.root, folder)
    assert row["scores_key"] != world.ref["scores_key"]


@pytest.mark.slow
def test_lock_held_by_a_hung_builder_times_out_naming_it(world):
    from harness.data import load_local
    from harness.experiment import Experiment
    from harness.store import Store

    cfg = make_cfg(
        world.root,
        "dataset=local",
        f"dataset.path={world.clean}",
        *BASE,
        "bm25.k1=0.33",
        "store.lock_timeout=2",
        tiny=False,
    )
    exp = Experiment(cfg, load_local(world.clean), Store.from_config(cfg), plan=True)
    exp.scores()
    unit = next(n for n in exp.nodes if n.kind == "unit_run")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from filelock import FileLock; from harness.store import Store, Artifact\n"
                "lock = FileLock(sys.argv[2]); Store(sys.argv[1])._acquire(lock, Artifact('unit_run', {})); print('held', flush=True)\n"
                "time.sleep(120)"
            ),
            str(world.root),
            str(Store.from_config(cfg).path(unit)) + ".lock",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(
            StoreError, match=rf"timed out after 2s waiting for .*{unit.key}.lock, held by pid {holder.pid}.*kill it"
        ):
            execute(cfg)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_root_that_is_a_file(world):
    f = world.tmp / "not-a-dir"
    f.write_text("x")
    with pytest.raises(StoreError, match="not a directory.*Fix"):
        run(f, world.clean)


@pytest.mark.slow
def test_read_only_root_prints_cached_scores_and_refuses_to_build(world, tmp_path):
    """A fully cached experiment prints its scores from a read-only root; one that needs a build
    ends in one line naming the root and the fix. Root ignores permissions, so as root the copy is
    made immutable (chattr +i), which stops root's writes too."""
    import os
    import stat

    ro = tmp_path / "ro"
    shutil.copytree(world.root, ro)
    as_root = os.geteuid() == 0
    if as_root:
        made = (
            subprocess.run(["chattr", "-R", "+i", str(ro)], capture_output=True, text=True)
            if shutil.which("chattr")
            else None
        )
        if made is None or made.returncode != 0:
            pytest.skip(f"as root a read-only root needs chattr +i: {made.stderr.strip() if made else 'no chattr'}")
    else:
        for p in [ro, *ro.rglob("*")]:
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        base = [
            sys.executable,
            "-m",
            "harness.run",
            f"root={ro}",
            f"hydra.run.dir={tmp_path / 'hydra'}",
            "dataset=local",
            f"dataset.path={world.clean}",
            *BASE,
        ]
        ok = subprocess.run(base, cwd=ROOT, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr[-3000:]
        assert f"{world.ref['nDCG@100/ALL']:.4f}" in ok.stdout
        bad = subprocess.run(base + ["bm25.k1=0.44"], cwd=ROOT, capture_output=True, text=True)
        assert bad.returncode == 2
        text = bad.stdout + bad.stderr  # Hydra's log goes to stdout
        assert "Traceback" not in text and "not writable" in text and "HARNESS_ROOT" in text
    finally:
        if as_root:
            subprocess.run(["chattr", "-R", "-i", str(ro)], check=False)
        else:
            for p in [ro, *ro.rglob("*")]:
                p.chmod(p.stat().st_mode | stat.S_IWUSR)


# ---------------------------------------------------------------- BEIR files: messages in BEIR's names
def beir(root: Path, docs=None, queries=None, qrels="query-id\tcorpus-id\tscore\nQ1\tD1\t1\nQ1\tD2\t1\n") -> Path:
    docs = docs or [
        {"_id": "D1", "title": "pump", "text": "a pump", "ipc3": ["F04"]},
        {"_id": "D2", "title": "valve", "text": "a valve", "ipc3": ["F16"]},
    ]
    queries = queries or [{"_id": "Q1", "text": "pump valve", "ipc3": ["F04"]}]
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(x) + "\n" for x in queries))
    (root / "qrels" / "test.tsv").write_text(qrels)
    return root


def _latin1_corpus(root: Path) -> None:
    (root / "corpus.jsonl").write_bytes(
        (root / "corpus.jsonl").read_bytes() + '{"_id": "D3", "text": "caf\xe9"}\n'.encode("latin-1")
    )


BEIR_ROWS = {
    "unknown_corpus_id_error": (
        dict(qrels="query-id\tcorpus-id\tscore\nQ1\tD1\t1\nQ1\tD9\t1\n"),
        None,
        {"unknown_ids": "error"},
        r"test.tsv: column 'corpus-id' names 1 document.*D9.*Fix",
    ),
    "id_with_space": (
        dict(docs=[{"_id": "D 1", "title": "pump", "text": "a pump"}]),
        None,
        {},
        r"corpus.jsonl: column '_id' has 1 id.*white space.*'D 1'",
    ),
    "qrels_query_id_with_space": (
        dict(qrels="query-id\tcorpus-id\tscore\nQ 1\tD1\t1\n"),
        None,
        {},
        r"test.tsv: column 'query-id' has 1 id.*white space",
    ),
    "not_utf8": ({}, _latin1_corpus, {}, r"corpus.jsonl:3: not UTF-8 text.*Fix"),
    "qrels_score_text": (
        dict(qrels="query-id\tcorpus-id\tscore\nQ1\tD1\tyes\n"),
        None,
        {},
        r"test.tsv: column 'score' has non-numeric",
    ),
    "record_not_object": (
        {},
        lambda r: (r / "queries.jsonl").write_text('["Q1", "pump"]\n'),
        {},
        r"queries.jsonl:1: a JSON list, not an object",
    ),
}


@pytest.mark.parametrize("case", list(BEIR_ROWS))
def test_bad_beir_input(tmp_path, case):
    from harness.data import load_beir

    files, mutate, opts, pattern = BEIR_ROWS[case]
    root = beir(tmp_path / "beir", **files)
    if mutate:
        mutate(root)
    with pytest.raises(DataError, match=pattern):
        load_beir(root, **opts)


def test_beir_codes_as_strings_give_the_same_domains(tmp_path, caplog):
    from harness.data import load_beir

    lists = load_beir(beir(tmp_path / "a"))
    strings = load_beir(
        beir(
            tmp_path / "b",
            docs=[
                {"_id": "D1", "title": "pump", "text": "a pump", "ipc3": "['F04']"},
                {"_id": "D2", "title": "valve", "text": "a valve", "ipc3": "F16 B65"},
            ],
            queries=[{"_id": "Q1", "text": "pump valve", "ipc3": "F04"}],
        )
    )
    assert strings.positives.equals(lists.positives)
    assert strings.doc_ipc3 == {"D1": ("F04",), "D2": ("B65", "F16")}
    assert "corpus.jsonl: column 'ipc3' holds strings" in caplog.text  # BEIR's field name, not DAPFAM's


@pytest.mark.slow
def test_every_entry_point_uses_harness_root(world, tmp_path, monkeypatch, capsys):
    """compare, submit, validate_run --dataset mini and irds read the root named by HARNESS_ROOT,
    not the working directory."""
    from harness import compare, submit, validate_run
    from harness.data import irds

    monkeypatch.setenv("HARNESS_ROOT", str(world.root))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    other = run(world.root, world.clean, "bm25.k1=1.2", "name=bm25_paper_k1")
    assert compare.main(["--baseline", world.ref["scores_key"], "bm25_paper_k1"]) == 0
    assert "bm25_paper_k1" in capsys.readouterr().out
    assert submit.main(["--out", str(tmp_path / "sub"), "bm25_paper_k1"]) == 0
    assert (tmp_path / "sub" / f"{other['tag']}.trec").exists()
    assert validate_run.main([other["run_file"], "--dataset", "mini"]) == 0  # the tiny ids are mini's first ones
    assert "28 of the dataset's 40 topics are not in the run" in capsys.readouterr().out  # mini, loaded under the root
    assert (world.root / "indexes" / "dataset").is_dir() and not (elsewhere / "indexes").exists()
    ids = irds.register_defaults()
    assert "dapfam-mini/out" in ids and not (elsewhere / "indexes").exists()
    assert not (elsewhere / "runs").exists()


@pytest.mark.slow
def test_a_damaged_results_table_loses_no_score(world, tmp_path, caplog):
    """A hand-broken line in runs/results.jsonl: the experiment still prints its (right) scores and
    says why the table was not updated; compare names the file, line and fix."""
    from harness.compare import main as compare_main

    root = tmp_path / "root"
    shutil.copytree(world.root, root)
    table = root / "runs" / "results.jsonl"
    broken = len(table.read_text().splitlines()) + 1
    table.write_text(table.read_text() + '{"broken\n')
    caplog.set_level(logging.WARNING)
    row = run(root, world.clean)
    same_scores(scores(row), scores(world.ref))
    assert "results table not updated" in caplog.text and f"results.jsonl:{broken}: not a JSON row" in caplog.text
    with pytest.raises(SystemExit, match=rf"results.jsonl:{broken}: not a JSON row.*Fix: delete that line"):
        compare_main(["--results", str(table), "--baseline", "doc_bm25", "doc_dense"])


@pytest.mark.slow
def test_compare_refuses_systems_scored_on_other_judgments(world, tmp_path):
    """Paired tests over systems of two datasets would pair unrelated numbers: refused."""
    from harness.compare import main as compare_main

    root = tmp_path / "root"
    shutil.copytree(world.root, root)
    other = world.copy()
    edit("qrels_all.parquet", lambda t: t.iloc[: len(t) // 2])(other)
    mine = run(root, world.clean)
    theirs = run(root, other, "name=half_qrels")
    assert mine["scores_key"] != theirs["scores_key"]
    with pytest.raises(SystemExit, match="different data or judgments.*Fix"):
        compare_main(
            ["--results", str(root / "runs" / "results.jsonl"), "--baseline", mine["scores_key"], "half_qrels"]
        )


# ---------------------------------------------------------------- every setting counts (outside the table)
def test_run_entries_compose_like_a_command_line():
    """A group chosen inside a fusion run and its keys give the same run in either order, and the
    fused experiment's levers go only to runs of their backend."""
    from conftest import make_cfg

    from harness.config import run_config

    cfg = make_cfg(Path("/tmp/unused"), "+experiment=rrf_doc", "prf=rm3")
    a = run_config(cfg, {"backend": "bm25", "prf.fb_terms": 20, "prf": "rm3"})
    b = run_config(cfg, {"backend": "bm25", "prf": "rm3", "prf.fb_terms": 20})
    assert a.prf.fb_terms == b.prf.fb_terms == 20
    assert run_config(cfg, {"backend": "bm25"}).prf.method == "rm3"  # inherited by the BM25 run ...
    assert run_config(cfg, {"backend": "dense"}).prf is None  # ... not by the dense one


@pytest.mark.parametrize("case", ["prf.fb_terms=5", "rerank.weight=0.2", "dense_prf.k=2"])
def test_a_key_of_an_unselected_group_is_one_line(case):
    r = subprocess.run(
        [sys.executable, "-m", "harness.run", "+experiment=doc_bm25", case],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    group = case.split(".")[0]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{group} is not selected" in r.stderr and "Fix: choose it first" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "text,pattern",
    [
        ("blocks:\n  a:\n    +experiment: doc_bm25\n  a:\n    +experiment: doc_dense\n", r"duplicate key a.*Fix"),
        ("blocks: [1, 2]\n", r"needs a non-empty 'blocks:' mapping"),
        ("blocks:\n  a: 3\n", r"block 'a' is 3, not a mapping"),
        ("blocks:\n  a: {+experiment: doc_bm25\n", r"not a valid sweep file.*Fix"),
        ("blocks:\n  a: {+experiment: nope}\n", r"Could not find 'experiment/nope'.*Fix"),
        ("blocks:\n  a: {+experiment: doc_bm25, bm25.kk: 3}\n", r"Could not override 'bm25.kk'.*Fix"),
        ("blocks:\n  a: {+experiment: doc_bm25, prf.fb_terms: 5}\n", r"prf is not selected.*Fix"),
    ],
)
def test_a_bad_sweep_file_is_one_line(tmp_path, text, pattern):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "harness.sweep", f"sweep={f}", f"root={tmp_path}", "list=true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert last and re.search(pattern, last[-1]), r.stderr[-2000:]


@pytest.mark.slow
def test_compare_and_select_refuse_meaningless_arguments(world, tmp_path, capsys):
    from harness import compare, select

    res = str(world.root / "runs" / "results.jsonl")
    for argv, pattern in [
        (["--alpha", "5", "--baseline", "doc_bm25", "x"], r"--alpha 5.0: expected .* between 0 and 1"),
        (["--baseline", "doc_bm25", "doc_bm25"], r"only the baseline 'doc_bm25' was named"),
    ]:
        with pytest.raises(SystemExit) as e:
            compare.main(["--results", res, *argv])
        assert e.value.code == 2 and re.search(pattern, capsys.readouterr().err)
    with pytest.raises(SystemExit) as e:
        select.main(["sweep=x", "folds=abc", "--results", res])
    assert e.value.code == 2 and "folds='abc': expected an integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the fix names the filter given, not one that was not
        compare.main(["--results", res, "--baseline", "doc_bm25", "other", "--where", "bm25.k1=7"])
    assert "Fix: loosen --where, or name a scores key" in str(e.value) and "--dataset" not in str(e.value), e.value
    with pytest.raises(SystemExit) as e:
        select.main(["sweep=x", "seed=-1", "--results", res])
    assert e.value.code == 2 and "seed=-1: expected an integer >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_submit_verifies_what_it_packages_and_follows_a_moved_root(world, tmp_path):
    """A run file cut after it was scored is refused (its meta.json's size); a copied root
    packages its own files, found relative to it; --out naming a file is refused."""
    from harness.submit import main as submit_main

    moved = tmp_path / "moved"
    shutil.copytree(world.root, moved)
    res = moved / "runs" / "results.jsonl"
    assert submit_main(["--results", str(res), "--out", str(tmp_path / "sub"), world.ref["scores_key"]]) == 0
    run_file = moved / Path(world.ref["run_file"]).relative_to(world.root)
    assert (tmp_path / "sub" / f"{world.ref['tag']}.trec").read_bytes() == run_file.read_bytes()
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(SystemExit, match="is a file. Fix: name a folder"):
        submit_main(["--results", str(res), "--out", str(tmp_path / "a_file"), world.ref["scores_key"]])
    lines = run_file.read_text().splitlines()
    first_two = {line.split()[0] for line in lines[:1]} | {sorted({line.split()[0] for line in lines})[1]}
    run_file.write_text("".join(line + "\n" for line in lines if line.split()[0] not in first_two))
    with pytest.raises(SystemExit, match=r"run.trec: run.trec has \d+ bytes, \d+ when it was built.*Fix"):
        submit_main(["--results", str(res), "--out", str(tmp_path / "sub2"), world.ref["scores_key"]])
    assert not (tmp_path / "sub2").exists()


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_commits_nothing(tmp_path, tiny_folder):
    """The artifact root on a small tmpfs, filled up but a little: the build that runs out of space
    ends in one line naming the folder and the space, and leaves no artifact behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - 96 * 1024))
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.run",
                "+experiment=doc_bm25",
                "dataset=local",
                f"dataset.path={tiny_folder}",
                "target_fields=FULL",
                f"root={disk}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = r.stdout + r.stderr  # Hydra logs to stdout; Anserini prints its own Java stack trace to stderr
        assert r.returncode == 2 and "Traceback" not in out, out[-3000:]
        assert re.search(
            r"no space left on the device while building .* free now\). Nothing was committed. Fix: free "
            r"more than",
            out,
        ), out[-3000:]
        assert not list(disk.rglob("meta.json")) or all((p.parent / "meta.json").exists() for p in disk.rglob("*.tmp"))
        assert not list(disk.rglob(".*.tmp")), "a temporary build folder was left behind"
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
