"""Bad inputs, crash safety, concurrency and determinism of the artifact path."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, killed_at, make_cfg, tiny_overrides
from hydra.errors import HydraException

from harness.config import ConfigError
from harness.data.schema import DataError
from harness.run import execute


def finished_and_partial(root: Path):
    """(finished artifact folders, leftovers of builds that did not finish)."""
    done, partial = [], []
    for top in ("indexes", "runs"):
        for p in (root / top).glob("*/*"):
            if p.is_dir():
                (partial if p.name.startswith(".") or not (p / "meta.json").exists() else done).append(p)
    return done, partial


@pytest.mark.parametrize(
    "overrides,error,pattern",
    [
        (["passage.length=8", "+experiment=passage_bm25"], DataError, r"passage.length=8"),
        (["passage.length=10000", "+experiment=passage_bm25"], DataError, r"16 to 8192"),
        (["passage.stride=500", "+experiment=passage_bm25"], DataError, r"passage.stride=500"),
        (["search.k=0"], ConfigError, r"search.k=0"),
        (["search.depth=10"], ConfigError, r"search.depth=10 < search.k=100"),
        (["+experiment=rrf_doc", "fusion.backends=[bm25,bm25]"], ConfigError, r"fusion.backends"),
        (["+experiment=rrf_doc", "fusion.k=-1"], ConfigError, r"fusion.k=-1"),
        (["metrics=[nDCG@x]"], ConfigError, r"ir-measures measure name"),
        (["+experiment=rrf_doc", "fusion.depth=101"], ConfigError, r"fusion.depth=101 > search.k=100"),
        (["backend=splade"], ConfigError, r"backend='splade': no module harness/backends/splade.py"),
        (["+experiment=doc_dense", "encoder.model=/no/such/model"], FileNotFoundError, r"encoder.model=/no/such/model"),
    ],
)
@pytest.mark.slow
def test_bad_config_values_fail_clearly_and_leave_no_partial_artifact(tmp_path, overrides, error, pattern):
    cfg = make_cfg(tmp_path, *overrides)
    with pytest.raises(error, match=pattern):
        execute(cfg)
    _, partial = finished_and_partial(tmp_path)
    assert partial == []


@pytest.mark.parametrize("override", ["dataset=nowhere", "encoder=bert", "bm25=tuned"])
def test_unknown_group_options_are_hydra_errors_naming_the_choices(tmp_path, override):
    with pytest.raises(HydraException, match="Available options"):
        make_cfg(tmp_path, override)


@pytest.mark.parametrize(
    "override,values",
    [
        ("aggregation=minp", "maxp, avgp, sump, avg_top3"),
        ("target_fields=ABSTRACT", "TA, TAC, FULL, DESC"),
        ("query_fields=XY", "T, TA, TAC, KW"),
        ("granularity=para", "document, passage"),
        ("passage.tokenizer=chars", "auto, words, encoder"),
        ("encoder.pooling=max", "mean, cls"),
        ("dense.quantization=pq", "none, int8"),
        ("encoder.dtype=float64", "auto, float32, float16, bfloat16, int8"),
    ],
)
def test_typed_choices_fail_when_composed_naming_the_values(tmp_path, override, values):
    """The config schema (harness/config.py) checks every choice while Hydra composes."""
    with pytest.raises(HydraException) as e:
        make_cfg(tmp_path, override)
    assert override in str(e.value) and f"expected one of [{values}]" in str(e.value.__cause__)


def test_every_config_leaf_is_keyed_or_listed_as_not_changing_results(tmp_path):
    """Flip each leaf of the composed config: some artifact key must change, unless the leaf is on
    the one list of values that never change results (threads, batch size, device, paths). A flip
    the config check refuses (a key the method does not read) counts neither way: the leaf must
    change a key in another experiment."""
    import pandas as pd
    from conftest import TINY
    from omegaconf import OmegaConf

    from harness.config import NOT_IN_KEYS, OPTIONAL_GROUPS
    from harness.data import load_local, mini
    from harness.experiment import Experiment

    folder = mini.write(tmp_path / "data", **dict(TINY, description_words=tuple(TINY["description_words"])))
    qrels = pd.read_parquet(folder / "qrels_all.parquet")  # data on which the judgment options matter:
    qrels.loc[0, "domain_rel"] = "OUT" if qrels.loc[0, "domain_rel"] == "IN" else "IN"  # a label IPC3 contradicts
    ghost = qrels.iloc[:1].assign(relevant_id="GHOST", relevance_score=1)  # a judged document not in the corpus
    pd.concat([qrels, ghost]).to_parquet(folder / "qrels_all.parquet", index=False)
    ds = load_local(folder)
    experiments = [
        ("+experiment=passage_dense",),
        ("+experiment=rrf_passage",),
        ("+experiment=passage_bm25",),
        ("+experiment=xdomain",),
        ("+experiment=doc_bm25", "prf=rocchio"),
        ("+experiment=doc_bm25", "prf=rm3"),
        ("+experiment=rrf_doc", "dense_prf=rocchio", "rerank=ipc3_disjoint"),
        ("+experiment=doc_bm25", "query_reduction=tfidf", "ltr=lambdamart"),
    ]
    flips = {
        "passage.tokenizer": "words",
        "passage.stride": 64,
        "passage.length": 64,
        "aggregation": "sump",
        "query_fields": "TAC",
        "target_fields": "FULL",
        "granularity": "document",
        "backend": "dense",
        "encoder.model": "package:other",
        "encoder.revision": "abc",
        "encoder.pooling": "cls",
        "encoder.normalize": False,
        "encoder.max_length": 64,
        "encoder.query_prefix": "q: ",
        "encoder.doc_prefix": "d: ",
        "encoder.dtype": "float16",  # auto runs bfloat16 or float32, by machine: float16 is neither
        "encoder.train": "crossfit",  # refused at passage level: keyed by xdomain's document-level dense runs
        "bm25.k1": 1.2,
        "bm25.b": 0.75,
        "search.depth": 500,
        "search.k": 200,
        "dense.quantization": "int8",
        "metrics": ["AP@100"],
        "fusion.k": 10,
        "fusion.depth": 50,
        "fusion.weights": None,
        "fusion.backends": ["dense", "bm25"],
        "dataset.domain_source": "ipc3",
        "dataset.unknown_ids": "drop",
        "dataset.drop_self_hits": False,
        "fusion.method": "interpolation",
        "fusion.runs": [{"backend": "bm25"}, {"backend": "dense", "query_fields": "KW"}],
        "prf.method": "rocchio",
        "prf.fb_terms": 5,
        "prf.fb_docs": 3,
        "prf.original_query_weight": 0.3,
        "prf.alpha": 0.8,
        "prf.beta": 0.5,
        "dense_prf.method": "average",
        "dense_prf.k": 5,
        "dense_prf.alpha": 0.9,
        "dense_prf.beta": 0.2,
        "rerank.weight": 0.3,
        "rerank.k": 10,
        "query_reduction.method": "kl",
        "query_reduction.n_terms": 7,
        "ltr.method": "lambdamart",
        "ltr.depth": 50,
        "ltr.features": ["run", "ipc"],
        "ltr.out_weight": 4.0,
        "ltr.folds": 3,
        "ltr.seed": 1,
        "ltr.n_estimators": 50,
        "ltr.learning_rate": 0.1,
        "ltr.num_leaves": 7,
        "ltr.min_child_samples": 5,
        "ltr.truncation": 20,
        "ltr.allow_identifying": ["ipc"],
        "ltr.prior": "qrels.txt",  # refused without the prior family: used or refused
        "ltr.train": "mini",
        "ltr.nested": False,
        "shards": 2,
    }

    def keys(cfg):
        exp = Experiment(cfg, ds, plan=True)
        exp.scores()
        return {n.key for n in exp.nodes}

    changes: dict[str, bool] = {}
    for experiment in experiments:
        cfg = make_cfg(tmp_path / "store", "dataset=local", f"dataset.path={folder}", *experiment, tiny=False)
        plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        unchanged = keys(cfg)  # planned once per experiment, compared with each leaf's change

        def walk(node, prefix=""):
            for k, v in node.items():
                if v is None and k in OPTIONAL_GROUPS:  # optional groups: walked where set
                    continue
                if isinstance(v, dict) and k not in ("files", "params", "published"):
                    yield from walk(v, f"{prefix}{k}.")
                else:
                    yield f"{prefix}{k}"

        for leaf in walk(plain):
            if leaf in NOT_IN_KEYS or leaf in ("rerank.method", "ltr.method"):  # one choice each today
                continue
            assert leaf in flips, f"{leaf}: a new config value; key it or add it to harness.config.NOT_IN_KEYS"
            changed = cfg.copy()
            value = flips[leaf]
            if leaf == "fusion.weights":  # one weight per fused run
                n = len(cfg.fusion.runs) or len(cfg.fusion.backends)
                value = [2.0] + [1.0] * (n - 1)
            OmegaConf.update(changed, leaf, value, merge=False)
            if leaf.startswith("dataset."):  # judgments and self-hits are data: reload with the option
                from harness.data import load

                other = load(changed.dataset, tmp_path / "store")
                exp = Experiment(changed, other, plan=True)
                exp.scores()
                same = {n.key for n in exp.nodes} == unchanged
                if leaf == "dataset.drop_self_hits":  # keyed where queries are documents (test_bad_inputs)
                    continue
            else:
                try:
                    same = keys(changed) == unchanged
                except ConfigError:  # refused (e.g. prf.alpha under rm3): used or refused, keyed where it is used
                    continue
            changes[leaf] = changes.get(leaf, False) or not same
    assert not [leaf for leaf, changed in changes.items() if not changed]
    assert {
        "encoder.dtype",
        "encoder.revision",
        "passage.tokenizer",
        "bm25.k1",
        "fusion.depth",
        "fusion.weights",
        "prf.alpha",
        "prf.original_query_weight",
        "dense_prf.beta",
        "rerank.weight",
        "query_reduction.n_terms",
        "ltr.out_weight",
        "ltr.features",
    } <= set(changes)


def test_local_dataset_without_path(tmp_path):
    with pytest.raises(Exception, match="dataset.path"):
        execute(make_cfg(tmp_path, "dataset=local", tiny=False))


@pytest.mark.slow
def test_index_without_segments_file_is_rebuilt(tmp_path, caplog):
    cfg = make_cfg(tmp_path, "+experiment=doc_bm25")
    first = execute(cfg)
    index = next(p for p in (tmp_path / "indexes" / "lucene").iterdir() if p.is_dir())
    for f in (index / "index").glob("segments_*"):
        f.unlink()
    for p in (tmp_path / "runs").glob("*/*"):  # force a new search on the damaged index
        if p.is_dir():
            import shutil

            shutil.rmtree(p)
    again = execute(cfg)
    assert "segments_" in caplog.text and "is missing" in caplog.text and "build it again" in caplog.text
    assert Path(again["run_file"]).read_bytes() == Path(first["run_file"]).read_bytes()
    assert execute(cfg)["nDCG@100/ALL"] == first["nDCG@100/ALL"]  # and no failure the second time either


def _cli(root, *overrides):
    return [
        sys.executable,
        "-m",
        "harness.run",
        f"root={root}",
        f"hydra.run.dir={root}/hydra",
        *tiny_overrides(),
        *overrides,
    ]


def _read_scores(root):
    import pandas as pd

    return pd.read_json(Path(root) / "runs" / "results.jsonl", lines=True)[["scores_key", "nDCG@100/ALL", "R@100/OUT"]]


BIG = ["dataset.params.n_docs=3000", "dataset.params.description_words=[300,500]"]


@pytest.mark.slow
def test_sigkill_during_index_build_then_rerun_equals_uninterrupted(tmp_path):
    args = ["+experiment=doc_bm25", "target_fields=FULL"]
    lucene = tmp_path / "a" / "indexes" / "lucene"

    def streaming():  # the index's temporary folder, with IndexCollection's named pipes in it
        return any(p.is_fifo() for p in lucene.glob(".*.tmp/feed/docs/*"))

    killed_at(_cli(tmp_path / "a", *args), "bm25-streaming", streaming)
    assert not [p for p in lucene.glob("[!.]*") if p.is_dir()]  # nothing taken for finished
    for root in ("a", "b"):  # the rerun and the uninterrupted reference: in this process (no second start-up)
        execute(make_cfg(tmp_path / root, *args))
    assert _read_scores(tmp_path / "a").equals(_read_scores(tmp_path / "b"))
    assert not any(lucene.glob(".*.tmp"))  # the stale temporary build was cleaned up
    assert not [p for p in (tmp_path / "a").rglob("*") if p.is_fifo()]  # and its named pipes with it


@pytest.mark.slow
@pytest.mark.long
def test_sigkill_during_encoding_then_rerun_equals_uninterrupted(tmp_path):
    args = ["+experiment=doc_dense", "target_fields=TA"]
    emb = tmp_path / "a" / "indexes" / "embeddings"
    killed_at(_cli(tmp_path / "a", *args), "encoding", lambda: any(emb.glob(".*.tmp")))
    assert not [p for p in emb.glob("[!.]*") if p.is_dir()]
    for root in ("a", "b"):  # the rerun and the uninterrupted reference: in this process (no second start-up)
        execute(make_cfg(tmp_path / root, *args))
    assert _read_scores(tmp_path / "a").equals(_read_scores(tmp_path / "b"))


@pytest.mark.slow
def test_two_processes_asking_for_one_index_build_it_once(tmp_path):
    args = ["+experiment=doc_bm25", "target_fields=FULL", *BIG]
    procs = [
        subprocess.Popen(
            _cli(tmp_path, *args, f"search.threads={t}"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for t in (1, 2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    log = "\n".join(outs)
    assert log.count("building BM25 index") == 1
    assert log.count("reused BM25 index") >= 1
    assert len([p for p in (tmp_path / "indexes" / "lucene").glob("[!.]*") if p.is_dir()]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("experiment", ["passage_bm25", "doc_dense"])
def test_same_experiment_twice_gives_byte_identical_run_files(tmp_path, experiment):
    rows = []
    for root, threads in (("a", 1), ("b", 2)):
        rows.append(
            execute(
                make_cfg(
                    tmp_path / root,
                    f"+experiment={experiment}",
                    f"search.threads={threads}",
                    f"index.threads={threads}",
                )
            )
        )
    a, b = (Path(r["run_file"]).read_bytes() for r in rows)
    assert a == b and len(a) > 0
    unit_runs = [next(p for p in (tmp_path / r / "runs" / "unit_run").iterdir() if p.is_dir()) for r in ("a", "b")]
    assert (unit_runs[0] / "run.trec").read_bytes() == (unit_runs[1] / "run.trec").read_bytes()
