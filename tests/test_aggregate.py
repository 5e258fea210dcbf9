"""Each aggregation on a hand-made passage run with answers worked out by hand."""

import pandas as pd
import pytest

from harness.aggregate import aggregate


@pytest.fixture
def passage_run():
    rows = [
        ("q1", "A#0", 9.0),
        ("q1", "A#3", 1.0),
        ("q1", "A#5", 2.0),
        ("q1", "A#7", 6.0),
        ("q1", "B#1", 8.0),
        ("q1", "C#0", 3.0),
        ("q1", "C#2", 3.0),
        ("q2", "B#0", 5.0),
        ("q2", "C#0", 5.0),
    ]
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])


def as_list(run):
    return [(q, d, round(s, 6)) for q, d, s in run.itertuples(index=False)]


def test_maxp(passage_run):
    # ties (q2: B and C both 5.0) rank as trec_eval does: doc id descending
    assert as_list(aggregate(passage_run, "maxp")) == [
        ("q1", "A", 9.0),
        ("q1", "B", 8.0),
        ("q1", "C", 3.0),
        ("q2", "C", 5.0),
        ("q2", "B", 5.0),
    ]


def test_avgp(passage_run):
    assert as_list(aggregate(passage_run, "avgp")) == [
        ("q1", "B", 8.0),
        ("q1", "A", 4.5),
        ("q1", "C", 3.0),
        ("q2", "C", 5.0),
        ("q2", "B", 5.0),
    ]


def test_sump(passage_run):
    assert as_list(aggregate(passage_run, "sump")) == [
        ("q1", "A", 18.0),
        ("q1", "B", 8.0),
        ("q1", "C", 6.0),
        ("q2", "C", 5.0),
        ("q2", "B", 5.0),
    ]


def test_avg_top3_uses_fewer_when_fewer(passage_run):
    # A: top 3 of {9, 6, 2, 1} -> 17/3; B: one passage; C: two passages
    assert as_list(aggregate(passage_run, "avg_top3")) == [
        ("q1", "B", 8.0),
        ("q1", "A", round(17 / 3, 6)),
        ("q1", "C", 3.0),
        ("q2", "C", 5.0),
        ("q2", "B", 5.0),
    ]


def test_top_k_cut_after_ordering(passage_run):
    assert as_list(aggregate(passage_run, "sump", k=1)) == [("q1", "A", 18.0), ("q2", "C", 5.0)]


def test_identity_and_unknown(passage_run):
    assert len(aggregate(passage_run, "identity")) == len(passage_run)
    with pytest.raises(ValueError, match="aggregation='minp'"):
        aggregate(passage_run, "minp")


def test_family_ids_may_contain_dashes_and_hashes_only_as_separator():
    run = pd.DataFrame([("q", "EP-123-A1#0", 1.0), ("q", "EP-123-A1#1", 2.0)], columns=["query_id", "doc_id", "score"])
    assert as_list(aggregate(run, "maxp")) == [("q", "EP-123-A1", 2.0)]
