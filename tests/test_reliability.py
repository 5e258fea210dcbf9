"""Bad inputs, crash safety, concurrency and determinism of the artifact path."""
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import HydraException

from conftest import ROOT, kill_mid_build, make_cfg, tiny_overrides
from harness.data.schema import DataError
from harness.experiment import ConfigError
from harness.run import execute


def finished_and_partial(root: Path):
    """(finished artifact folders, leftovers of builds that did not finish)."""
    done, partial = [], []
    for top in ("indexes", "runs"):
        for p in (root / top).glob("*/*"):
            if p.is_dir():
                (partial if p.name.startswith(".") or not (p / "meta.json").exists() else done).append(p)
    return done, partial


@pytest.mark.parametrize("overrides,error,pattern", [
    (["passage.length=8", "+experiment=passage_bm25"], DataError, r"passage.length=8"),
    (["passage.length=10000", "+experiment=passage_bm25"], DataError, r"16 to 8192"),
    (["passage.stride=500", "+experiment=passage_bm25"], DataError, r"passage.stride=500"),
    (["passage.tokenizer=chars", "+experiment=passage_bm25"], ConfigError, r"passage.tokenizer='chars'"),
    (["search.k=0"], ConfigError, r"search.k=0"),
    (["search.depth=10"], ConfigError, r"search.depth=10 < search.k=100"),
    (["+experiment=rrf_doc", "fusion.backends=[bm25,bm25]"], ConfigError, r"fusion.backends"),
    (["+experiment=rrf_doc", "fusion.k=-1"], ConfigError, r"fusion.k=-1"),
    (["encoder.pooling=max"], ConfigError, r"encoder.pooling='max'"),
    (["dense.quantization=pq"], ConfigError, r"dense.quantization='pq'"),
    (["metrics=[nDCG@x]"], ValueError, r"ir-measures measure name"),
    (["+experiment=doc_dense", "encoder.model=/no/such/model"], FileNotFoundError, r"encoder.model=/no/such/model"),
    (["query_fields.name=XY"], DataError, r"query_fields='XY'"),
])
def test_bad_config_values_fail_clearly_and_leave_no_partial_artifact(tmp_path, overrides, error, pattern):
    cfg = make_cfg(tmp_path, *overrides)
    with pytest.raises(error, match=pattern):
        execute(cfg)
    _, partial = finished_and_partial(tmp_path)
    assert partial == []


@pytest.mark.parametrize("override", ["aggregation=minp", "dataset=nowhere", "target_fields=ABSTRACT"])
def test_unknown_group_options_are_hydra_errors_naming_the_choices(tmp_path, override):
    with pytest.raises(HydraException, match="Available options"):
        make_cfg(tmp_path, override)


def test_local_dataset_without_path(tmp_path):
    with pytest.raises(Exception, match="dataset.path"):
        execute(make_cfg(tmp_path, "dataset=local", tiny=False))


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
    return [sys.executable, "-m", "harness.run", f"root={root}", f"hydra.run.dir={root}/hydra", *tiny_overrides(), *overrides]


def _read_scores(root):
    import pandas as pd

    return pd.read_json(Path(root) / "runs" / "results.jsonl", lines=True)[["scores_key", "nDCG@100/ALL", "R@100/OUT"]]


BIG = ["dataset.params.n_docs=3000", "dataset.params.description_words=[300,500]"]


def test_sigkill_during_index_build_then_rerun_equals_uninterrupted(tmp_path):
    args = ["+experiment=doc_bm25", "target_fields=FULL", *BIG]
    proc = subprocess.Popen(_cli(tmp_path / "a", *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lucene = tmp_path / "a" / "indexes" / "lucene"
    kill_mid_build(proc, lambda: lucene.exists() and any(lucene.glob(".*.tmp")))
    assert not [p for p in lucene.glob("[!.]*") if p.is_dir()]  # nothing taken for finished
    for root in ("a", "b"):
        assert subprocess.run(_cli(tmp_path / root, *args), cwd=ROOT, capture_output=True).returncode == 0
    assert _read_scores(tmp_path / "a").equals(_read_scores(tmp_path / "b"))
    assert not any(lucene.glob(".*.tmp"))  # the stale temporary build was cleaned up


def test_sigkill_during_encoding_then_rerun_equals_uninterrupted(tmp_path):
    args = ["+experiment=doc_dense", "target_fields=TA"]
    proc = subprocess.Popen(_cli(tmp_path / "a", *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    emb = tmp_path / "a" / "indexes" / "embeddings"
    kill_mid_build(proc, lambda: emb.exists() and any(emb.glob(".*.tmp")), settle=1.0)
    assert not [p for p in emb.glob("[!.]*") if p.is_dir()]
    for root in ("a", "b"):
        r = subprocess.run(_cli(tmp_path / root, *args), cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
    assert _read_scores(tmp_path / "a").equals(_read_scores(tmp_path / "b"))


def test_two_processes_asking_for_one_index_build_it_once(tmp_path):
    args = ["+experiment=doc_bm25", "target_fields=FULL", *BIG]
    procs = [subprocess.Popen(_cli(tmp_path, *args, f"search.threads={t}"), cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for t in (1, 2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    log = "\n".join(outs)
    assert log.count("building BM25 index") == 1
    assert log.count("reused BM25 index") >= 1
    assert len([p for p in (tmp_path / "indexes" / "lucene").glob("[!.]*") if p.is_dir()]) == 1


@pytest.mark.parametrize("experiment", ["passage_bm25", "doc_dense"])
def test_same_experiment_twice_gives_byte_identical_run_files(tmp_path, experiment):
    rows = []
    for root, threads in (("a", 1), ("b", 2)):
        rows.append(execute(make_cfg(tmp_path / root, f"+experiment={experiment}", f"search.threads={threads}",
                                     f"index.threads={threads}")))
    a, b = (Path(r["run_file"]).read_bytes() for r in rows)
    assert a == b and len(a) > 0
    unit_runs = [next(p for p in (tmp_path / r / "runs" / "unit_run").iterdir() if p.is_dir()) for r in ("a", "b")]
    assert (unit_runs[0] / "run.trec").read_bytes() == (unit_runs[1] / "run.trec").read_bytes()
