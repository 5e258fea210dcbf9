"""Patent query reduction (harness.query_reduction): term scores worked by hand, the reduced
query's text, and parity with the full query when every term is kept."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness import query_reduction as qr
from harness.config import ConfigError
from harness.run import execute
from harness.runs import read_trec

TA = ("query_fields=TA", "target_fields=TA")
# A collection of N=4 documents and 100 terms; the query's analysed terms and their frequencies.
TF = {"neural": 1, "network": 3, "model": 2, "absent": 1}
DF = {"neural": 1, "network": 2, "model": 4}
CF = {"neural": 1, "network": 6, "model": 20}


def test_tfidf_by_hand():
    s = qr.term_scores(TF, DF, CF, n_docs=4, total_terms=100, method="tfidf")
    # idf = ln(1 + (N - df + 0.5) / (df + 0.5)): neural ln(1 + 3.5/1.5) = 1.20397;
    # network ln(1 + 2.5/2.5) = 0.69315, times tf 3 = 2.07944; model ln(1 + 0.5/4.5) = 0.10536, x2
    assert s == pytest.approx({"neural": 1.20397, "network": 2.07944, "model": 0.21072}, abs=1e-5)
    assert qr.select(s, 2) == ["network", "neural"]  # "absent" (df 0) can match nothing: never kept


def test_kl_by_hand():
    s = qr.term_scores(TF, DF, CF, n_docs=4, total_terms=100, method="kl")
    # p(t|q) = tf/7; p(t|C) = cf/100. neural: (1/7) ln((1/7)/0.01) = 0.37990;
    # network: (3/7) ln((3/7)/0.06) = 0.84262; model: (2/7) ln((2/7)/0.2) = 0.10190
    assert s == pytest.approx({"neural": 0.37990, "network": 0.84262, "model": 0.10190}, abs=1e-5)
    assert qr.select(s, 3) == ["network", "neural", "model"]


def test_ties_go_to_the_term_that_sorts_first():
    assert qr.select({"b": 1.0, "a": 1.0, "c": 2.0}, 2) == ["c", "a"]


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="expected one of"):
        qr.term_scores(TF, DF, CF, 4, 100, "bo1")


def test_rewrite_keeps_each_terms_frequency_in_the_querys_own_words():
    words = ["Networks", "of", "neural", "network", "models", "state-of-the-art"]
    analyzed = {
        "Networks": ["network"],
        "of": [],
        "neural": ["neural"],
        "network": ["network"],
        "models": ["model"],
        "state-of-the-art": ["state", "art"],
        "network_": [],
        "art": ["art"],
        "state": ["state"],
    }
    text, lost = qr.rewrite(words, analyzed, ["network", "art"], {"network": 2, "art": 1})
    assert text == "Networks Networks art" and lost == 0  # "art" analyses to itself: written as is
    text, lost = qr.rewrite(words, {**analyzed, "art": ["art"], "state": ["stat"]}, ["state"], {"state": 1})
    assert text == "" and lost == 1  # a stem that is not a fixed point, seen only inside another word


def test_bad_n_terms_and_dense_only_are_refused(cfg_factory):
    with pytest.raises(ConfigError, match=r"query_reduction.n_terms=0"):
        execute(cfg_factory("+experiment=doc_bm25", "query_reduction=tfidf", "query_reduction.n_terms=0"))
    with pytest.raises(ConfigError, match=r"query_reduction=tfidf: a bm25 lever.*Fix"):
        execute(cfg_factory("+experiment=doc_dense", "query_reduction=tfidf"))


@pytest.mark.slow
def test_reduction_keeping_every_term_is_the_full_query_and_fewer_terms_change_the_run(cfg_factory, caplog):
    """Against a real index: keeping every term (n_terms above any query's length) reproduces the
    unreduced run score for score (each term's frequency survives the rewrite); 5 terms do not."""
    import logging

    caplog.set_level(logging.INFO, logger="harness.backends.bm25")
    full = execute(cfg_factory("+experiment=doc_bm25", *TA))
    every = execute(cfg_factory("+experiment=doc_bm25", *TA, "query_reduction=kl", "query_reduction.n_terms=100000"))
    few = execute(cfg_factory("+experiment=doc_bm25", *TA, "query_reduction=tfidf", "query_reduction.n_terms=5"))
    a, b = read_trec(full["run_file"]), read_trec(every["run_file"])
    pd.testing.assert_frame_equal(a[["query_id", "doc_id"]], b[["query_id", "doc_id"]])
    assert all(math.isclose(x, y, rel_tol=1e-6) for x, y in zip(a["score"], b["score"]))
    assert every["run_file"] != full["run_file"] and every["query_reduction"] == "kl(100000)"
    assert not read_trec(few["run_file"]).equals(a) and "-tfidf5." in few["tag"]
    assert "'terms_not_written': 0" in caplog.text
    assert "mean_terms_after': 5.0" in caplog.text
