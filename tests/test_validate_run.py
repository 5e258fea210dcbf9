import pytest

from harness.validate_run import main, validate

GOOD = "q1 Q0 d1 1 3.0 tagA\nq1 Q0 d2 2 2.0 tagA\nq2 Q0 d1 1 1.0 tagA\n"


def write(tmp_path, text):
    p = tmp_path / "run.trec"
    p.write_text(text)
    return p


def only(problems):
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def test_valid_run(tmp_path):
    assert validate(write(tmp_path, GOOD), tag="tagA", qids={"q1", "q2"}, docids={"d1", "d2"}) == []


@pytest.mark.parametrize(
    "bad_line,line_no,pattern",
    [
        ("q1 Q0 d3 3 1.0", 3, "expected 6 columns"),  # missing column
        ("q1 Q0 d3 3 high tagA", 3, "score 'high' is not a number"),  # non-numeric score
        ("q1 Q0 d1 3 1.0 tagA", 3, "duplicate document 'd1'.*line 1"),  # duplicate document
        ("q1 Q0 d3 3 9.0 tagA", 3, "ranks disagree with scores"),  # rank vs score
        ("q1 Q0 d3 3 1.0 tagB", 3, "tag 'tagB' differs"),  # tag mismatch
        ("q1 Q0 d3 2 1.0 tagA", 3, "rank 2 .*ranks must run 1..n.*expected 3"),
        ("q1 Q0 d3 -3 1.0 tagA", 3, "rank -3 .*expected 3"),  # negative rank
        ("q1 Q0 d3 7 1.0 tagA", 3, "rank 7 .*expected 3"),  # gap in ranks
        ("q1 Q0 d3 3 inf tagA", 3, "score 'inf' is not a finite number"),
        ("q1 Q0 d3 3 nan tagA", 3, "score 'nan' is not a finite number"),
    ],
)
def test_each_problem_has_its_line_number(tmp_path, bad_line, line_no, pattern):
    lines = GOOD.splitlines()
    text = "\n".join(lines[:2] + [bad_line] + lines[2:]) + "\n"
    p = only(validate(write(tmp_path, text)))
    assert p.line == line_no
    import re

    assert re.search(pattern, p.message), p.message


def test_unknown_qid_and_docid(tmp_path):
    probs = validate(write(tmp_path, GOOD + "q9 Q0 d7 1 1.0 tagA\n"), qids={"q1", "q2"}, docids={"d1", "d2"})
    assert [(p.line, p.message.split(" (")[0]) for p in probs] == [
        (4, "unknown topic 'q9'"),
        (4, "unknown document 'd7'"),
    ]


def test_expected_tag_and_limit_per_topic(tmp_path):
    assert "expected tag" in only(validate(write(tmp_path, GOOD), tag="other")).message
    assert "more than 1 documents" in only(validate(write(tmp_path, GOOD), max_per_topic=1)).message


def test_cli_exit_codes(tmp_path, capsys):
    assert main([str(write(tmp_path, GOOD))]) == 0
    assert main([str(write(tmp_path, GOOD + "x\n"))]) == 1
    assert "line 4: expected 6 columns" in capsys.readouterr().out


def test_harness_runs_are_valid(tmp_path):
    import pandas as pd

    from harness.runs import write_trec

    run = pd.DataFrame([("q", f"d{i}", float(i % 3)) for i in range(20)], columns=["query_id", "doc_id", "score"])
    assert validate(write_trec(run, tmp_path / "h.trec", "harness")) == []


def test_missing_topics_are_reported_and_fail_with_strict(tmp_path, tiny_folder, capsys):
    import pandas as pd

    qids = pd.read_parquet(tiny_folder / "queries.parquet")["query_id"].astype(str).tolist()
    docs = pd.read_parquet(tiny_folder / "corpus.parquet")["relevant_id"].astype(str).tolist()
    run = write(tmp_path, "".join(f"{q} Q0 {docs[0]} 1 1.0 t\n" for q in qids[:2]))
    args = [str(run), "--dataset", "local", "--path", str(tiny_folder)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"warning: {len(qids) - 2} of the dataset's {len(qids)} topics are not in the run" in out
    assert main(args + ["--strict"]) == 1
    assert "error: " in capsys.readouterr().out
    full = write(tmp_path, "".join(f"{q} Q0 {docs[0]} 1 1.0 t\n" for q in qids))
    assert main([str(full), "--dataset", "local", "--path", str(tiny_folder), "--strict"]) == 0


@pytest.mark.parametrize("case", ["directory", "non_utf8", "bad_path", "no_path", "bad_dataset"])
def test_unreadable_inputs_end_in_one_line(tmp_path, capsys, case):
    run = write(tmp_path, GOOD)
    args = {
        "directory": [str(tmp_path)],
        "non_utf8": [str(tmp_path / "latin1.trec")],
        "bad_path": [str(run), "--dataset", "local", "--path", str(tmp_path / "nowhere")],
        "no_path": [str(run), "--dataset", "local"],
        "bad_dataset": [str(run), "--dataset", "local", "--path", str(tmp_path)],
    }[case]
    (tmp_path / "latin1.trec").write_bytes("q1 Q0 d\xe9 1 1.0 t\n".encode("latin-1"))
    code = main(args)
    captured = capsys.readouterr()
    assert code in (1, 2)
    text = (captured.out + captured.err).strip()
    assert "Traceback" not in text and text
    assert {
        "directory": "not a file",
        "non_utf8": "not UTF-8",
        "bad_path": "no such folder",
        "no_path": "--path",
        "bad_dataset": "file not found",
    }[case] in text, text


def test_a_byte_order_mark_is_named_once(tmp_path):
    from harness.validate_run import validate

    p = tmp_path / "bom.trec"
    p.write_bytes(b"\xef\xbb\xbf" + b"".join(f"q1 Q0 d{i} {i + 1} {10 - i} t\n".encode() for i in range(5)))
    problems = validate(p)
    assert len(problems) == 1 and "byte order mark" in str(problems[0]) and "Fix" in str(problems[0])
