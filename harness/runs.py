"""Run tables and TREC run files.

A run table is a pandas DataFrame ``(query_id, doc_id, score)``, ir-measures' column names. Ranks
are not stored: they follow from the one ordering used everywhere, trec_eval's: score descending,
ties broken by doc id *descending* (trec_eval's ``comp_sim_docno``). Writing a run in that order
with ranks 1..n makes the file, the rank column and what trec_eval/pytrec_eval evaluate agree,
also at the top-k cut-off.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .files import write_text_atomic

COLUMNS = ["query_id", "doc_id", "score"]
TAG_RE = re.compile(r"^\S{1,128}$")


class RunFormatError(ValueError):
    """A malformed TREC run file; the message names the file and line."""


def sort_run(run: pd.DataFrame) -> pd.DataFrame:
    """trec_eval's order within each query: score desc, then doc id desc."""
    return run.sort_values(
        ["query_id", "score", "doc_id"], ascending=[True, False, False], kind="mergesort"
    ).reset_index(drop=True)


def top_k(run: pd.DataFrame, k: int) -> pd.DataFrame:
    return sort_run(run).groupby("query_id", sort=False).head(k).reset_index(drop=True)


def drop_self_hits(run: pd.DataFrame, ids: set) -> tuple[pd.DataFrame, int]:
    """Remove rows where a query retrieves its own id (a query that is also in the corpus), as
    BEIR's evaluation does. Returns the run and how many rows were dropped."""
    own = (run["query_id"] == run["doc_id"]) & run["query_id"].isin(ids)
    return run[~own].reset_index(drop=True), int(own.sum())


def with_ranks(run: pd.DataFrame) -> pd.DataFrame:
    run = sort_run(run)
    run["rank"] = run.groupby("query_id", sort=False).cumcount() + 1
    return run


def format_trec(run: pd.DataFrame, tag: str) -> str:
    if not TAG_RE.match(tag):
        raise ValueError(f"run tag {tag!r} must be 1-128 characters without white space")
    r = with_ranks(run)
    scores = [repr(float(s)) if np.isfinite(s) else "0.0" for s in r["score"].to_numpy()]
    return "".join(f"{q} Q0 {d} {k} {s} {tag}\n" for q, d, k, s in zip(r["query_id"], r["doc_id"], r["rank"], scores))


def write_trec(run: pd.DataFrame, path: str | Path, tag: str) -> Path:
    """Write a valid TREC run file atomically (``qid Q0 docid rank score tag``)."""
    write_text_atomic(path, format_trec(run, tag))
    return Path(path)


def read_trec(path: str | Path) -> pd.DataFrame:
    """Read a TREC run file into a run table, with a clear error for the first malformed line.

    Files written with single spaces (the harness's and Anserini's) are parsed by pandas' C reader;
    anything it does not take cleanly is read line by line, which names the first bad line."""
    path = Path(path)
    try:
        t = pd.read_csv(
            path,
            sep=" ",
            header=None,
            dtype={0: str, 2: str, 4: float},
            engine="c",
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=True,
        )
        # tabs, double spaces, extra columns give another shape; a short line, NaN cells
        if t.shape[1] == 6 and not t.isna().any().any() and (t[[0, 2, 5]].astype(str) != "").all().all():
            return pd.DataFrame({"query_id": t[0], "doc_id": t[2], "score": t[4]}).reset_index(drop=True)
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        pass
    return _read_trec_lines(path)


def _read_trec_lines(path: Path) -> pd.DataFrame:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise RunFormatError(
                    f"{path}:{n}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}. "
                    f"Fix: rewrite the line in TREC run format."
                )
            try:
                score = float(parts[4])
            except ValueError:
                raise RunFormatError(
                    f"{path}:{n}: score {parts[4]!r} is not a number. Fix: the 5th column is the score."
                ) from None
            rows.append((parts[0], parts[2], score))
    return pd.DataFrame(rows, columns=COLUMNS)


def from_hits(hits: dict) -> pd.DataFrame:
    """Pyserini batch_search output ``{qid: [hit, ...]}`` -> run table."""
    q, d, s = [], [], []
    for qid, hs in hits.items():
        for h in hs:
            q.append(qid)
            d.append(h.docid)
            s.append(float(h.score))
    return pd.DataFrame({"query_id": q, "doc_id": d, "score": np.asarray(s, dtype=float)})
