"""Sharded encoding and indexing (harness/shards.py): the same ranking as unsharded, shards that
resume on their own, jobs that fail by name, and the listing and estimate that show them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, killed_at, tiny_overrides

from harness import shards, stage
from harness.run import execute
from harness.runs import read_trec

TA = ("query_fields=TA", "target_fields=TA")


def test_shards_are_contiguous_cover_the_units_and_differ_by_at_most_one():
    for units in (0, 1, 7, 200, 1001):
        for n in (1, 2, 3, 4, 7):
            spans = [shards.span(i, n, units) for i in range(n)]
            assert spans[0][0] == 0 and spans[-1][1] == units
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
            sizes = [hi - lo for lo, hi in spans]
            assert max(sizes) - min(sizes) <= 1


def _run(row) -> pd.DataFrame:
    return read_trec(row["run_file"]).reset_index(drop=True)


def _nodes(root, kind):
    """The finished artifacts of a kind (folders with a meta.json; not locks, not temporary folders)."""
    folder = root / "indexes" / kind
    return sorted(d for d in folder.iterdir() if (d / "meta.json").exists()) if folder.exists() else []


@pytest.mark.slow
@pytest.mark.long
def test_sharded_bm25_and_dense_rank_as_unsharded(tmp_path, cfg_factory):
    """In process: a 3-shard BM25 index (passages) gives the unsharded run file byte for byte,
    BM25's statistics being the whole corpus's; 3-shard encodings give the unsharded vectors (to
    float tolerance: batches differ) and the same ranking. Each shard and each merge is an
    artifact; shards=1 keeps the unsharded keys (the default sweep's keys test)."""
    root = tmp_path / "store"
    bm = ("+experiment=passage_bm25", *TA, "passage.length=32")
    plain = execute(cfg_factory(*bm))
    sharded = execute(cfg_factory(*bm, "shards=3"))
    assert _run(plain).equals(_run(sharded))
    assert plain["nDCG@100/OUT"] == sharded["nDCG@100/OUT"] and plain["scores_key"] != sharded["scores_key"]
    assert len(_nodes(root, stage.LUCENE_SHARD)) == 3 and len(_nodes(root, stage.LUCENE)) == 2

    # float32: a bfloat16 vector depends on the batch its text is encoded in (padding, kernel
    # blocking) at the third decimal, and a shard batches other texts together (docs/sweeps.md)
    dense = ("+experiment=passage_dense", *TA, "passage.length=32", "encoder.dtype=float32")
    plain = execute(cfg_factory(*dense))
    sharded = execute(cfg_factory(*dense, "shards=3"))
    a, b = _run(plain), _run(sharded)
    assert (a["doc_id"] == b["doc_id"]).all() and np.allclose(a["score"], b["score"], atol=1e-5)
    whole, merged = (
        [d for d in _nodes(root, stage.EMBEDDINGS) if ("shards" in json.loads((d / "meta.json").read_text())) == m]
        for m in (False, True)
    )
    assert len(whole) == len(merged) == 1 and len(_nodes(root, stage.EMBEDDING_SHARD)) == 3
    assert (whole[0] / "docid").read_text() == (merged[0] / "docid").read_text()
    np.testing.assert_allclose(
        np.load(whole[0] / "embeddings.npy"), np.load(merged[0] / "embeddings.npy"), atol=1e-5, rtol=0
    )
    assert sharded["encode_seconds"] > 0  # the rows count the shards' work


@pytest.mark.slow
def test_a_shard_killed_mid_build_is_the_only_one_built_again(tmp_path):
    """The last of three BM25 shards killed mid-build (SIGKILL, its temporary folder left): the
    rerun reuses the two committed shards and builds that one only, then the merge."""
    root = tmp_path / "store"
    cmd = [
        sys.executable,
        "-m",
        "harness.run",
        "+experiment=doc_bm25",
        *TA,
        "shards=3",
        f"root={root}",
        *tiny_overrides(),
    ]
    shard_dir = root / "indexes" / stage.LUCENE_SHARD
    killed_at(cmd, "shard-2", lambda: any(p.name.endswith(".tmp") for p in shard_dir.iterdir()))
    done = {d.name: (d / "meta.json").stat().st_mtime_ns for d in shard_dir.iterdir() if (d / "meta.json").exists()}
    assert len(done) == 2
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = {d.name: (d / "meta.json").stat().st_mtime_ns for d in shard_dir.iterdir() if (d / "meta.json").exists()}
    assert len(after) == 3 and all(after[k] == v for k, v in done.items())
    said = r.stdout + r.stderr  # the store's log lines (Hydra logs to the console)
    assert "building BM25 index shard 2/3" in said and "building BM25 index shard 0/3" not in said


@pytest.mark.slow
def test_shard_jobs_run_as_processes_and_a_failed_job_is_named_then_resumed(tmp_path, cfg_factory, monkeypatch):
    """sharding.launcher=local: each shard a job of its own (submitit's local executor, the Slurm
    path's code). A job that dies (shard 1 killed) fails the experiment with one line naming the
    shard and its log, keeping the other; the rerun builds shard 1 alone and gives the unsharded
    run file. BM25 shards (a JVM each): encoding shard jobs, the same submitting code on another
    executor, run on Slurm in tests/test_slurm.py."""
    args = ("+experiment=doc_bm25", *TA, "shards=2", "sharding.launcher=local", "sharding.cpus_per_task=1")
    monkeypatch.setenv("HARNESS_FAULT", "shard-1")
    with pytest.raises(shards.ShardError, match=r"1 of 2 BM25 index shard jobs failed: shard 1/2 \(job .*log .*\)"):
        execute(cfg_factory(*args))
    monkeypatch.delenv("HARNESS_FAULT")
    root = tmp_path / "store"
    kept = {d.name: (d / "meta.json").stat().st_mtime_ns for d in _nodes(root, stage.LUCENE_SHARD)}
    assert len(kept) == 1
    row = execute(cfg_factory(*args))
    after = {d.name: (d / "meta.json").stat().st_mtime_ns for d in _nodes(root, stage.LUCENE_SHARD)}
    assert len(after) == 2 and all(after[k] == v for k, v in kept.items())
    assert _run(execute(cfg_factory("+experiment=doc_bm25", *TA))).equals(_run(row))


def test_sharding_settings_are_checked(cfg_factory):
    from harness.config import ConfigError, check

    with pytest.raises(ConfigError, match=r"shards=0: expected a positive integer"):
        check(cfg_factory("+experiment=doc_bm25", "shards=0"))
    with pytest.raises(ConfigError, match=r"sharding.launcher=cloud: expected inline, local or slurm"):
        check(cfg_factory("+experiment=doc_bm25", "shards=2", "sharding.launcher=cloud"))


def test_an_encoding_shard_job_asks_for_a_gpu_when_the_encoder_does(cfg_factory):
    from types import SimpleNamespace

    def gpus(*o):
        return shards._gpus(SimpleNamespace(cfg=cfg_factory("+experiment=doc_dense", *o)))

    assert gpus() == 0 and gpus("encoder.device=cuda") == 1
    assert gpus("encoder.device=cuda", "sharding.gpus_per_task=2") == 2 and gpus("sharding.gpus_per_task=1") == 1


def test_slurm_shards_without_slurm_are_refused_before_anything_runs(cfg_factory, monkeypatch):
    import shutil

    from harness.config import ConfigError, check

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(
        ConfigError, match=r"sharding.launcher=slurm: there is no sbatch .*Fix: sharding.launcher=local"
    ):
        check(cfg_factory("+experiment=doc_bm25", "shards=2", "sharding.launcher=slurm"))
    check(cfg_factory("+experiment=doc_bm25", "shards=2", "sharding.launcher=local"))  # the fix passes


@pytest.mark.slow
def test_a_shard_damaged_without_changing_its_size_is_never_merged(cfg_factory):
    """The shard's bytes change, its size does not: the merge checks every shard's SHA-256 first,
    removes the damaged one and says so; the next run builds that shard alone, then the merge, and
    ranks as before."""
    from harness.run import execute
    from harness.store import DamagedArtifact, Store

    args = ("+experiment=doc_bm25", "query_fields=TA", "target_fields=TA", "shards=2")
    first = execute(cfg_factory(*args))
    cfg = cfg_factory(*args)
    store = Store.from_config(cfg)
    merged = next(p for p in (store.root / "indexes" / "lucene").iterdir() if (p / "meta.json").exists())
    meta = json.loads((merged / "meta.json").read_text())
    assert set(meta["inputs"]) == {p["key"] for p in meta["parents"]} and len(meta["inputs"]) == 2
    shard = store.root / "indexes" / "lucene_shard" / meta["parents"][1]["key"]
    biggest = max(
        (p for p in shard.rglob("*") if p.is_file() and p.name != "meta.json"), key=lambda p: p.stat().st_size
    )
    data = bytearray(biggest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    biggest.write_bytes(bytes(data))
    shutil.rmtree(merged)  # the merge is to be made again (from the damaged shard, before this fix)
    for kind in ("unit_run", "family_run", "scores"):
        shutil.rmtree(store.root / "runs" / kind, ignore_errors=True)
    with pytest.raises(DamagedArtifact, match=r"lucene_shard .* has another SHA-256 .* not merged, and is removed"):
        execute(cfg_factory(*args))
    assert not shard.exists()
    again = execute(cfg_factory(*args))
    assert again["nDCG@100/ALL"] == first["nDCG@100/ALL"] and again["nDCG@100/OUT"] == first["nDCG@100/OUT"]


def test_a_merge_whose_shard_was_rebuilt_is_stale(tmp_path):
    from harness.store import META, Store, inputs_of

    store = Store(tmp_path)
    shard = store.folder("lucene_shard", "s1")
    shard.mkdir(parents=True)
    (shard / META).write_text(
        json.dumps({"kind": "lucene_shard", "key": "s1", "files": {"a": {"size": 3, "sha256": "x"}}})
    )
    meta = {"parents": [{"kind": "lucene_shard", "key": "s1"}], "inputs": {"s1": inputs_of(shard)}}
    assert store.stale_inputs(meta) is None
    (shard / META).write_text(
        json.dumps({"kind": "lucene_shard", "key": "s1", "files": {"a": {"size": 3, "sha256": "y"}}})
    )
    assert store.stale_inputs(meta) == "its input lucene_shard s1 was rebuilt since (other files)"
