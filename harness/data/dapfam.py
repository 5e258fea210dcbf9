"""DAPFAM-format data: the hub dataset and the same three parquet files in a local folder.

``queries.parquet``  query_id, title_en, abstract_en, claims_text, abstract_keywords, IPC3 list
``corpus.parquet``   relevant_id, title_en, abstract_en, claims_text, description_en, IPC3 list
``qrels_all.parquet`` query_id, relevant_id, relevance_score, domain_rel (IN / OUT / NC)

Queries and qrels are small and read whole. The corpus is about 3 GB of text on DAPFAM: only its
ids and IPC3 codes are read up front; text is streamed in record batches, only the columns a view
needs, through :meth:`ParquetCorpus.iter_batches`.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow.parquet as pq

from . import schema as S
from .schema import DataError

log = logging.getLogger(__name__)

DEFAULT_FILES = {"queries": "queries.parquet", "corpus": "corpus.parquet", "qrels": "qrels_all.parquet"}


@dataclass
class ParquetCorpus:
    """The corpus file, streamed: never more than one record batch of text in memory."""

    path: Path

    def iter_batches(self, columns: list[str], batch_size: int = 2048) -> Iterator[pd.DataFrame]:
        # pre_buffer=False: pyarrow's default pre-buffering held ~2 GB while streaming a 3.5 GB
        # DAPFAM-sized corpus; without it the peak is ~0.4 GB and reading is faster (bench/dapfam_scale.py).
        pf = pq.ParquetFile(self.path, pre_buffer=False)
        cols = [S.DOC_ID] + [c for c in columns if c != S.DOC_ID]
        for batch in pf.iter_batches(batch_size=batch_size, columns=cols, use_threads=False):
            yield batch.to_pandas()


def check_columns(path: Path, required: list[str]) -> None:
    """Raise a :class:`DataError` naming the file and every missing column."""
    if not path.exists():
        raise DataError(f"{path}: file not found. Fix: point dataset.path at a folder holding "
                        f"{', '.join(DEFAULT_FILES.values())} (the hub's DAPFAM layout).")
    try:
        names = pq.read_schema(path).names
    except Exception as e:  # not parquet, truncated, ...
        raise DataError(f"{path}: not a readable parquet file ({e}). Fix: re-export it as parquet.") from e
    missing = [c for c in required if c not in names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {names}. Fix: rename or add them "
            f"(DAPFAM's column names are required; see README 'Data formats')."
        )


def fingerprint_file(path: Path, edge: int = 4 << 20) -> str:
    """Cheap content fingerprint: size + first and last 4 MiB (parquet keeps its statistics in the
    footer, so any rewrite changes it). Path-independent, so a moved folder keeps its artifacts."""
    h = hashlib.sha256()
    size = path.stat().st_size
    h.update(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(edge))
        if size > edge:
            f.seek(max(edge, size - edge))
            h.update(f.read(edge))
    return h.hexdigest()[:16]


def _as_codes(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # tolerate "A61;B65" strings in hand-made files
        return tuple(sorted({v.strip() for v in value.replace(",", ";").split(";") if v.strip()}))
    try:
        return tuple(sorted({str(v) for v in value if v is not None and str(v)}))
    except TypeError:
        return ()


def read_local(path: str | Path, files: dict | None = None) -> dict:
    """Read and validate a DAPFAM-format folder. Returns the parts a :class:`Dataset` is made of."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DataError(f"{root}: no such folder. Fix: set dataset.path to a folder with "
                        f"{', '.join(DEFAULT_FILES.values())}.")
    files = {**DEFAULT_FILES, **(files or {})}
    qpath, cpath, rpath = (root / files[k] for k in ("queries", "corpus", "qrels"))
    check_columns(qpath, S.QUERY_COLUMNS)
    check_columns(cpath, S.CORPUS_COLUMNS)
    check_columns(rpath, [S.QUERY_ID, S.DOC_ID, S.RELEVANCE])

    queries = pd.read_parquet(qpath, columns=S.QUERY_COLUMNS)
    docs = pd.read_parquet(cpath, columns=[S.DOC_ID, S.IPC3])
    qrels_cols = [S.QUERY_ID, S.DOC_ID, S.RELEVANCE]
    if S.DOMAIN in pq.read_schema(rpath).names:
        qrels_cols.append(S.DOMAIN)
    qrels = pd.read_parquet(rpath, columns=qrels_cols)
    if S.DOMAIN not in qrels:
        qrels[S.DOMAIN] = None
    return validate(queries, docs, qrels, qpath=qpath, cpath=cpath, rpath=rpath) | {
        "corpus": ParquetCorpus(cpath),
        "fingerprint": hashlib.sha256("".join(fingerprint_file(p) for p in (qpath, cpath, rpath)).encode()).hexdigest()[:16],
        "files": {"queries": str(qpath), "corpus": str(cpath), "qrels": str(rpath)},
    }


def _dupes(ids: pd.Series) -> list:
    d = ids[ids.duplicated()]
    return sorted(d.unique().tolist())


