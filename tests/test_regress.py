"""Regression files (harness/regress.py): OK / OK* / FAIL per value, exit statuses, what cannot
run, and the report's view of checked rows and published values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness import regress

ROOT = Path(__file__).resolve().parents[1]


def test_status_is_ok_equal_at_four_decimals_ok_star_within_tolerance_else_fail():
    assert regress.status(0.4321, 0.43214, 0.001) == "OK"
    assert regress.status(0.4321, 0.4326, 0.001) == "OK*"
    assert regress.status(0.4321, 0.4340, 0.001) == "FAIL"
    assert regress.status(0.4321, None, 0.001) == "FAIL"
    assert regress.status(200, 200, 0) == "OK" and regress.status(200, 199, 0) == "FAIL"


def _lines(out: str, status: str) -> list[str]:
    """The value lines (indented, one per expected value) whose status is ``status``."""
    return [x for x in out.splitlines() if re.match(rf"  \S.*\s{re.escape(status)}( \(.*\))?$", x)]


@pytest.mark.slow
@pytest.mark.long
def test_mini_regression_passes_and_an_edited_copy_fails(tmp_path, monkeypatch, capsys):
    """`python -m harness.regress mini` on a fresh root: every value OK; the same file with one
    expected value moved past its tolerance, run by its path: FAIL with both numbers, exit 1;
    moved within it: OK*, exit 0. The checked rows are in the results table and the record."""
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "store"))
    assert regress.main(["mini"]) == 0
    out = capsys.readouterr().out
    spec = yaml.safe_load((regress.FOLDER / "mini.yaml").read_text())
    owed = sum(
        len(v) if isinstance(v, dict) else 1
        for c in spec["conditions"].values()
        for v in (c.get("counts") or {}).values()
    ) + sum(len(s) for c in spec["conditions"].values() for s in (c.get("scores") or {}).values())
    assert owed >= 4 * 7 and len(_lines(out, "OK")) == owed and not _lines(out, "FAIL"), out
    rows = [json.loads(x) for x in (tmp_path / "store/runs/results.jsonl").read_text().splitlines()]
    record = json.loads((tmp_path / "store/runs/regressions/mini.json").read_text())["rows"]
    assert set(record) == {r["scores_key"] for r in rows} and len(record) == len(spec["conditions"])
    for r in rows:  # what regress compared is the row's own number
        for v in record[r["scores_key"]]["values"]:
            if "@" in v["value"]:
                assert v["got"] == r[v["value"]]

    cond, c = next(iter(spec["conditions"].items()))
    expected = c["scores"]["nDCG@100"]["ALL"]
    c["scores"]["nDCG@100"]["ALL"] = round(expected + 0.01, 4)
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert regress.main([str(edited)]) == 1
    out = capsys.readouterr().out
    fail = _lines(out, "FAIL")
    assert len(fail) == 1 and cond in fail[0] and "nDCG@100/ALL" in fail[0], out
    assert f"expected {expected + 0.01:.4f}, got {expected:.4f}" in fail[0]

    c["scores"]["nDCG@100"]["ALL"] = round(expected + 0.0006, 4)
    edited.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert regress.main([str(edited)]) == 0
    out = capsys.readouterr().out
    assert len(_lines(out, "OK*")) == 1 and not _lines(out, "FAIL")


def test_a_regression_whose_data_cannot_be_loaded_runs_nothing_and_says_why(tmp_path, monkeypatch, capsys):
    """dapfam-paper where the hub cannot be reached and nothing is cached: exit 2, naming the
    regression, the dataset and the reason; nothing is built."""
    root = tmp_path / "store"
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    assert regress.main(["dapfam-paper", "dataset.local_files_only=true"]) == 2
    out = capsys.readouterr().out
    assert "regression dapfam-paper" in out and "cannot run" in out and "datalyes/DAPFAM_patent" in out, out
    assert not (root / "indexes").exists() or not any((root / "indexes").iterdir())
    assert not (root / "runs" / "results.jsonl").exists()


def test_bad_regression_files_and_names_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("conditions:\n  a:\n    command: +experiment=doc_bm25\n    scores:\n      nDCG@100: {ALL: 0.1}\n")
    assert regress.main([str(bad)]) == 2
    assert "conditions.a.scores.nDCG@100: no tolerance for nDCG@100" in capsys.readouterr().err
    assert regress.main(["no-such-regression"]) == 2
    err = capsys.readouterr().err
    assert "no-such-regression" in err and "mini" in err
    bad.write_text("tolerance: {nDCG@100: 0.01}\nconditions:\n  a:\n    command: +experiment=doc_bm25 bm25.kk1=2\n")
    assert regress.main([str(bad)]) == 2
    assert "cannot run" in capsys.readouterr().out
    bad.write_text(
        "tolerance: {AP@10: 0.01}\nconditions:\n  a:\n    command: +experiment=doc_bm25\n"
        "    scores:\n      AP@10: {ALL: 0.1}\n"
    )
    assert regress.main([str(bad)]) == 2
    assert "conditions.a expects ['AP@10'], which its experiment does not measure" in capsys.readouterr().out


def test_the_report_shows_checked_rows_and_published_points(tmp_path, monkeypatch):
    """A row a regression checked carries its expected value and status in the report's frame;
    a published regression on the sweep's dataset puts its points on the IN-vs-OUT plot, marked
    as published and not run; one on another dataset does not."""
    root = tmp_path / "store"
    (root / "runs" / "regressions").mkdir(parents=True)
    values = [{"value": "nDCG@100/ALL", "expected": 0.5, "got": 0.5004, "tolerance": 0.001, "status": "OK*"}]
    rec = {"rows": {"k1": {"regression": "mini", "condition": "bm25-doc", "published": None, "values": values}}}
    (root / "runs" / "regressions" / "mini.json").write_text(json.dumps(rec))
    df = pd.DataFrame({"scores_key": ["k1", "k2"], "nDCG@100/ALL": [0.5004, 0.3]})
    got = regress.annotate(df, root, "nDCG@100")
    assert got["regression"].iloc[0] == "mini/bm25-doc: OK*" and pd.isna(got["regression"].iloc[1])
    assert got["expected nDCG@100/ALL"].tolist()[0] == 0.5 and pd.isna(got["expected nDCG@100/ALL"].tolist()[1])
    assert "regression" not in regress.annotate(df.assign(scores_key=["x", "y"]), root, "nDCG@100")

    folder = tmp_path / "regressions"
    folder.mkdir()
    (folder / "paper.yaml").write_text(
        "published: A paper, Table 1\ndataset: [dataset=mini]\ntolerance: {nDCG@100: 0.01}\n"
        "conditions:\n  sys-a:\n    command: +experiment=doc_bm25\n"
        "    scores:\n      nDCG@100: {ALL: 0.3, IN: 0.32, OUT: 0.06}\n"
    )
    monkeypatch.setattr(regress, "FOLDER", folder)
    pts = regress.published_points({"mini"}, "nDCG@100")
    assert pts == [{"name": "sys-a", "reference": "A paper, Table 1", "IN": 0.32, "OUT": 0.06}]
    assert regress.published_points({"local"}, "nDCG@100") == []

    from harness.report_page import in_out_figure

    frame = pd.DataFrame(
        {"nDCG@100/IN": [0.4], "nDCG@100/OUT": [0.1], "tag": ["t"], "backend": ["bm25"], "fusion": [None]}
    )
    html = in_out_figure(frame, "nDCG@100", pts)
    assert "published, not run" in html and "sys-a (A paper, Table 1)" in html
    assert "published, not run" not in in_out_figure(frame, "nDCG@100")


CODED = ROOT.parent / "shared" / "data" / "cacm-xdom-coded"


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.skipif(not CODED.exists(), reason="../shared/data/cacm-xdom-coded is not here")
def test_the_dtype_regression_says_ok_for_minilm_on_cacm_xdom_coded(tmp_path, monkeypatch, capsys):
    """regressions/cacm-xdom-coded-dtypes.yaml's MiniLM bfloat16 condition on the real folder, held
    to float32's values (the file's own: the float32 row is cacm-xdom-coded.yaml's, which `make
    bench` checks), every value OK or OK*. The mpnet and int8 conditions run in `make bench`: each
    mpnet encoding of the folder is minutes of CPU. 100 deep: at document level the top 100 is the
    same as 1,000 deep (tests/test_compare.py)."""
    spec = yaml.safe_load((regress.FOLDER / "cacm-xdom-coded-dtypes.yaml").read_text())
    assert spec["conditions"]["minilm-bfloat16"]["scores"] == spec["conditions"]["minilm-float32"]["scores"]
    spec["conditions"] = {k: v for k, v in spec["conditions"].items() if k == "minilm-bfloat16"}
    spec["dataset"] = ["dataset=local", f"dataset.path={CODED}", "search.depth=100"]
    copy = tmp_path / "dtypes.yaml"
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "store"))
    assert regress.main([str(copy)]) == 0
    out = capsys.readouterr().out
    assert not _lines(out, "FAIL") and len(_lines(out, "OK")) + len(_lines(out, "OK*")) == 5 + 3, out


GOOD = {
    "description": "d",
    "dataset": ["dataset=mini"],
    "tolerance": {"nDCG@100": 0.001},
    "conditions": {
        "a": {
            "command": "+experiment=doc_bm25",
            "counts": {"units": 200, "queries": {"ALL": 40}},
            "scores": {"nDCG@100": {"ALL": 0.8135, "IN": None}},
        }
    },
}


def _with(path, **changes):
    import copy

    spec = copy.deepcopy(GOOD)
    for dotted, value in changes.items():
        *head, last = dotted.split("/")
        node = spec
        for k in head:
            node = node[k]
        node[last] = value
    return spec


# Each row: a change to a good file, and what the one-line error must say. The examples
# first (a tolerance of true, an expected 1.5, a string / list / bare integer where a number or a
# mapping belongs), then our own.
BAD = [
    ({"tolerance/nDCG@100": True}, r"tolerance.nDCG@100: True is not a finite number >= 0"),
    ({"conditions/a/scores/nDCG@100/ALL": 1.5}, r"scores.nDCG@100.ALL: 1.5 is not a number in \[0, 1\]"),
    ({"conditions/a/scores/nDCG@100/ALL": "0.81"}, r"scores.nDCG@100.ALL: '0.81' is not a number"),
    ({"conditions/a/scores/nDCG@100": [0.8, 0.9, 0.1]}, r"scores.nDCG@100: expected a mapping of ALL / IN / OUT"),
    ({"conditions/a/scores": 3}, r"conditions.a.scores: expected a mapping"),
    ({"tolerance": 0.01}, r"tolerance: expected a mapping of measure -> number"),
    ({"tolerance/nDCG@100": -0.001}, r"tolerance.nDCG@100: -0.001 is not a finite number >= 0"),
    ({"tolerance/nDCG@100": float("inf")}, r"tolerance.nDCG@100: inf is not a finite number"),
    ({"tolerance/nDCG@100": "0.01"}, r"tolerance.nDCG@100: '0.01' is not a finite number"),
    ({"tolerance/nDCG@100": 5}, r"tolerance.nDCG@100: 5 accepts every value .* nothing could FAIL"),
    ({"conditions/a/scores/nDCG@100/ALL": -0.2}, r"-0.2 is not a number in \[0, 1\]"),
    ({"conditions/a/scores/nDCG@100/ALL": True}, r"True is not a number"),
    ({"conditions/a/counts/units": 12.5}, r"counts.units: 12.5 is not a whole number"),
    ({"conditions/a/counts/queries": {"ALL": -1}}, r"counts.queries.ALL: -1 is not a whole number"),
    ({"conditions/a/counts/queries": {"SOME": 3}}, r"counts.queries.SOME: 3 is not a whole number"),
    ({"conditions/a/counts": [1, 2]}, r"counts: expected a mapping"),
    ({"conditions/a/score": {}}, r"conditions.a: unknown key 'score'"),
    ({"tolerances": {}}, r"unknown key 'tolerances'"),
    ({"dataset": {"dataset": "mini"}}, r"dataset: expected a list of overrides"),
    ({"published": 2025}, r"published: expected a string"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_regression_file_is_refused_before_anything_runs(tmp_path, capsys, change, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with(path, **change), sort_keys=False))
    with pytest.raises(regress.RegressionError, match=message) as e:
        regress.load(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    assert regress.main([str(path)]) == 2  # the command line: exit 2, one line, no run
    err = capsys.readouterr()
    assert "Traceback" not in err.err and not (tmp_path / "runs").exists()


def test_a_good_file_loads_and_a_null_value_is_allowed(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD, sort_keys=False))
    reg = regress.load(path)
    assert [c.name for c in reg.conditions] == ["a"] and reg.tolerance == {"nDCG@100": 0.001}


@pytest.mark.parametrize(
    "text,key",
    [
        (
            "tolerance: {nDCG@100: 0.01}\nconditions:\n  a: {command: +experiment=doc_bm25}\n"
            "  a: {command: +experiment=doc_dense}\n",
            "a",
        ),
        ("tolerance: {nDCG@100: 0.01}\ntolerance: {nDCG@100: 0.5}\nconditions:\n  a: {command: x}\n", "tolerance"),
        (
            "tolerance: {nDCG@100: 0.01}\nconditions:\n  a:\n    command: x\n    scores:\n"
            "      nDCG@100: {ALL: 0.1, ALL: 0.2}\n",
            "ALL",
        ),
    ],
    ids=["two conditions of one name", "tolerance twice", "a subset twice"],
)
def test_a_key_given_twice_is_refused_naming_its_line(tmp_path, text, key):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(regress.RegressionError, match=rf"{path}: line \d+: duplicate key '{key}'\. Fix"):
        regress.load(path)


def test_every_shipped_regression_file_is_valid():
    for name in regress.names():
        assert regress.load(regress.resolve(name)).conditions, name


def _stand_in(tmp_path, name: str) -> Path:
    """A regression file of regressions/ with its conditions as they are, its data the tiny
    synthetic set and its encoder MiniLM at 64 word pieces (DAPFAM and arctic need the hub)."""
    from conftest import tiny_overrides

    spec = yaml.safe_load((regress.FOLDER / f"{name}.yaml").read_text())
    keep = [o for o in spec["dataset"] if o.split("=")[0] in ("bm25", "query_fields", "target_fields")]
    spec["dataset"] = ["dataset=mini", *tiny_overrides(), *keep, "encoder=minilm", "encoder.max_length=64"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_paper_file_has_every_published_value_and_its_best_row():
    spec = yaml.safe_load((regress.FOLDER / "dapfam-paper.yaml").read_text())
    values = {n: c["scores"]["nDCG@100"] for n, c in spec["conditions"].items()}
    assert all(v is not None for subsets in values.values() for v in subsets.values())
    assert values["rrf-passage-30"] == {"ALL": 0.3475, "IN": 0.3913, "OUT": 0.0625}  # the paper's best
    assert spec["published"] and regress.load(regress.resolve("dapfam-paper")).published


@pytest.mark.slow
@pytest.mark.long
def test_the_paper_file_compares_on_a_stand_in_with_its_condition_names(tmp_path, monkeypatch, capsys):
    """dapfam-paper.yaml's four conditions, run as written on the tiny set: each value is compared
    with the published one and worded as such (a stand-in does not reproduce the paper: FAIL)."""
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "store"))
    assert regress.main([str(_stand_in(tmp_path, "dapfam-paper"))]) == 1
    out = capsys.readouterr().out
    for name in ("bm25-passage", "dense-passage", "rrf-passage-30", "rrf-doc-60"):
        lines = [x for x in out.splitlines() if x.startswith(f"  {name} ")]
        assert len(lines) == 3 and all(re.search(r"\s(OK|OK\*|FAIL)( \(.*)?$", x) for x in lines), out
    assert "published 0.3475, got" in out and "not reproduced with this file's settings" in out


@pytest.mark.slow
def test_the_stand_in_systems_are_not_measured_never_ok(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "store"))
    path = _stand_in(tmp_path, "dapfam-standins")
    spec = yaml.safe_load(path.read_text())
    spec["conditions"] = {k: v for k, v in spec["conditions"].items() if k == "minilm-doc"}  # one is enough here
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert regress.main([str(path)]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("  minilm-doc ")]
    assert len(lines) == 3 and all(x.endswith("not measured") for x in lines), out
    assert "3 not measured" in out and not any(re.search(r"\sOK\*?( |$)", x) for x in lines)
