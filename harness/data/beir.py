"""Bring-your-own data in BEIR's layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``.

BEIR fields map onto DAPFAM's: a document's ``title`` -> title, ``text`` -> abstract; optional
``claims`` and ``description`` fields are used when present. A query's ``text`` -> title (so the
``T`` view is the BEIR query); optional ``abstract``, ``claims`` and ``keywords`` fields fill the
other views. Classification codes, for IN/OUT, come from an ``ipc3`` list in either file (or in
``metadata.ipc3``); without them every positive is OUT-of-domain, and the IN subset is empty.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import schema as S
from .digest import file_digest, files_digest
from .schema import DataError
from .validate import validate


def _codes(rec: dict):
    return rec.get("ipc3") or (rec.get("metadata") or {}).get("ipc3") or []


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.exists():
        raise DataError(
            f"{path}: file not found. Fix: a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/test.tsv."
        )
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start}). Fix: re-encode the file as UTF-8."
                ) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: not valid JSON ({e.msg}). Fix: one JSON object per line.") from e
            if not isinstance(rec, dict):
                raise DataError(
                    f"{path}:{n}: a JSON {type(rec).__name__}, not an object. Fix: one JSON object per line."
                )
            if "_id" not in rec:
                raise DataError(f"{path}:{n}: missing field '_id'. Fix: every BEIR record needs an '_id'.")
            yield n, rec


def _doc_row(rec: dict) -> dict:
    return {
        S.DOC_ID: str(rec["_id"]),
        S.TITLE: rec.get("title") or "",
        S.ABSTRACT: rec.get("text") or "",
        S.CLAIMS: rec.get("claims") or "",
        S.DESCRIPTION: rec.get("description") or "",
        S.IPC3: _codes(rec),
    }


@dataclass
class JsonlCorpus:
    path: Path

    def iter_batches(self, columns: list[str], batch_size: int = 2048) -> Iterator[pd.DataFrame]:
        rows = []
        for _, rec in _read_jsonl(self.path):
            rows.append(_doc_row(rec))
            if len(rows) == batch_size:
                yield pd.DataFrame(rows)
                rows = []
        if rows:
            yield pd.DataFrame(rows)


# BEIR's own column names, for messages about BEIR files.
NAMES = {
    S.QUERY_ID: "_id",
    S.DOC_ID: "_id",
    S.RELEVANCE: "score",
    S.DOMAIN: "domain",
    S.IPC3: "ipc3",
    "qrels_query_id": "query-id",
    "qrels_doc_id": "corpus-id",
}


def read_beir(
    path: str | Path, split: str = "test", unknown_ids: str = "keep", digest_cache: Path | None = None
) -> dict:
    root = Path(path).expanduser().resolve()
    cpath, qpath, rpath = root / "corpus.jsonl", root / "queries.jsonl", root / "qrels" / f"{split}.tsv"
    docs = pd.DataFrame(
        [{S.DOC_ID: str(r["_id"]), S.IPC3: _codes(r)} for _, r in _read_jsonl(cpath)], columns=[S.DOC_ID, S.IPC3]
    )
    queries = pd.DataFrame(
        [
            {
                S.QUERY_ID: str(r["_id"]),
                S.TITLE: r.get("text") or "",
                S.ABSTRACT: r.get("abstract") or "",
                S.CLAIMS: r.get("claims") or "",
                S.KEYWORDS: r.get("keywords") or "",
                S.IPC3: _codes(r),
            }
            for _, r in _read_jsonl(qpath)
        ],
        columns=S.QUERY_COLUMNS,
    )
    if not rpath.exists():
        raise DataError(f"{rpath}: file not found. Fix: BEIR qrels live in qrels/<split>.tsv (dataset.split={split}).")
    try:
        qrels = pd.read_csv(rpath, sep="\t", dtype=str, keep_default_na=False, encoding="utf-8")
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise DataError(
            f"{rpath}: not a readable TSV ({str(e).splitlines()[0]}). Fix: UTF-8 text with the header "
            f"'query-id<TAB>corpus-id<TAB>score'."
        ) from None
    need = ["query-id", "corpus-id", "score"]
    missing = [c for c in need if c not in qrels.columns]
    if missing:
        raise DataError(
            f"{rpath}: missing column(s) {missing}; found {list(qrels.columns)}. Fix: BEIR qrels have a "
            f"header 'query-id<TAB>corpus-id<TAB>score'."
        )
    qrels = qrels.rename(columns={"query-id": S.QUERY_ID, "corpus-id": S.DOC_ID, "score": S.RELEVANCE})
    qrels[S.DOMAIN] = qrels["domain"] if "domain" in qrels else None
    parts = validate(
        queries,
        docs,
        qrels[[S.QUERY_ID, S.DOC_ID, S.RELEVANCE, S.DOMAIN]],
        qpath=qpath,
        cpath=cpath,
        rpath=rpath,
        unknown_ids=unknown_ids,
        names=NAMES,
    )
    fp = files_digest((qpath, cpath, rpath), digest_cache)
    return parts | {
        "corpus": JsonlCorpus(cpath),
        "fingerprint": fp,
        "corpus_fingerprint": file_digest(cpath, digest_cache),
        "files": {"queries": str(qpath), "corpus": str(cpath), "qrels": str(rpath)},
    }
