"""The results table: one row per experiment, keyed by its scores artifact.

Rows live in ``runs/results.jsonl`` (one JSON object a line, full config included). A row for a
scores key already present replaces it, so re-running an experiment never duplicates a row. The
file is rewritten under a lock, atomically.
"""

from __future__ import annotations

import difflib
import io
import json
import logging
from functools import partial
from pathlib import Path

import jsonlines
import pandas as pd
from filelock import FileLock

from .files import write_text_atomic

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
            write_text_atomic(path, dump_rows([_on_disk(r) for r in rows]))
    except OSError as e:
        log.warning("results table %s not updated (%s): the artifact root is read-only", path, e.strerror or e)
        return False
    except ResultsError as e:
        log.warning("results table not updated: %s", e)
        return False
    return True


def drop_rows(path: str | Path, scores_keys: set[str]) -> int:
    """Remove the rows of these scores keys (gc's ``--drop-stale``); returns how many went."""
    path = Path(path)
    with FileLock(str(path) + ".lock"):
        rows = read_rows(path)
        kept = [r for r in rows if r.get("scores_key") not in scores_keys]
        write_text_atomic(path, dump_rows([_on_disk(r) for r in kept]))
    return len(rows) - len(kept)


def dump_rows(rows: list[dict]) -> str:
    """JSON Lines text of the rows (jsonlines; keys sorted, so a table diffs cleanly)."""
    out = io.StringIO()
    with jsonlines.Writer(out, dumps=partial(json.dumps, sort_keys=True, default=str)) as w:
        w.write_all(rows)
    return out.getvalue()


