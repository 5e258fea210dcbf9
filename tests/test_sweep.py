"""Sweeps: expansion, listing counts, resume after SIGKILL, second run, launchers, report."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, killed_at
from conftest import sweep_args as args

from harness.sweep import expand, load_sweep, main

SWEEP = """
blocks:
  docs:
    +experiment: doc_bm25,doc_dense
    query_fields: TA,TAC
    target_fields: TA,FULL
  passages:
    +experiment: passage_bm25
    target_fields: FULL
    passage.length: 32,64
    aggregation: maxp,sump
  rrf:
    +experiment: rrf_doc
    target_fields: TA
    fusion.k: 10,60
"""


@pytest.fixture
def sweep_file(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text(SWEEP)
    return p


def test_expand_is_the_product_of_each_block(sweep_file):
    jobs = expand(load_sweep(str(sweep_file)), ["query_fields=T"])
    assert len(jobs) == 2 * 1 * 2 + 2 * 2 + 2  # query_fields pinned by the extra override
    assert all(j[1].count("query_fields=T") == 1 for j in jobs)


def test_expand_parses_values_as_hydra_does():
    """Lists are one value, range() and commas sweep: the same parser the Hydra launchers use."""
    from omegaconf import OmegaConf

    spec = OmegaConf.create(
        {
            "blocks": {
                "b": {
                    "+experiment": "rrf_doc",
                    "fusion.backends": "[bm25,dense]",
                    "fusion.k": "range(10,31,10)",
                    "encoder.query_prefix": "'q: a, b'",
                }
            }
        }
    )
    jobs = expand(spec)
    assert [j[1][2] for j in jobs] == ["fusion.k=10", "fusion.k=20", "fusion.k=30"]
    assert all("fusion.backends=[bm25,dense]" in j[1] and "encoder.query_prefix='q: a, b'" in j[1] for j in jobs)


@pytest.mark.slow
def test_listing_counts_distinct_indexes(tmp_path, sweep_file, capsys, monkeypatch):
    import functools

    from harness import cost

    # the listing calibrates this machine for real, on smaller synthetic points than a user's
    # first listing (the code path is the same; the sizes only set how long it takes)
    monkeypatch.setattr(cost, "POINT_FAMILIES", (4, 8))
    monkeypatch.setattr(cost, "_calibrate_runs", functools.partial(cost._calibrate_runs, queries=50, depth=200))
    assert main(args(tmp_path, sweep_file, "list=true")) == 0
    out = capsys.readouterr().out
    # distinct (view, granularity, backend): bm25 doc TA, doc FULL, p32 FULL, p64 FULL; dense doc TA, doc FULL
    assert "indexes (view x granularity x backend)         6  cached     0" in out
    assert "searches" in out and "experiments (distinct scores)                 14" in out
    assert not (tmp_path / "runs" / "unit_run").exists()  # listing builds nothing


def _scores(root):
    rows = pd.read_json(Path(root) / "runs" / "results.jsonl", lines=True)
    return rows.set_index("scores_key")[["nDCG@100/ALL", "nDCG@100/OUT", "R@100/IN"]].sort_index()


@pytest.mark.slow
@pytest.mark.long
def test_sweep_killed_then_resumed_equals_uninterrupted(tmp_path, sweep_file):
    cmd = [sys.executable, "-m", "harness.sweep", *args(tmp_path / "a", sweep_file)]
    emb = tmp_path / "a" / "indexes" / "embeddings"
    killed_at(cmd, "encoding", lambda: any(emb.glob(".*.tmp")))  # mid-encoding, after the BM25 runs
    assert not [p for p in emb.glob("*") if p.is_dir() and not p.name.startswith(".")]
    assert main(args(tmp_path / "a", sweep_file)) == 0
    assert main(args(tmp_path / "b", sweep_file)) == 0  # uninterrupted
    pd.testing.assert_frame_equal(_scores(tmp_path / "a"), _scores(tmp_path / "b"))
    report = tmp_path / "b" / "runs" / "report" / "small"
    assert {p.name for p in report.iterdir()} >= {"results.csv", "results.md", "in_vs_out.png", "passage_length.png"}
    assert len(pd.read_csv(report / "results.csv")) == 14


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher,setting",
    [("submitit_local", "hydra.launcher.cpus_per_task=1"), ("local_parallel", "hydra.launcher.n_jobs=2")],
)
def test_hydra_launchers_run_the_sweep_and_share_one_index(tmp_path, launcher, setting):
    """submitit_local (Slurm's local twin) and joblib with two parallel jobs that need one index;
    launcher settings are overridden from the sweep's command line, as Hydra users expect."""
    sweep = tmp_path / "two.yaml"
    sweep.write_text("blocks:\n  b:\n    +experiment: doc_bm25\n    query_fields: T,TA\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.sweep",
            *args(tmp_path, sweep, f"launcher={launcher}", setting, "hydra.sweep.dir=" + str(tmp_path / "multirun")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(pd.read_json(tmp_path / "runs" / "results.jsonl", lines=True)) == 2
    assert len([p for p in (tmp_path / "indexes" / "lucene").glob("[!.]*") if p.is_dir()]) == 1


def test_cost_estimate_without_the_data_scales_with_its_size(tmp_path, monkeypatch, capsys):
    """`list=true` prints predicted times per artifact kind and in total, on CPU and GPU, from the
    published size when the data is not there; twice the families, twice the encoding time."""
    import re

    from harness import cost

    point = {
        "passaging_s": 1.0,
        "streamed_s": 2.0,
        "index_file_s": 1.5,
        "search_s_per_term": 1e-3,
        "search_fixed_s": 0.1,
    }
    monkeypatch.setattr(
        cost,
        "calibrate",
        lambda root, cfg, reach=0, encoder=True, encoders=None: {
            "bm25_points": [{**point, "chars": 1e6}, {**point, "chars": 4e6}],
            "run_s_per_row": 1e-6,
            "score_s_per_query": 1e-3,
            "encode_a": 1e-4,
            "encode_b": 0.0,
            "flat_s_per_mac": 1e-10,
            "model_load_s": 1.0,
        },
    )

    def estimate(families):
        published = (
            f"++dataset.published={{families:{families},queries:10,chars:{{title:{families * 50},abstract:"
            f"{families * 500},claims:0,description:{families * 3000}}},query_chars:{{title:500,abstract:"
            f"5000,claims:0,keywords:0}}}}"
        )
        assert (
            main(
                [
                    f"sweep={sweep_path}",
                    f"root={tmp_path}",
                    "list=true",
                    "dataset=local",
                    f"dataset.path={tmp_path / 'absent'}",
                    published,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert "GPU: encoder x30, assumed" in out and re.search(r"total +CPU +[\d.]+ \w+ +GPU", out)
        value, unit = re.search(r"embeddings +CPU +([\d.]+) (s|min|h)\b", out).groups()
        return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]

    sweep_path = tmp_path / "s.yaml"
    sweep_path.write_text("blocks:\n  b:\n    +experiment: doc_dense,passage_dense\n    target_fields: FULL\n")
    small, large = estimate(1000), estimate(2000)
    assert large == pytest.approx(2 * small, rel=0.05)


def _group(pgid: int) -> set[int]:
    """Live processes of a process group (Linux /proc)."""

    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.add(int(d))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_stopped_local_parallel_sweep_leaves_no_process(tmp_path, stop):
    """A local_parallel sweep is stopped while its job's joblib workers build: SIGTERM stops the
    job and its workers; after SIGKILL of the sweep, its job notices and stops them itself."""
    import signal
    import time

    sweep = tmp_path / "many.yaml"
    sweep.write_text(
        "blocks:\n  b:\n    +experiment: doc_dense,passage_dense\n    query_fields: T,TA,TAC\n"
        "    passage.length: 32,48,64\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.sweep",
            *args(
                tmp_path,
                sweep,
                "launcher=local_parallel",
                "hydra.launcher.n_jobs=2",
                "hydra.sweep.dir=" + str(tmp_path / "multirun"),
            ),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, job, members = time.time() + 240, None, set()
    while time.time() < deadline and proc.poll() is None:
        kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == proc.pid]
        job = kids[0] if kids else None
        members = _group(job) if job else set()
        if len(members) >= 3:  # the job and its joblib workers
            break
        time.sleep(0.2)
    assert proc.poll() is None and len(members) >= 3, "no joblib workers seen while the sweep ran"
    proc.send_signal(getattr(signal, stop))
    proc.wait(60)
    deadline = time.time() + 60
    while time.time() < deadline and _group(job):
        time.sleep(0.2)
    assert not _group(job), f"processes of the stopped sweep still run: {_group(job)}"


def _parent(pid: int) -> int | None:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


@pytest.mark.slow
def test_a_report_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    """A cached sweep on a read-only root: the report's OSError becomes one line naming the fix."""
    from harness import report

    sweep_file = tmp_path / "one.yaml"  # one cached job is enough to reach the report
    sweep_file.write_text("blocks:\n  b:\n    +experiment: doc_bm25\n    target_fields: TA\n")
    assert main(args(tmp_path, sweep_file)) == 0

    def read_only(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / "runs" / "report"))

    monkeypatch.setattr(report, "write_report", read_only)
    assert main(args(tmp_path, sweep_file)) == 1
    err = capsys.readouterr().err
    assert "the report cannot be written (Permission denied" in err and "Fix: make the root writable" in err


def _compositions_agree(jobs) -> list[str]:
    from omegaconf import OmegaConf

    from harness.config import _compose_whole, compose

    bad = []
    for _, overrides in jobs:
        fast, whole = compose(overrides), _compose_whole(overrides)
        same = OmegaConf.to_container(fast) == OmegaConf.to_container(whole)
        if not same or OmegaConf.to_yaml(fast) != OmegaConf.to_yaml(whole) or OmegaConf.is_struct(fast) is not True:
            bad.append(" ".join(overrides))
    return bad


def test_a_composed_base_plus_plain_values_is_what_hydra_composes():
    """config.compose merges the group choices once and applies plain values to a copy; the
    result must be Hydra's whole composition, for sweep jobs and for values Hydra refuses."""
    jobs = expand(load_sweep("beyond2"), []) + expand(load_sweep("default"), [])[::4]
    jobs += [("x", ["+experiment=rrf_doc", "fusion.weights=[1,2]", "ltr=lambdamart", "ltr.features=[run]"])]
    assert _compositions_agree(jobs) == []
    from harness.config import ConfigError, compose

    for bad in (["+experiment=doc_bm25", "bm25.k1=abc"], ["granularity=para"], ["no_such_key=1"]):
        with pytest.raises(ConfigError):
            compose(bad)


@pytest.mark.slow
@pytest.mark.long
def test_the_jobs_of_every_sweep_file_compose_as_hydra_does():
    """Every sweep file, every distinct set of group choices and a tenth of the other jobs (the
    whole composition costs 80 ms a job: the paper grid alone would take half a minute)."""
    for path in sorted((ROOT / "conf" / "sweep").glob("*.yaml")):
        jobs = expand(load_sweep(path.stem), [])
        first: dict = {}
        for job in jobs:
            first.setdefault(tuple(o for o in job[1] if o.split("=", 1)[0].lstrip("+") in GROUPS), job)
        sample = list(first.values()) + jobs[::10]
        assert _compositions_agree(sample) == [], path.name


GROUPS = {p.name for p in (ROOT / "conf").iterdir() if p.is_dir()}


def _in_a_terminal(cmd: list[str], env: dict, cwd: Path, cols: int = 120, timeout: float = 600) -> str:
    """Run ``cmd`` with a pseudo-terminal of ``cols`` columns as its stdout and stderr (progress
    bars draw as they do for a person) and return everything it wrote."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    proc = subprocess.Popen(cmd, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    os.close(slave)
    chunks, t0 = [], time.monotonic()
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
        assert time.monotonic() - t0 < timeout, "the sweep did not finish"
    proc.wait()
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.long
def test_a_sweep_in_a_terminal_shows_the_plan_one_bar_and_a_summary(tmp_path):
    """What a person sees: the plan, the log's path, one progress bar redrawn in place, warnings
    at most once each, and the best rows at the end; every artifact's INFO line is in the log file,
    none on the console. ``-v`` brings them back."""
    sweep = tmp_path / "two.yaml"
    sweep.write_text(
        "blocks:\n  b:\n    +experiment: doc_bm25,passage_bm25\n    target_fields: TA,FULL\n    passage.length: 64\n"
        "  d:\n    +experiment: doc_dense\n    target_fields: TA\n"
    )
    env = {**os.environ, "HARNESS_ROOT": str(tmp_path)}
    cmd = [sys.executable, "-m", "harness.sweep", *args(tmp_path, sweep)]
    out = _in_a_terminal(cmd, env, tmp_path)
    lines = [x for x in out.replace("\r\n", "\n").split("\n") if x.strip()]
    screens = [x.split("\r")[-1] for x in lines]  # what stays on screen once the bar is redrawn
    assert len(lines) < 60, out
    assert not any("[INFO]" in x or "INFO " in x for x in lines), out
    assert any("%|" in x for x in out.split("\r")), "no progress bar was drawn"
    assert screens[0].startswith("sweep two: 5 jobs") and "to build" in out
    assert "Loading weights" not in out and "encode units" not in out  # no library's or stage's bar
    i = next(n for n, x in enumerate(screens) if x.startswith("  best by nDCG@100 (ALL), of 5 experiments"))
    assert "nDCG@100/OUT" in screens[i + 1] and "ms/query" in screens[i + 1]
    assert any(x.startswith("sweep two: 5 experiments in") for x in screens[i:])
    log = next((tmp_path / "runs" / "logs").glob("two-*.log")).read_text()
    assert log.count("[harness.store][INFO] - built ") >= 10 and "- building " in log
    assert f"log: {tmp_path / 'runs' / 'logs'}" in out
    verbose = _in_a_terminal([*cmd, "-v"], env, tmp_path)
    assert "reused" in verbose and "INFO" in verbose  # all cached now: each reuse is said


def test_a_warning_reaches_the_console_once(tmp_path, capsys):
    """The same warning from every experiment (other numbers) is shown once and counted after."""
    import logging

    from harness import console

    screen = console.open_console(tmp_path / "x.log")
    try:
        log = logging.getLogger("harness.test")
        for n in range(5):
            log.warning("encode units: %d texts exceed the length", n)
        log.warning("another warning")
        log.info("an info line")
    finally:
        screen.close()
    err = capsys.readouterr().err
    assert err.count("exceed the length") == 1 and err.count("another warning") == 1 and "info line" not in err
    assert screen.once.repeats == 4
    text = (tmp_path / "x.log").read_text()
    assert text.count("exceed the length") == 5 and "an info line" in text


def test_a_console_level_it_does_not_know_is_one_line(capsys):
    assert main(["log=bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "sweep default: log=bogus: expected one of ['debug', 'error', 'info', 'warning']"
