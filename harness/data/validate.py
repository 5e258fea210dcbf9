"""Validation of a dataset's three tables, whatever format they came from (DAPFAM parquet, BEIR).

Ids must be present, unique and free of white space (TREC files are white-space separated);
grades numeric and finite, with at least one positive; ``domain_rel`` IN / OUT / NC in any case;
IPC3 codes lists (strings are parsed, with a warning); judged documents missing from the corpus
handled as ``dataset.unknown_ids`` says. Errors name the file and the column as the source format
calls it, and the fix.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd

from ..ipc import parse_codes
from . import schema as S
from .schema import DataError

log = logging.getLogger(__name__)


def codes_column(series: pd.Series, path: Path, name: str | None = None) -> pd.Series:
    """Parse a whole IPC3 column, warning once (with an example) when it holds strings."""
    parsed = series.map(parse_codes)
    strings = parsed.map(lambda p: p[1])
    if strings.any():
        i = int(strings.to_numpy().nonzero()[0][0])
        log.warning(
            "%s: column %r holds strings, not lists (%d rows, e.g. %r parsed as %s). Fix: store a list of "
            "codes per row.",
            path,
            name or series.name,
            int(strings.sum()),
            series.iloc[i],
            list(parsed.iloc[i][0]),
        )
    return parsed.map(lambda p: p[0])


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
        raise DataError(
            f"{path}: column {col!r} has {len(bad)} id(s) that are empty or contain white space, e.g. "
            f"{bad.iloc[0]!r}; TREC run and qrels files cannot hold them. Fix: replace white space in ids "
            f"(e.g. with '_')."
        )


def _domain_labels(labels: pd.Series, path: Path, col: str) -> pd.Series:
    """IN / OUT / NC in any case; empty means unlabelled; anything else is an error."""
    norm = labels.map(
        lambda v: (
            None if v is None or (isinstance(v, float) and v != v) or not str(v).strip() else str(v).strip().upper()
        )
    )
    bad = sorted({v for v in norm.dropna().unique() if v not in DOMAIN_LABELS})
    if bad:
        raise DataError(
            f"{path}: column {col!r} holds label(s) {bad[:10]}; expected IN, OUT or NC (any case) or empty. "
            f"Fix: map them to IN / OUT / NC, or drop the column to derive IN/OUT from IPC3 codes."
        )
    return norm


def validate(
    queries: pd.DataFrame,
    docs: pd.DataFrame,
    qrels: pd.DataFrame,
    *,
    qpath,
    cpath,
    rpath,
    unknown_ids: str = "keep",
    names: dict | None = None,
) -> dict:
    """Check ids, emptiness and referential integrity; normalise types. Errors name the file and the
    column as the source format calls it (``names`` maps DAPFAM's names to the source's)."""
    n = {
        S.QUERY_ID: S.QUERY_ID,
        S.DOC_ID: S.DOC_ID,
        S.RELEVANCE: S.RELEVANCE,
        S.DOMAIN: S.DOMAIN,
        S.IPC3: S.IPC3,
        "qrels_query_id": S.QUERY_ID,
        "qrels_doc_id": S.DOC_ID,
        **(names or {}),
    }
    if unknown_ids not in UNKNOWN_IDS:
        raise DataError(f"dataset.unknown_ids={unknown_ids!r}: expected one of {list(UNKNOWN_IDS)}.")
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        if frame[col].isna().any():
            raise DataError(
                f"{p}: column {n[col]!r} has {int(frame[col].isna().sum())} missing id(s). Fix: give every row an id."
            )
        frame[col] = frame[col].astype(str)
        _check_ids(frame[col], p, n[col])
    if len(docs) == 0:
        raise DataError(f"{cpath}: the corpus is empty (no rows). Fix: point dataset.path at a folder with documents.")
    if len(queries) == 0:
        raise DataError(f"{qpath}: no queries (no rows). Fix: point dataset.path at a folder with queries.")
    for frame, col, p in ((queries, S.QUERY_ID, qpath), (docs, S.DOC_ID, cpath)):
        dup = _dupes(frame[col])
        if dup:
            raise DataError(
                f"{p}: column {n[col]!r} has {len(dup)} duplicate id(s), e.g. {dup[:5]}. Fix: keep one row per id."
            )
    bad = docs[S.DOC_ID][docs[S.DOC_ID].str.contains(S.PASSAGE_SEP, regex=False)]
    if len(bad):
        raise DataError(
            f"{cpath}: column {n[S.DOC_ID]!r} has ids containing {S.PASSAGE_SEP!r} (e.g. {bad.iloc[0]!r}), "
            f"which the harness uses for passage ids. Fix: rename those ids."
        )
    for col in (S.TITLE, S.ABSTRACT, S.CLAIMS, S.KEYWORDS):
        queries[col] = queries[col].fillna("").astype(str)
    queries[S.IPC3] = codes_column(queries[S.IPC3], qpath, n[S.IPC3])
    docs[S.IPC3] = codes_column(docs[S.IPC3], cpath, n[S.IPC3])

    qrels = qrels.copy()
    for col, key in ((S.QUERY_ID, "qrels_query_id"), (S.DOC_ID, "qrels_doc_id")):
        if qrels[col].isna().any():
            raise DataError(
                f"{rpath}: column {n[key]!r} has {int(qrels[col].isna().sum())} missing id(s). Fix: give every judgment an id."
            )
        qrels[col] = qrels[col].astype(str)
        _check_ids(qrels[col], rpath, n[key])
    rel = pd.to_numeric(qrels[S.RELEVANCE], errors="coerce")
    bad = rel.isna() | rel.abs().eq(float("inf"))
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise DataError(
            f"{rpath}: column {n[S.RELEVANCE]!r} has non-numeric or infinite values (first at row {row}: "
            f"{qrels[S.RELEVANCE].iloc[row]!r}). Fix: use numeric grades (0 = not relevant)."
        )
    # Grades are kept as they are (graded nDCG); > 0 is relevant for recall and for ALL/IN/OUT.
    qrels[S.RELEVANCE] = rel.astype(int) if (rel == rel.round()).all() else rel.astype(float)
    if not (qrels[S.RELEVANCE] > 0).any():
        raise DataError(
            f"{rpath}: no positive judgment ({len(qrels)} rows, none with {n[S.RELEVANCE]} > 0), so no "
            f"score can be computed. Fix: point dataset.path at qrels holding relevant pairs."
        )
    qrels[S.DOMAIN] = _domain_labels(qrels[S.DOMAIN], rpath, n[S.DOMAIN])
    unknown_q = sorted(set(qrels[S.QUERY_ID]) - set(queries[S.QUERY_ID]))
    if unknown_q:
        raise DataError(
            f"{rpath}: column {n['qrels_query_id']!r} names {len(unknown_q)} query id(s) not in {qpath.name}, "
            f"e.g. {unknown_q[:5]}. Fix: drop those qrels rows or add the queries."
        )
    dup = qrels.duplicated([S.QUERY_ID, S.DOC_ID])
    if dup.any():
        ex = qrels[dup].iloc[0]
        raise DataError(
            f"{rpath}: {int(dup.sum())} duplicate ({n['qrels_query_id']}, {n['qrels_doc_id']}) pair(s), e.g. "
            f"({ex[S.QUERY_ID]}, {ex[S.DOC_ID]}). Fix: keep one judgment per pair."
        )
    qrels = _unknown_documents(qrels, set(docs[S.DOC_ID]), unknown_ids, rpath, cpath, n["qrels_doc_id"])
    return {
        "queries": queries.reset_index(drop=True),
        "doc_ipc3": dict(zip(docs[S.DOC_ID], docs[S.IPC3])),
        "qrels": qrels.reset_index(drop=True),
    }


def _unknown_documents(qrels, doc_ids: set, policy: str, rpath, cpath, col: str) -> pd.DataFrame:
    """Judged documents missing from the corpus. trec_eval and Anserini count them as relevant but
    unretrievable (Anserini's CACM regression depends on it): ``keep`` does the same, ``drop``
    removes those judgments, ``error`` refuses them."""
    unknown = ~qrels[S.DOC_ID].isin(doc_ids)
    pos = unknown & (qrels[S.RELEVANCE] > 0)
    if not unknown.any():
        return qrels
    examples = sorted(qrels.loc[unknown, S.DOC_ID].unique().tolist())[:5]
    what = (
        f"{rpath}: column {col!r} names {qrels.loc[unknown, S.DOC_ID].nunique()} document id(s) not in "
        f"{cpath.name} ({int(pos.sum())} positive judgment(s)), e.g. {examples}"
    )
    if policy == "error":
        raise DataError(
            f"{what}. Fix: drop those qrels rows or add the documents, or set dataset.unknown_ids=keep "
            f"(count them as relevant but unretrievable, as trec_eval does) or drop."
        )
    positives = qrels[S.RELEVANCE] > 0
    if positives.any() and pos.sum() == positives.sum():  # nothing relevant can be retrieved: ids do not match
        raise DataError(
            f"{what}: none of the {int(positives.sum())} positive judgments names a document of the "
            f"corpus, so every score would be 0. Fix: write the ids of {rpath.name} as {cpath.name} "
            f"writes them (e.g. '12' vs '12.0' or 'D12', a number stored as float)."
        )
    if policy == "drop":
        log.warning("%s: dropped (dataset.unknown_ids=drop)", what)
        return qrels[~unknown]
    log.warning(
        "%s: kept as relevant but unretrievable, as trec_eval does (dataset.unknown_ids=keep; drop or error to change)",
        what,
    )
    return qrels
