"""The harness from Python (notebooks): the same configs, checks and artifacts as the command line.

    from harness import api

    row = api.run("passage_bm25")                                  # pandas Series: the results row
    row = api.run("doc_bm25", "dataset=local", "dataset.path=../shared/data/cacm-xdom", "bm25.k1=0.9")
    df = api.sweep("default")                                      # the sweep's results table
    api.run_table(row)      # the row's ranking: query_id, doc_id, score (ir_measures' column names)
    api.per_query(row)      # query_id, subset, measure, value
    api.qrels(row, "OUT")   # query_id, doc_id, relevance (the subset's judgments as scored)

Overrides are Hydra's, composed with Hydra's compose API on the same ``conf/`` and schema as
``python -m harness.run``: a mistyped key fails the same way, and everything ``run`` builds is the
artifact the CLI would build (a notebook and a shell share their cache under ``HARNESS_ROOT``).
Nothing here computes a score itself; it is a thin layer over :mod:`harness.run`,
:mod:`harness.sweep` and the artifacts they write.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from . import data
from . import sweep as _sweep
from .config import check
from .report import results_frame
from .results import read_rows, run_path, scores_dir
from .run import execute
from .runs import read_trec
from .store import default_root
from .sweep import compose as _compose


def compose(experiment: str | None = None, *overrides: str):
    """The composed, checked config of ``+experiment=NAME`` with Hydra overrides (an ``omegaconf``
    DictConfig), as the command line would compose it."""

    cfg = _compose(([f"+experiment={experiment}"] if experiment else []) + list(overrides))
    check(cfg)
    return cfg


def run(experiment: str | None = None, *overrides: str) -> pd.Series:
    """Run (or reuse) one experiment, add its row to the results table, and return the row: the
    scores (``nDCG@100/ALL`` ... ``R@100/OUT``), timings, ``run_file``, ``scores_key`` and, under
    ``config``, the full resolved config. Its name is the experiment's."""

    row = execute(compose(experiment, *overrides))
    return pd.Series(row, name=row.get("experiment"))


def sweep(name: str = "default", *overrides: str) -> pd.DataFrame:
    """Run (or reuse) a sweep (``conf/sweep/NAME.yaml``, overrides as after ``python -m
    harness.sweep``), write its report, and return its results table, best primary measure first:
    the frame ``runs/report/NAME/results.csv`` holds, with a ``command`` column reproducing each row."""

    code = _sweep.main([f"sweep={name}", *overrides])
    if code != 0:
        raise RuntimeError(f"sweep {name}: exit status {code} (the messages above say why)")
    root = Path(compose(None, *[o for o in overrides if "=" in o and not o.startswith(("sweep=", "launcher="))]).root)
    df = pd.read_csv(root.resolve() / "runs" / "report" / Path(name).stem / "results.csv")
    return _located(df, root.resolve() / "runs" / "results.jsonl")


def _located(df: pd.DataFrame, results_file: Path) -> pd.DataFrame:
    """A report frame whose rows know their results table: ``run_table``, ``per_query``,
    ``dataset`` and ``qrels`` then find their files under that root, not under ``$HARNESS_ROOT``."""
    return df.assign(results_file=str(Path(results_file).resolve()))


def _row(row) -> dict:
    return dict(row) if not isinstance(row, dict) else row


def _results(row: dict) -> Path:
    """The results table the row belongs to (``<root>/runs/results.jsonl``): its files are found
    relative to it, as the command line finds them. Rows of :func:`sweep` and :func:`results` name
    it (``results_file``); rows of :func:`run` carry their config's root."""

    if isinstance(row.get("results_file"), str):
        return Path(row["results_file"])
    root = (row.get("config") or {}).get("root")
    return Path(root or default_root()).resolve() / "runs" / "results.jsonl"


def _config(row: dict) -> dict:
    """The row's full config: its own, or its record's in the results table it came from (report
    frames leave the config out)."""
    if isinstance(row.get("config"), dict):
        return row["config"]

    where = _results(row)
    for rec in read_rows(where):
        if rec.get("scores_key") == row.get("scores_key"):
            return rec["config"]
    raise LookupError(
        f"no row with scores_key {row.get('scores_key')!r} in {where}. Fix: pass a row of api.run(), "
        f"api.sweep() or api.results(root) of the root it was run under."
    )


def run_table(row) -> pd.DataFrame:
    """The row's ranking as the TREC run file holds it: ``query_id, doc_id, score``."""

    r = _row(row)
    return read_trec(run_path(_results(r), r))


def per_query(row) -> pd.DataFrame:
    """The row's scores per query: ``query_id, subset, measure, value`` (what ``harness.compare``
    tests are computed from)."""

    r = _row(row)
    return pd.read_csv(scores_dir(_results(r), r) / "per_query.csv", dtype={"query_id": str})


def dataset(row):
    """The :class:`harness.data.Dataset` the row was scored on."""

    r = _row(row)
    return data.load(OmegaConf.create(_config(r)["dataset"]), _results(r).parent.parent)


def qrels(row, subset: str = "ALL") -> pd.DataFrame:
    """One subset's judgments as scored (``query_id, doc_id, relevance``; zero rows are judged
    non-relevant documents): ALL, IN or OUT."""
    return dataset(row).judgments(subset)


def results(root: str | Path | None = None) -> pd.DataFrame:
    """Every row of the results table under ``root`` (default ``$HARNESS_ROOT``), as the report
    shows them."""

    where = Path(root or default_root()) / "runs" / "results.jsonl"
    return _located(results_frame(read_rows(where)), where)
