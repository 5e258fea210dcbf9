"""Keys see what determines an artifact: software versions, stage versions, and each part of the
dataset separately. Everything here plans (``plan=True``): keys are computed, nothing is built,
except the garbage-collection test, which builds one small experiment."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from harness import data, env
from harness.experiment import Experiment

# Passage BM25 + passage dense fused by RRF, then the IPC3 re-ranking: every kind of node.
CONFIG = ("+experiment=rrf_passage", "rerank=ipc3_disjoint")


def plan(cfg_factory, folder):
    cfg = cfg_factory("dataset=local", f"dataset.path={folder}", *CONFIG, tiny=False)
    exp = Experiment(cfg, data.load(cfg.dataset, cfg.root), plan=True)
    exp.scores()
    return [n for n in exp.nodes if n.kind != "dataset"]


def changed(before, after):
    """Node positions whose key differs (the plan's order of nodes is the same for one config)."""
    assert [n.kind for n in before] == [n.kind for n in after]
    return {i for i, (a, b) in enumerate(zip(before, after)) if a.key != b.key}


def downstream(nodes, hit) -> set[int]:
    """Positions of the nodes that are ``hit`` or have an ancestor that is: what must rebuild."""

    def reaches(n):
        return hit(n) or any(reaches(p) for p in n.parents)

    return {i for i, n in enumerate(nodes) if reaches(n)}


@pytest.fixture
def folder(tiny_folder, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(tiny_folder, out)
    return out


def _edit(path, fn):
    df = pd.read_parquet(path)
    out = fn(df)
    (df if out is None else out).to_parquet(path, index=False)


def test_every_node_has_a_stage_version(cfg_factory, folder):
    nodes = plan(cfg_factory, folder)
    assert {n.kind for n in nodes} == {
        "units",
        "lucene",
        "embeddings",
        "faiss",
        "unit_run",
        "family_run",
        "fused_run",
        "reranked_run",
        "scores",
    }
    assert all("stage" in n.env for n in nodes)


def test_a_qrels_edit_rebuilds_only_scores(cfg_factory, folder):
    before = plan(cfg_factory, folder)
    _edit(folder / "qrels_all.parquet", lambda df: df.iloc[1:])
    after = plan(cfg_factory, folder)
    assert {after[i].kind for i in changed(before, after)} == {"scores"}


def test_a_query_edit_rebuilds_runs_not_units_indexes_or_embeddings(cfg_factory, folder):
    before = plan(cfg_factory, folder)
    _edit(
        folder / "queries.parquet", lambda df: df.__setitem__("title_en", df["title_en"].where(df.index != 0, "edited"))
    )
    after = plan(cfg_factory, folder)
    got = changed(before, after)
    assert got == downstream(before, lambda n: n.kind == "unit_run")
    assert not {before[i].kind for i in got} & {"units", "lucene", "embeddings", "faiss"}


def test_a_corpus_edit_rebuilds_everything_downstream(cfg_factory, folder):
    before = plan(cfg_factory, folder)
    _edit(folder / "corpus.parquet", lambda df: df.__setitem__("abstract_en", df["abstract_en"] + " edited"))
    after = plan(cfg_factory, folder)
    assert changed(before, after) == set(range(len(before)))


def _fake(monkeypatch, **versions):
    real = env.version
    monkeypatch.setattr(env, "version", lambda dist: versions.get(dist, real(dist)))


@pytest.mark.parametrize("what", ["torch minor", "lucene", "ir_measures"])
def test_a_version_bump_rebuilds_exactly_what_it_should(cfg_factory, folder, monkeypatch, what):
    before = plan(cfg_factory, folder)
    if what == "torch minor":
        major, minor_ = env.version("torch").split(".")[:2]
        _fake(monkeypatch, torch=f"{major}.{int(minor_) + 1}.0")

        def hit(n):  # the embeddings and the dense query encoding (its unit runs)
            return n.kind == "embeddings" or (n.kind == "unit_run" and n.params["backend"] == "dense")
    elif what == "lucene":
        real = env.anserini
        monkeypatch.setattr(env, "anserini", lambda: {**real(), "lucene": "10.0.0"})

        def hit(n):
            return n.kind == "lucene" or (n.kind == "unit_run" and n.params["backend"] == "bm25")
    else:
        _fake(monkeypatch, **{"ir-measures": "99.0"})

        def hit(n):
            return n.kind == "scores"

    after = plan(cfg_factory, folder)
    got = changed(before, after)
    assert got == downstream(before, hit)
    assert got and len(got) < len(before) or what == "ir_measures"
    untouched = {before[i].kind for i in set(range(len(before))) - got}
    if what == "lucene":
        assert {"units", "embeddings", "faiss"} <= untouched
    if what == "torch minor":
        assert "lucene" in untouched


def test_a_torch_patch_release_reuses_embeddings(cfg_factory, folder, monkeypatch):
    """The declared compatibility level (harness.env): a patch release keeps every key."""
    before = plan(cfg_factory, folder)
    major, minor_ = env.version("torch").split(".")[:2]
    _fake(monkeypatch, torch=f"{major}.{minor_}.99", transformers=env.version("transformers") + ".post1")
    assert not changed(before, plan(cfg_factory, folder))


def test_a_stage_version_bump_rebuilds_that_stage_and_after(cfg_factory, folder, monkeypatch):
    from harness import aggregate

    before = plan(cfg_factory, folder)
    monkeypatch.setattr(aggregate, "VERSION", aggregate.VERSION + 1)
    after = plan(cfg_factory, folder)
    assert changed(before, after) == downstream(before, lambda n: n.kind == "family_run")


@pytest.mark.slow
def test_gc_lists_what_an_upgrade_left_behind(tmp_path):
    """After an upgrade the row's old scores stay while the row does; --drop-stale lists them with
    their sizes, --yes deletes them with the row; what current keys reach stays."""
    import os

    env_vars = {**os.environ, "HARNESS_ROOT": str(tmp_path)}
    run = [
        sys.executable,
        "-m",
        "harness.run",
        "+experiment=doc_bm25",
        "dataset.params.n_docs=80",
        "dataset.params.n_queries=8",
    ]
    assert subprocess.run(run, env=env_vars, capture_output=True).returncode == 0
    gc = [sys.executable, "-m", "harness.collect", "gc"]
    out = subprocess.run([*gc, "--dry-run"], env=env_vars, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("0 artifact(s)"), out.stdout + out.stderr
    # An "upgrade" of the scorer: the old scores are unreachable, everything else is reused.
    stale = {p.name for p in (tmp_path / "runs" / "scores").iterdir() if p.is_dir()}

    def gc_after_upgrade(*args):  # gc as it runs once ir_measures is "upgraded" to 99.0
        code = (
            "import harness.env as e, runpy, sys; "
            "e.version = lambda d, v=e.version: '99.0' if d == 'ir-measures' else v(d); "
            f"sys.argv = ['gc', 'gc', *{list(args)!r}]; runpy.run_module('harness.collect', run_name='__main__')"
        )
        return subprocess.run([sys.executable, "-c", code], env=env_vars, capture_output=True, text=True)

    out = gc_after_upgrade()
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0].startswith("0 artifact(s)") and "nothing deleted" in lines[0], (
        out.stdout + out.stderr
    )
    assert "kept 1 stale row(s)" in out.stdout  # the row still names its scores: they stay
    old = stale.pop()
    assert (tmp_path / "runs" / "scores" / old).is_dir()
    out = gc_after_upgrade("--drop-stale")
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[0].split()[:2] == ["scores", old] and "KiB" in lines[0], out.stdout
    assert (tmp_path / "runs" / "scores" / old).is_dir()  # without --yes nothing is deleted
    out = gc_after_upgrade("--drop-stale", "--yes")
    assert out.returncode == 0 and "1 artifact(s)" in out.stdout and "deleted" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "runs" / "scores" / old).exists()
    assert (tmp_path / "runs" / "results.jsonl").read_text() == ""  # the row went with its scores
    assert any((tmp_path / "runs" / "unit_run").iterdir())
