import pandas as pd
import pytest

from harness.runs import RunFormatError, format_trec, read_trec, sort_run, write_trec


def test_trec_roundtrip_and_ranks(tmp_path):
    run = pd.DataFrame(
        [("q1", "d1", 1.5), ("q1", "d2", 2.5), ("q2", "d3", 0.1)], columns=["query_id", "doc_id", "score"]
    )
    p = write_trec(run, tmp_path / "x.trec", "tagA")
    lines = p.read_text().splitlines()
    assert lines[0].split() == ["q1", "Q0", "d2", "1", "2.5", "tagA"]
    assert lines[1].split()[:4] == ["q1", "Q0", "d1", "2"]
    back = read_trec(p)
    pd.testing.assert_frame_equal(sort_run(back), sort_run(run))
    assert not list(tmp_path.glob("*.tmp"))


def test_tie_order_is_trec_evals():
    """pytrec_eval (trec_eval) ranks tied scores by doc id descending; our files say the same."""
    import pytrec_eval

    run = {"q": {"a": 1.0, "b": 1.0}}
    for rel_doc, expected_p1 in (("b", 1.0), ("a", 0.0)):
        ev = pytrec_eval.RelevanceEvaluator({"q": {rel_doc: 1}}, {"P_1"})
        assert ev.evaluate(run)["q"]["P_1"] == expected_p1
    ordered = sort_run(pd.DataFrame([("q", "a", 1.0), ("q", "b", 1.0)], columns=["query_id", "doc_id", "score"]))
    assert ordered.doc_id.tolist() == ["b", "a"]


@pytest.mark.parametrize("line,msg", [("q Q0 d 1 x tag", "not a number"), ("q Q0 d 1 1.0", "expected 6 columns")])
def test_malformed_run_lines(tmp_path, line, msg):
    p = tmp_path / "bad.trec"
    p.write_text("q Q0 ok 1 2.0 tag\n" + line + "\n")
    with pytest.raises(RunFormatError, match=rf"bad.trec:2: .*{msg}"):
        read_trec(p)


def test_bad_tag():
    run = pd.DataFrame([("q", "d", 1.0)], columns=["query_id", "doc_id", "score"])
    with pytest.raises(ValueError, match="tag"):
        format_trec(run, "has space")
