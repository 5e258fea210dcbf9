"""gc against a run that finishes while gc works (harness/collect.py): the leases are read before the
results table, a row written between gc's survey and its deletions keeps what it names, and a run
leases the shards it sends to jobs before they commit them. Each interleaving is forced at the
point where it used to lose work (the row case 50 times over)."""

from __future__ import annotations

import json

import pytest

from harness import collect, stage
from harness.store import Store


def _artifact(root, kind: str, key: str, parents=()):
    folder = root / stage.roots()[kind] / kind / key
    folder.mkdir(parents=True)
    meta = {"kind": kind, "key": key, "parents": [{"kind": "family_run", "key": p} for p in parents]}
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "run.trec").write_text("q1 Q0 d1 1 1.0 tag\n")
    return folder


def _row(key: str, run_key: str) -> str:
    return json.dumps({"scores_key": key, "run_file": f"runs/family_run/{run_key}/run.trec"}) + "\n"


def test_the_survey_reads_the_leases_before_the_results_table(tmp_path, monkeypatch):
    calls = []
    real_leases, real_rows = collect.live_leases, collect.read_results
    monkeypatch.setattr(collect, "live_leases", lambda root: calls.append("leases") or real_leases(root))
    monkeypatch.setattr(collect, "read_results", lambda path: calls.append("results") or real_rows(path))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "results.jsonl").write_text("")
    _artifact(tmp_path, "family_run", "r0")
    collect.survey(Store(tmp_path), tmp_path / "runs" / "results.jsonl")
    assert calls.index("leases") < calls.index("results")


def test_a_run_that_finishes_between_the_survey_and_the_deletions_keeps_its_artifacts(tmp_path):
    """A run reuses two unused artifacts and writes its row after gc surveyed the root (its lease
    already released: it has exited). gc deletes only the third, unnamed one, 50 times over."""
    for i in range(50):
        root = tmp_path / f"root{i}"
        (root / "runs").mkdir(parents=True)
        results = root / "runs" / "results.jsonl"
        results.write_text("")
        run = _artifact(root, "family_run", f"run{i}")
        scores = _artifact(root, "scores", f"sc{i}", parents=[f"run{i}"])
        other = _artifact(root, "family_run", f"old{i}")
        store = Store(root)
        plan = collect.survey(store, results)
        assert {g.key for g in plan.garbage} == {f"run{i}", f"sc{i}", f"old{i}"}  # nothing named them yet
        with open(results, "a") as f:  # the finishing run's row
            f.write(_row(f"sc{i}", f"run{i}"))
        done = collect.delete(store, plan)
        assert [g.key for g in done] == [f"old{i}"]
        assert run.is_dir() and scores.is_dir() and not other.exists()


@pytest.mark.slow
def test_shards_built_by_jobs_are_leased_by_the_run_before_the_jobs_commit_them(cfg_factory, monkeypatch):
    """A shard job commits its shard, then exits; the main run leases it when it reads it. gc in
    between would take it for garbage: the main run leases every shard it sends to a job first."""
    from harness import shards
    from harness.run import execute
    from harness.store import lease

    seen = []

    def jobs(ctx, kind, todo, builder, describe):  # the jobs' work is left to ensure, in process
        held = lease(ctx.store.root)
        seen.append(all(p.key in held.keys for p, _ in todo) and len(todo) == 2)

    monkeypatch.setattr(shards, "_run_jobs", jobs)
    execute(cfg_factory("+experiment=doc_bm25", "shards=2", "sharding.launcher=local"))
    assert seen == [True]