def validate(queries: pd.DataFrame, docs: pd.DataFrame, qrels: pd.DataFrame, *, qpath, cpath, rpath) -> dict:
    """Check ids, emptiness and referential integrity; normalise types. Errors name file and column."""
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        if frame[col].isna().any():
            raise DataError(f"{p}: column {col!r} has {int(frame[col].isna().sum())} missing id(s). Fix: give every row an id.")
        frame[col] = frame[col].astype(str)
    if len(docs) == 0:
        raise DataError(f"{cpath}: the corpus is empty (no rows). Fix: point dataset.path at a folder with documents.")
    if len(queries) == 0:
        raise DataError(f"{qpath}: no queries (no rows). Fix: point dataset.path at a folder with queries.")
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        dup = _dupes(frame[col])
        if dup:
            raise DataError(f"{p}: column {col!r} has {len(dup)} duplicate id(s), e.g. {dup[:5]}. Fix: keep one row per id.")
    bad = docs[S.DOC_ID][docs[S.DOC_ID].str.contains(S.PASSAGE_SEP, regex=False)]
    if len(bad):
        raise DataError(f"{cpath}: column {S.DOC_ID!r} has ids containing {S.PASSAGE_SEP!r} (e.g. {bad.iloc[0]!r}), "
                        f"which the harness uses for passage ids. Fix: rename those ids.")
    for col in (S.TITLE, S.ABSTRACT, S.CLAIMS, S.KEYWORDS):
        queries[col] = queries[col].fillna("").astype(str)
    queries[S.IPC3] = queries[S.IPC3].map(_as_codes)
    docs[S.IPC3] = docs[S.IPC3].map(_as_codes)

    qrels = qrels.copy()
    qrels[S.QUERY_ID] = qrels[S.QUERY_ID].astype(str)
    qrels[S.DOC_ID] = qrels[S.DOC_ID].astype(str)
    rel = pd.to_numeric(qrels[S.RELEVANCE], errors="coerce")
    if rel.isna().any():
        row = int(rel.isna().to_numpy().nonzero()[0][0])
        raise DataError(f"{rpath}: column {S.RELEVANCE!r} has non-numeric values (first at row {row}: "
                        f"{qrels[S.RELEVANCE].iloc[row]!r}). Fix: use integer grades (0 = not relevant).")
    qrels[S.RELEVANCE] = rel.astype(int)
    unknown_q = sorted(set(qrels[S.QUERY_ID]) - set(queries[S.QUERY_ID]))
    if unknown_q:
        raise DataError(f"{rpath}: column {S.QUERY_ID!r} names {len(unknown_q)} query id(s) not in {qpath.name}, "
                        f"e.g. {unknown_q[:5]}. Fix: drop those qrels rows or add the queries.")
    unknown_d = sorted(set(qrels[S.DOC_ID]) - set(docs[S.DOC_ID]))
    if unknown_d:
        raise DataError(f"{rpath}: column {S.DOC_ID!r} names {len(unknown_d)} document id(s) not in {cpath.name}, "
                        f"e.g. {unknown_d[:5]}. Fix: drop those qrels rows or add the documents.")
    dup = qrels.duplicated([S.QUERY_ID, S.DOC_ID])
    if dup.any():
        ex = qrels[dup].iloc[0]
        raise DataError(f"{rpath}: {int(dup.sum())} duplicate ({S.QUERY_ID}, {S.DOC_ID}) pair(s), e.g. "
                        f"({ex[S.QUERY_ID]}, {ex[S.DOC_ID]}). Fix: keep one judgment per pair.")
    return {"queries": queries.reset_index(drop=True), "doc_ipc3": dict(zip(docs[S.DOC_ID], docs[S.IPC3])),
            "qrels": qrels.reset_index(drop=True)}


def download_hub(repo_id: str, revision: str, files: dict, cache_dir: str | None = None) -> tuple[Path, str]:
    """Fetch the three files from the Hugging Face hub (cached by huggingface_hub) and return the
    snapshot folder and the resolved commit. Needs network access to the hub."""
    from huggingface_hub import HfApi, hf_hub_download

    try:
        commit = HfApi().dataset_info(repo_id, revision=revision).sha or revision
    except Exception:  # offline but cached: hf_hub_download below still works from the cache
        commit = revision
    paths = {}
    for key, name in files.items():
        try:
            paths[key] = Path(hf_hub_download(repo_id, name, repo_type="dataset", revision=commit, cache_dir=cache_dir))
        except Exception as e:
            raise DataError(
                f"hub dataset {repo_id}@{revision}: cannot fetch {name} ({type(e).__name__}: {e}). Fix: check network "
                f"access to the hub, or download the files once and use dataset=local dataset.path=DIR."
            ) from e
    # Names may hold sub-folders ("data/corpus.parquet"): the snapshot root is above them.
    roots = {p.parents[len(Path(files[k]).parts) - 1] for k, p in paths.items()}
    return roots.pop(), commit
