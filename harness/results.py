"""The results table: one row per experiment, keyed by its scores artifact.

Rows live in ``runs/results.jsonl`` (one JSON object a line, full config included). A row for a
scores key already present replaces it, so re-running an experiment never duplicates a row. The
file is rewritten under a lock, atomically.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
from filelock import FileLock

from .store import write_text_atomic

log = logging.getLogger(__name__)


def add_row(path: str | Path, row: dict) -> bool:
    """Add (or replace) a row. On a read-only root the scores are still printed, the table is not
    updated: returns False and says so in a warning."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            rows = read_rows(path)
            rows = [r for r in rows if r.get("scores_key") != row["scores_key"]] + [row]
            write_text_atomic(path, "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows))
    except OSError as e:
        log.warning("results table %s not updated (%s): the artifact root is read-only", path, e.strerror or e)
        return False
    except ResultsError as e:
        log.warning("results table not updated: %s", e)
        return False
    return True


def read_rows(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}:{n}: not a JSON row ({e.msg}). Fix: delete that line; rerunning its experiment "
                               f"adds it again from its cached artifacts.") from None
        if not isinstance(row, dict) or "scores_key" not in row:
            raise ResultsError(f"{path}:{n}: not a results row (no scores_key). Fix: delete that line.")
        rows.append(row)
    return rows


class ResultsError(ValueError):
    """The results table cannot be read; the message names the file, the line and the fix."""


def find(results: str | Path, name: str) -> dict:
    """The one row named ``name``: an experiment name, a run tag folder or a scores key."""
    try:
        rows = read_rows(results)
    except ResultsError as e:
        raise SystemExit(str(e)) from None
    if not rows:
        raise SystemExit(f"{results}: no results yet. Fix: run experiments first (python -m harness.run ...).")
    hits = [r for r in rows if name in (r.get("experiment"), r.get("scores_key"), Path(r["run_file"]).parent.name)]
    if not hits:
        raise SystemExit(f"{results}: no experiment named {name!r}. Fix: use an experiment name or scores key from "
                         f"the table, e.g. {sorted({str(r.get('experiment')) for r in rows})[:5]}.")
    if len(hits) > 1:
        raise SystemExit(f"{results}: {len(hits)} experiments are named {name!r}; use a scores key instead: "
                         f"{[h['scores_key'] for h in hits]}.")
    return hits[0]


def scores_dir(results: str | Path, row: dict) -> Path:
    """The scores artifact of a row (``<root>/runs/scores/<key>``; the table lives in ``<root>/runs/``)."""
    return Path(results).resolve().parent / "scores" / row["scores_key"]


def table(rows: list[dict], drop_config: bool = True) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    return df.drop(columns=["config"], errors="ignore") if drop_config else df


def format_scores(row: dict, metrics=("nDCG@100", "R@100")) -> str:
    """The ALL / IN / OUT table printed after an experiment."""
    lines = [f"{'':10s}" + "".join(f"{s:>9s}" for s in ("ALL", "IN", "OUT"))]
    for m in metrics:
        vals = [row.get(f"{m}/{s}") for s in ("ALL", "IN", "OUT")]
        lines.append(f"{m:10s}" + "".join(f"{v:9.4f}" if v is not None else f"{'-':>9s}" for v in vals))
    lines.append(f"{'queries':10s}" + "".join(f"{row.get('queries_' + s) or 0:9d}" for s in ("ALL", "IN", "OUT")))
    return "\n".join(lines)
