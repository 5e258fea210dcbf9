"""The cluster path on a real Slurm: a single-node cluster on this machine (scripts/slurm-local.sh,
started by .ci/run). Skipped, with the reason, where Slurm is not installed or cannot start."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, sweep_args

from harness.sweep import main

SCRIPT = ROOT / "scripts" / "slurm-local.sh"


@pytest.fixture(scope="module")
def slurm():
    """SLURM_CONF of a running local cluster: the one .ci/run started, else start it (as root)."""
    conf = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/harness-slurm")) / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if not shutil.which("sbatch") or not shutil.which("slurmctld"):
        pytest.skip("Slurm is not installed (scripts/slurm-local.sh install, as root, installs Debian's packages)")
    up = conf.exists() and subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
    if not up or not any(s in up for s in ("idle", "mix", "alloc")):
        if os.geteuid() != 0:
            pytest.skip("no local Slurm running and starting one needs root (scripts/slurm-local.sh start)")
        r = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"the local Slurm did not start: {(r.stdout + r.stderr)[-500:]}")
    return env


def _sweep(root: Path, sweep: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.sweep", *sweep_args(root, sweep, *extra)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


@pytest.mark.slow
def test_slurm_sweep_equals_in_process_and_builds_the_shared_index_once(tmp_path, slurm):
    """Hydra's Slurm launcher: one job per experiment, the table the same as in process. Two BM25
    jobs race for one index and build it once (one pair suffices: the store locks every kind of
    artifact alike); one dense job loads its model and encodes on the cluster."""
    sweep = tmp_path / "small.yaml"
    sweep.write_text(
        "blocks:\n  b:\n    +experiment: doc_bm25\n    query_fields: T,TA\n    target_fields: TA\n"
        "  d:\n    +experiment: doc_dense\n    query_fields: TA\n    target_fields: TA\n"
    )
    settings = [
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=2",
        "hydra.launcher.timeout_min=15",
        "hydra.launcher.partition=local",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]
    r = _sweep(tmp_path / "slurm", sweep, slurm, "launcher=slurm", *settings)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    # the reference: the same sweep in this process (no second start-up of a JVM and a model)
    assert main(sweep_args(tmp_path / "local", sweep)) == 0

    def table(root):
        t = pd.read_csv(root / "runs" / "report" / "small" / "results.csv")
        return t.drop(
            columns=[c for c in t if c in ("run_file", "ms/query", "index_seconds", "encode_seconds", "command")]
        )

    pd.testing.assert_frame_equal(
        table(tmp_path / "slurm").sort_values("scores_key").reset_index(drop=True),
        table(tmp_path / "local").sort_values("scores_key").reset_index(drop=True),
    )
    logs = "".join(p.read_text() for p in (tmp_path / "multirun").rglob("run.log"))  # one per Slurm job
    assert logs.count("reused mini dataset") + logs.count("building mini dataset") == 3  # three jobs ran
    assert logs.count("building BM25 index") == 1, "the jobs racing for one index built it more than once"
    assert logs.count("building embeddings") == 1
    assert len([p for p in (tmp_path / "slurm" / "indexes" / "lucene").glob("[!.]*") if p.is_dir()]) == 1


@pytest.mark.slow
def test_four_shard_jobs_on_slurm_rank_as_unsharded(tmp_path, slurm, monkeypatch):
    """shards=4 sharding.launcher=slurm: the dense encoding and the BM25 index each as one Slurm
    array of four jobs (submitit's map_array), merged here; the runs equal the unsharded
    experiment's (BM25 identical, dense the same order, scores to float tolerance)."""
    import numpy as np
    from conftest import make_cfg

    from harness.run import execute
    from harness.runs import read_trec

    for k, v in slurm.items():
        monkeypatch.setenv(k, v)
    on_slurm = ["shards=4", "sharding.launcher=slurm", "sharding.partition=local", "sharding.cpus_per_task=1"]
    on_slurm += ["sharding.timeout_min=15", "sharding.mem_gb=2"]
    for exp in ("doc_bm25", "doc_dense"):
        args = (f"+experiment={exp}", "query_fields=TA", "target_fields=TA")
        sharded = execute(make_cfg(tmp_path / "store", *args, *on_slurm))
        plain = execute(make_cfg(tmp_path / "store", *args))
        a, b = read_trec(plain["run_file"]), read_trec(sharded["run_file"])
        if exp == "doc_bm25":
            pd.testing.assert_frame_equal(a, b)
        else:
            assert (a["doc_id"].to_numpy() == b["doc_id"].to_numpy()).all()
            assert np.allclose(a["score"], b["score"], atol=1e-5)
    logs = list((tmp_path / "store" / "runs" / "logs" / "shards").rglob("*_log.out"))
    assert len({p.parent.name.split("_")[0] for p in logs}) == 2, logs  # two arrays: one per stage
    assert len(logs) == 8  # four tasks each
