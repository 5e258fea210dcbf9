"""DAPFAM-format data: the hub dataset and the same three parquet files in a local folder.

``queries.parquet``  query_id, title_en, abstract_en, claims_text, abstract_keywords, IPC3 list
``corpus.parquet``   relevant_id, title_en, abstract_en, claims_text, description_en, IPC3 list
``qrels_all.parquet`` query_id, relevant_id, relevance_score, domain_rel (IN / OUT / NC)

Queries and qrels are small and read whole. The corpus is about 3 GB of text on DAPFAM: only its
ids and IPC3 codes are read up front; text is streamed in record batches, only the columns a view
needs, through :meth:`ParquetCorpus.iter_batches`.
"""
from __future__ import annotations

import logging
import re
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
        batches = pf.iter_batches(batch_size=batch_size, columns=cols, use_threads=False)
        while True:
            try:
                frame = next(batches).to_pandas()
            except StopIteration:
                return
            except (UnicodeDecodeError, ValueError) as e:  # invalid UTF-8 in a string column
                raise DataError(f"{self.path}: cannot read columns {cols}: {str(e).splitlines()[0]}. Fix: re-encode "
                                f"the text as UTF-8 and write the file again.") from e
            yield frame


TEXT_COLUMNS = (S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION, S.KEYWORDS)


def check_columns(path: Path, required: list[str]) -> None:
    """Raise a :class:`DataError` naming the file and every missing column, or a text column
    stored as bytes (whose text would otherwise be rendered as ``b'...'``)."""
    if not path.exists():
        raise DataError(f"{path}: file not found. Fix: point dataset.path at a folder holding "
                        f"{', '.join(DEFAULT_FILES.values())} (the hub's DAPFAM layout).")
    if not path.is_file():
        raise DataError(f"{path}: not a file. Fix: point dataset.path at a folder holding "
                        f"{', '.join(DEFAULT_FILES.values())}.")
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # not parquet, truncated, ...
        raise DataError(f"{path}: not a readable parquet file ({e}). Fix: re-export it as parquet.") from e
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {schema.names}. Fix: rename or add them "
            f"(DAPFAM's column names are required; see README 'Data')."
        )
    import pyarrow as pa

    for col in TEXT_COLUMNS:
        if col in required and (pa.types.is_binary(schema.field(col).type) or pa.types.is_large_binary(schema.field(col).type)):
            raise DataError(f"{path}: column {col!r} holds bytes, not text. Fix: decode it and store it as UTF-8 "
                            f"strings (pandas: df[{col!r}].str.decode('utf-8')).")


