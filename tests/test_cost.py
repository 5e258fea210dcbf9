"""The cost estimate's arithmetic (harness.cost): interpolation between calibration points, the
build path a BM25 index takes, and the calibrated range it prints. Pure functions, no timing."""

import math

import pytest

from harness import cost
from harness.store import Artifact


def _points():
    # seconds grow with size; the two points calibrated near the target (4e6, 4e7) carry the curve beyond
    return [
        {
            "chars": 1e6,
            "streamed_s": 1.0,
            "index_file_s": 0.5,
            "passaging_s": 0.2,
            "search_s_per_term": 1e-4,
            "search_fixed_s": 0.0,
        },
        {
            "chars": 4e6,
            "streamed_s": 2.5,
            "index_file_s": 1.0,
            "passaging_s": 0.5,
            "search_s_per_term": 0.9e-4,
            "search_fixed_s": 0.0,
            "near_target": True,
        },
        {
            "chars": 1e7,
            "streamed_s": 5.0,
            "index_file_s": 2.0,
            "passaging_s": 1.0,
            "search_s_per_term": 2e-4,
            "search_fixed_s": 0.0,
        },
        {
            "chars": 4e7,
            "streamed_s": 17.0,
            "index_file_s": 8.0,
            "passaging_s": 4.0,
            "search_s_per_term": 5e-4,
            "search_fixed_s": 0.0,
            "near_target": True,
        },
    ]


def test_interpolates_inside_and_extrapolates_along_the_near_target_points():
    p = _points()
    assert cost.at(p, "streamed_s", 7e6) == pytest.approx(3.75)  # halfway between 4e6 and 1e7
    # past the last point: build stages along the line through the near-target points ...
    assert cost.at(p, "streamed_s", 8e7) == pytest.approx(17.0 + (14.5 / 3.6e7) * 4e7)
    # ... search per term along the power law through them (it grows more slowly than the index)
    assert cost.at(p, "search_s_per_term", 8e7) == pytest.approx(5e-4 * 2 ** (math.log(5 / 0.9) / math.log(10)))
    without = [dict(q, near_target=False) for q in p]  # no near-target points: the last two
    assert cost.at(without, "streamed_s", 8e7) == pytest.approx(17.0 + (12.0 / 3e7) * 4e7)
    assert cost.at(without, "search_s_per_term", 8e7) == pytest.approx(5e-4 * 2 ** (math.log(2.5) / math.log(4)))


def _nodes():
    units = Artifact(
        "units", {"view": "FULL", "granularity": "passage", "tokenizer": "words", "length": 512, "stride": 512}, ()
    )
    plain = Artifact("lucene", {"analyzer": "default"}, (units,))
    prf = Artifact("lucene", {"analyzer": "default", "docvectors": True}, (units,))
    return units, plain, prf


def test_an_index_over_missing_units_is_streamed_and_a_second_one_reads_the_file():
    units, plain, prf = _nodes()
    c = {"bm25_points": _points()}
    size = {"chars": {"title": 0, "abstract": 0, "claims": 0, "description": 1e7}, "queries": 0, "families": 10}
    e = cost.estimate([units, plain, prf], {units.key, plain.key, prf.key}, size, c, None)
    # units: passaging; first index: streamed minus passaging; second: IndexCollection over the file
    assert e["units"] == pytest.approx(1.0) and e["lucene"] == pytest.approx((5.0 - 1.0) + 2.0)
    cached = cost.estimate([units, plain], {plain.key}, size, c, None)
    assert cached["lucene"] == pytest.approx(2.0) and "units" not in cached


def test_the_listing_names_each_lines_calibrated_range():
    units, plain, _ = _nodes()
    c = {"bm25_points": _points()}
    size = {"chars": {"title": 0, "abstract": 0, "claims": 0, "description": 2e8}, "queries": 0, "families": 10}
    reach = {}
    cost.estimate([units, plain], {units.key, plain.key}, size, c, None, reach=reach)
    lines = "\n".join(cost.calibration_ranges(c, reach))
    assert "calibrated on 1.0 MB-40 MB" in lines and "reaches 200 MB: extrapolated 5.0x past it" in lines
    assert cost.bm25_reach([units, plain], {plain.key}, size) == 2e8


def test_each_encoder_and_dtype_is_priced_by_its_own_timing():
    """An ensemble (or a grid over encoders) builds embeddings with two encoders: each is priced
    by its own calibration, and the listing prints one line per encoder x dtype."""
    units = Artifact("units", {"view": "TA", "granularity": "document", "tokenizer": "encoder"}, ())

    def emb(model, dtype):
        params = {"model": model, "revision": None, "pooling": "mean", "normalize": True, "max_length": 256}
        return Artifact("embeddings", {**params, "dtype": dtype}, (units,))

    fast, slow = emb("package:small", "bfloat16"), emb("parts:big", "float32")
    timing = {"model_load_s": 1.0, "encode_b": 0.0, "flat_s_per_mac": 0.0}
    c = {
        "bm25_points": _points(),
        "chars_per_token": 4.0,
        **timing,
        "encode_a": 1e-3,
        "encoders": {
            "package:small|256|bfloat16": {**timing, "encode_a": 1e-3},
            "parts:big|256|float32": {**timing, "encode_a": 5e-3},
        },
    }
    size = {"chars": {"title": 1000 * 40, "abstract": 1000 * 360}, "queries": 0, "families": 1000}  # 100 tokens each
    by = {}
    e = cost.estimate([fast, slow], {fast.key, slow.key}, size, c, None, by_encoder=by)
    # 1,000 documents of 100 tokens (+2 special) at a seconds per token, plus the model's load
    assert by["package:small|256|bfloat16"] == pytest.approx(1000 * 102 * 1e-3 + 1.0)
    assert by["parts:big|256|float32"] == pytest.approx(1000 * 102 * 5e-3 + 1.0)
    assert e["embeddings"] == pytest.approx(sum(by.values()))
    lines = cost.report([fast, slow], {fast.key, slow.key}, size, c, None, 2.0)
    assert "big float32 (256 tokens)" in lines and "small bfloat16 (256 tokens)" in lines