def read_rows(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    rows, line = [], [0]

    def lines():  # the non-empty lines, keeping the file's line number for messages
        for n, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if text.strip():
                line[0] = n
                yield text

    try:
        for row in jsonlines.Reader(lines()):
            if not isinstance(row, dict) or "scores_key" not in row:
                raise ResultsError(f"{path}:{line[0]}: not a results row (no scores_key). Fix: delete that line.")
            if row.get("run_file") and len(Path(str(row["run_file"])).parts) >= 3:
                row["run_file"] = str(run_path(path, row))
            rows.append(row)
    except jsonlines.InvalidLineError:
        raise ResultsError(
            f"{path}:{line[0]}: not a JSON row. Fix: delete that line; rerunning its experiment "
            f"adds it again from its cached artifacts."
        ) from None
    return rows


class ResultsError(ValueError):
    """The results table cannot be read; the message names the file, the line and the fix."""


RUNTIME_KEYS = (
    "search.threads",
    "index.threads",
    "encoder.batch_size",
    "encoder.device",
    "root",
    "verify",
    "store",
    "results",
    "cost",
    "name",
    "dataset.cache_dir",
    "dataset.published",
    "sharding",
)


def value(row: dict, key: str):
    """A row's value for ``key``: a results column (``dataset``, ``fusion_k``) or a dotted config
    key (``bm25.k1``, ``fusion.k``, ``dataset.path``). Missing: None."""
    if key in row and key != "config":
        return row[key]
    node = row.get("config") or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _matches(actual, wanted: str) -> bool:
    if actual is None:
        return wanted.lower() in ("null", "none", "")
    if isinstance(actual, bool):
        return wanted.lower() == str(actual).lower()
    if isinstance(actual, (int, float)):
        try:
            return float(wanted) == float(actual)
        except ValueError:
            return False
    return str(actual) == wanted


def parse_where(where) -> list[tuple[str, str]]:
    out = []
    for w in where or ():
        if "=" not in w:
            raise SystemExit(f"--where {w!r}: expected KEY=VALUE, e.g. --where bm25.k1=0.9 or --where fusion.k=60.")
        k, v = w.split("=", 1)
        out.append((k.strip(), v.strip()))
    return out


def _same_dataset(row: dict, dataset: str) -> bool:
    """``dataset`` names the row's dataset, its type, or its folder (``DIR``, ``DIR/``, relative)."""
    if dataset in (row.get("dataset"), value(row, "dataset.path"), value(row, "dataset.type")):
        return True
    path = value(row, "dataset.path")
    return bool(path) and Path(dataset).expanduser().resolve() == Path(str(path)).expanduser().resolve()


def filter_rows(rows: list[dict], dataset: str | None = None, where=(), keys=None) -> list[dict]:
    """Rows of one dataset (name, type or ``dataset.path`` in any spelling of that folder), whose
    values match every ``KEY=VALUE`` of ``where``, and (``keys``) whose scores key is among a sweep's."""
    conds = parse_where(where)
    out = []
    for r in rows:
        if dataset is not None and not _same_dataset(r, dataset):
            continue
        if keys is not None and r.get("scores_key") not in keys:
            continue
        if all(_matches(value(r, k), v) for k, v in conds):
            out.append(r)
    return out


def identity(row: dict) -> str:
    """What makes two rows the same configuration: the config without runtime settings."""
    cfg = json.loads(json.dumps(row.get("config") or {}, default=str))
    for key in RUNTIME_KEYS:
        node, *rest = key.split(".")
        if not rest:
            cfg.pop(node, None)
        elif isinstance(cfg.get(node), dict):
            cfg[node].pop(rest[0], None)
    return json.dumps([row.get("experiment"), cfg], sort_keys=True)


def newest(rows: list[dict]) -> list[dict]:
    """One row per distinct configuration, the newest (the table appends: later lines are newer)."""
    last: dict[str, dict] = {}
    for r in rows:
        last.pop(identity(r), None)
        last[identity(r)] = r
    return list(last.values())


def differing_keys(rows: list[dict]) -> list[str]:
    """Dotted config keys whose values differ among rows (to tell the user what to filter on)."""

    def flat(d, prefix=""):
        for k, v in (d or {}).items():
            if isinstance(v, dict):
                yield from flat(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", json.dumps(v, sort_keys=True, default=str)

    tables = [dict(flat(r.get("config"))) for r in rows]
    keys = sorted(set().union(*tables))
    return [
        k
        for k in keys
        if len({t.get(k) for t in tables}) > 1
        and k not in RUNTIME_KEYS
        and not any(k.startswith(x + ".") for x in RUNTIME_KEYS)
    ]


def why_none(rows: list[dict], hits: list[dict], dataset, where) -> str:
    """Which filter left no row: the dataset, a key no row has (mistyped?) or none of these rows
    has, or a value none of them takes."""

    if dataset is not None and not any(_same_dataset(r, dataset) for r in hits):
        seen = sorted({str(r.get("dataset")) for r in hits} | {str(value(r, "dataset.path")) for r in hits} - {"None"})
        return f"--dataset {dataset!r} matches none of them (they have {seen[:6]})."
    flat = set(differing_keys(rows + [{"config": {}}])) | {k for r in rows for k in r if k != "config"}
    for k, v in parse_where(where):
        if all(value(r, k) is None for r in rows):
            near = difflib.get_close_matches(k, sorted(flat), n=3)
            return f"--where {k}={v}: no row of the table has the key {k!r} (mistyped? close: {near})."
        if all(value(r, k) is None for r in hits):
            return (
                f"--where {k}={v}: these rows do not have {k!r} (it is not a setting of this experiment; --where "
                f"applies to every system named)."
            )
        if not any(_matches(value(r, k), v) for r in hits):
            return f"--where {k}={v}: they have {k} in {sorted({str(value(r, k)) for r in hits})[:6]}."
    return "the filters together exclude them all."


def find(results: str | Path, name: str, dataset: str | None = None, where=(), keys=None) -> dict:
    """The one row named ``name`` (an experiment name, a run tag folder or a scores key) among the
    rows ``dataset``, ``where`` and ``keys`` keep (:func:`filter_rows`). Rows of one configuration
    run again count once: the newest. Several configurations left: an error saying which keys
    tell them apart, e.g. ``--where bm25.k1=0.9``."""
    try:
        rows = read_rows(results)
    except ResultsError as e:
        raise SystemExit(str(e)) from None
    if not rows:
        raise SystemExit(f"{results}: no results yet. Fix: run experiments first (python -m harness.run ...).")
    hits = [
        r
        for r in rows
        if name in (r.get("experiment"), r.get("scores_key"), r.get("tag"), Path(r["run_file"]).parent.name)
    ]
    if not hits:
        raise SystemExit(
            f"{results}: no experiment named {name!r}. Fix: use an experiment name or scores key from "
            f"the table, e.g. {sorted({str(r.get('experiment')) for r in rows})[:5]}."
        )
    kept = newest(filter_rows(hits, dataset, where, keys))
    if not kept:
        filters = {"--dataset": f"dataset={dataset}"} if dataset is not None else {}
        if where:
            filters["--where"] = str(list(where))
        raise SystemExit(
            f"{results}: {len(hits)} rows are named {name!r}, none with {' and '.join(filters.values())}: "
            f"{why_none(rows, hits, dataset, where)} Fix: loosen {' / '.join(filters) or 'the filters'}, or name "
            f"a scores key: {[h['scores_key'] for h in hits][:6]}."
        )
    if len(kept) > 1:
        diff = differing_keys(kept)
        raise SystemExit(
            f"{results}: {len(kept)} configurations are named {name!r}; they differ in {diff[:8]}. Fix: "
            f"add --dataset NAME or --where KEY=VALUE (e.g. --where {diff[0] if diff else 'bm25.k1'}="
            f"{value(kept[-1], diff[0]) if diff else '0.9'}), or name a scores key: "
            f"{[h['scores_key'] for h in kept][:6]}."
        )
    return kept[0]


def run_path(results: str | Path, row: dict) -> Path:
    """A row's run file under the root the results table lives in (``<root>/runs/results.jsonl``).
    The table stores it relative to the root (``runs/<kind>/<key>/run.trec``), so a moved or copied
    root finds its own files; rows of older harnesses stored absolute paths and are read the same
    way (their last three parts). Rows in memory carry the absolute path."""
    kind, key, name = Path(row["run_file"]).parts[-3:]
    return Path(results).resolve().parent / kind / key / name


def _on_disk(row: dict) -> dict:
    if not row.get("run_file") or len(Path(str(row["run_file"])).parts) < 3:
        return row
    kind, key, name = Path(row["run_file"]).parts[-3:]
    return {**row, "run_file": f"runs/{kind}/{key}/{name}"}


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