def read_parquet(path: Path, columns: list[str]) -> pd.DataFrame:
    """Read columns of a parquet file; undecodable text becomes a DataError naming file and fix."""
    try:
        return pd.read_parquet(path, columns=columns)
    except (UnicodeDecodeError, ValueError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(f"{path}: cannot read columns {columns}: {str(e).splitlines()[0]}. Fix: re-encode the text "
                        f"as UTF-8 and write the file again.") from e


def fingerprint_file(path: Path, cache: Path | None = None) -> str:
    """SHA-256 of the whole file (see :mod:`harness.data.digest`): any edit makes other artifacts."""
    from .digest import file_digest

    return file_digest(path, cache)


_QUOTED = re.compile(r"""['"]([^'"]*)['"]""")
_SEPARATORS = re.compile(r"[\s,;|]+")


def parse_codes(value) -> tuple[tuple[str, ...], bool]:
    """A cell of the IPC3 column as a sorted tuple of codes, and whether it was a string.

    Lists (parquet list columns arrive as numpy arrays) are taken as they are. Strings are parsed,
    never split into characters: a Python or numpy list repr (``"['G06', 'H04']"``,
    ``"['G06' 'H04']"``) by its quoted items, anything else (``"G06 H04"``, ``"G06;H04"``) by
    white space, commas, semicolons or bars.
    """
    if value is None or (isinstance(value, float) and value != value):
        return (), False
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        quoted = _QUOTED.findall(value)
        items = quoted if quoted else _SEPARATORS.split(value.strip().strip("[](){}"))
        return tuple(sorted({i.strip() for i in items if i.strip()})), True
    if isinstance(value, (int, float)):
        return (str(value),), False
    return tuple(sorted({str(v).strip() for v in value if v is not None and str(v).strip()})), False


def codes_column(series: pd.Series, path: Path) -> pd.Series:
    """Parse a whole IPC3 column, warning once (with an example) when it holds strings."""
    parsed = series.map(parse_codes)
    strings = parsed.map(lambda p: p[1])
    if strings.any():
        i = int(strings.to_numpy().nonzero()[0][0])
        log.warning("%s: column %r holds strings, not lists (%d rows, e.g. %r parsed as %s). Fix: store a list of "
                    "codes per row.", path, series.name, int(strings.sum()), series.iloc[i], list(parsed.iloc[i][0]))
    return parsed.map(lambda p: p[0])


def read_local(path: str | Path, files: dict | None = None, unknown_ids: str = "keep",
               digest_cache: Path | None = None) -> dict:
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

    queries = read_parquet(qpath, S.QUERY_COLUMNS)
    docs = read_parquet(cpath, [S.DOC_ID, S.IPC3])
    qrels_cols = [S.QUERY_ID, S.DOC_ID, S.RELEVANCE]
    if S.DOMAIN in pq.read_schema(rpath).names:
        qrels_cols.append(S.DOMAIN)
    qrels = read_parquet(rpath, qrels_cols)
    if S.DOMAIN not in qrels:
        qrels[S.DOMAIN] = None
    from .digest import files_digest

    return validate(queries, docs, qrels, qpath=qpath, cpath=cpath, rpath=rpath, unknown_ids=unknown_ids) | {
        "corpus": ParquetCorpus(cpath),
        "fingerprint": files_digest((qpath, cpath, rpath), digest_cache),
        "files": {"queries": str(qpath), "corpus": str(cpath), "qrels": str(rpath)},
    }


def _dupes(ids: pd.Series) -> list:
    d = ids[ids.duplicated()]
    return sorted(d.unique().tolist())


UNKNOWN_IDS = ("keep", "drop", "error")
DOMAIN_LABELS = ("IN", "OUT", "NC")
_BAD_ID = re.compile(r"^$|\s")


def _check_ids(ids: pd.Series, path: Path, col: str) -> None:
    """TREC files are white-space separated: an id with a space (or an empty id) would shift columns."""
    bad = ids[ids.str.contains(_BAD_ID)]
    if len(bad):
        raise DataError(f"{path}: column {col!r} has {len(bad)} id(s) that are empty or contain white space, e.g. "
                        f"{bad.iloc[0]!r}; TREC run and qrels files cannot hold them. Fix: replace white space in ids "
                        f"(e.g. with '_').")


def _domain_labels(labels: pd.Series, path: Path, col: str) -> pd.Series:
    """IN / OUT / NC in any case; empty means unlabelled; anything else is an error."""
    norm = labels.map(lambda v: None if v is None or (isinstance(v, float) and v != v) or not str(v).strip()
                      else str(v).strip().upper())
    bad = sorted({v for v in norm.dropna().unique() if v not in DOMAIN_LABELS})
    if bad:
        raise DataError(f"{path}: column {col!r} holds label(s) {bad[:10]}; expected IN, OUT or NC (any case) or empty. "
                        f"Fix: map them to IN / OUT / NC, or drop the column to derive IN/OUT from IPC3 codes.")
    return norm


def validate(queries: pd.DataFrame, docs: pd.DataFrame, qrels: pd.DataFrame, *, qpath, cpath, rpath,
             unknown_ids: str = "keep", names: dict | None = None) -> dict:
    """Check ids, emptiness and referential integrity; normalise types. Errors name the file and the
    column as the source format calls it (``names`` maps DAPFAM's names to the source's)."""
    n = {S.QUERY_ID: S.QUERY_ID, S.DOC_ID: S.DOC_ID, S.RELEVANCE: S.RELEVANCE, S.DOMAIN: S.DOMAIN,
         "qrels_query_id": S.QUERY_ID, "qrels_doc_id": S.DOC_ID, **(names or {})}
    if unknown_ids not in UNKNOWN_IDS:
        raise DataError(f"dataset.unknown_ids={unknown_ids!r}: expected one of {list(UNKNOWN_IDS)}.")
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        if frame[col].isna().any():
            raise DataError(f"{p}: column {n[col]!r} has {int(frame[col].isna().sum())} missing id(s). Fix: give every row an id.")
        frame[col] = frame[col].astype(str)
        _check_ids(frame[col], p, n[col])
    if len(docs) == 0:
        raise DataError(f"{cpath}: the corpus is empty (no rows). Fix: point dataset.path at a folder with documents.")
    if len(queries) == 0:
        raise DataError(f"{qpath}: no queries (no rows). Fix: point dataset.path at a folder with queries.")
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        dup = _dupes(frame[col])
        if dup:
            raise DataError(f"{p}: column {n[col]!r} has {len(dup)} duplicate id(s), e.g. {dup[:5]}. Fix: keep one row per id.")
    bad = docs[S.DOC_ID][docs[S.DOC_ID].str.contains(S.PASSAGE_SEP, regex=False)]
    if len(bad):
        raise DataError(f"{cpath}: column {n[S.DOC_ID]!r} has ids containing {S.PASSAGE_SEP!r} (e.g. {bad.iloc[0]!r}), "
                        f"which the harness uses for passage ids. Fix: rename those ids.")
    for col in (S.TITLE, S.ABSTRACT, S.CLAIMS, S.KEYWORDS):
        queries[col] = queries[col].fillna("").astype(str)
    queries[S.IPC3] = codes_column(queries[S.IPC3], qpath)
    docs[S.IPC3] = codes_column(docs[S.IPC3], cpath)

    qrels = qrels.copy()
    for col, key in ((S.QUERY_ID, "qrels_query_id"), (S.DOC_ID, "qrels_doc_id")):
        if qrels[col].isna().any():
            raise DataError(f"{rpath}: column {n[key]!r} has {int(qrels[col].isna().sum())} missing id(s). Fix: give every judgment an id.")
        qrels[col] = qrels[col].astype(str)
        _check_ids(qrels[col], rpath, n[key])
    rel = pd.to_numeric(qrels[S.RELEVANCE], errors="coerce")
    bad = rel.isna() | rel.abs().eq(float("inf"))
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise DataError(f"{rpath}: column {n[S.RELEVANCE]!r} has non-numeric or infinite values (first at row {row}: "
                        f"{qrels[S.RELEVANCE].iloc[row]!r}). Fix: use numeric grades (0 = not relevant).")
    # Grades are kept as they are (graded nDCG); > 0 is relevant for recall and for ALL/IN/OUT.
    qrels[S.RELEVANCE] = rel.astype(int) if (rel == rel.round()).all() else rel.astype(float)
    if not (qrels[S.RELEVANCE] > 0).any():
        raise DataError(f"{rpath}: no positive judgment ({len(qrels)} rows, none with {n[S.RELEVANCE]} > 0), so no "
                        f"score can be computed. Fix: point dataset.path at qrels holding relevant pairs.")
    qrels[S.DOMAIN] = _domain_labels(qrels[S.DOMAIN], rpath, n[S.DOMAIN])
    unknown_q = sorted(set(qrels[S.QUERY_ID]) - set(queries[S.QUERY_ID]))
    if unknown_q:
        raise DataError(f"{rpath}: column {n['qrels_query_id']!r} names {len(unknown_q)} query id(s) not in {qpath.name}, "
                        f"e.g. {unknown_q[:5]}. Fix: drop those qrels rows or add the queries.")
    dup = qrels.duplicated([S.QUERY_ID, S.DOC_ID])
    if dup.any():
        ex = qrels[dup].iloc[0]
        raise DataError(f"{rpath}: {int(dup.sum())} duplicate ({n['qrels_query_id']}, {n['qrels_doc_id']}) pair(s), e.g. "
                        f"({ex[S.QUERY_ID]}, {ex[S.DOC_ID]}). Fix: keep one judgment per pair.")
    qrels = _unknown_documents(qrels, set(docs[S.DOC_ID]), unknown_ids, rpath, cpath, n["qrels_doc_id"])
    return {"queries": queries.reset_index(drop=True), "doc_ipc3": dict(zip(docs[S.DOC_ID], docs[S.IPC3])),
            "qrels": qrels.reset_index(drop=True)}


def _unknown_documents(qrels, doc_ids: set, policy: str, rpath, cpath, col: str) -> pd.DataFrame:
    """Judged documents missing from the corpus. trec_eval and Anserini count them as relevant but
    unretrievable (Anserini's CACM regression depends on it): ``keep`` does the same, ``drop``
    removes those judgments, ``error`` refuses them."""
    unknown = ~qrels[S.DOC_ID].isin(doc_ids)
    pos = unknown & (qrels[S.RELEVANCE] > 0)
    if not unknown.any():
        return qrels
    examples = sorted(qrels.loc[unknown, S.DOC_ID].unique().tolist())[:5]
    what = (f"{rpath}: column {col!r} names {qrels.loc[unknown, S.DOC_ID].nunique()} document id(s) not in "
            f"{cpath.name} ({int(pos.sum())} positive judgment(s)), e.g. {examples}")
    if policy == "error":
        raise DataError(f"{what}. Fix: drop those qrels rows or add the documents, or set dataset.unknown_ids=keep "
                        f"(count them as relevant but unretrievable, as trec_eval does) or drop.")
    if policy == "drop":
        log.warning("%s: dropped (dataset.unknown_ids=drop)", what)
        return qrels[~unknown]
    log.warning("%s: kept as relevant but unretrievable, as trec_eval does (dataset.unknown_ids=keep; drop or error "
                "to change)", what)
    return qrels


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
