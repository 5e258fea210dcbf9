"""Relevance judgments split into ALL / IN / OUT, and their TREC exports.

DAPFAM labels each (query, target) pair IN when the two families share at least one 3-character
IPC code, else OUT; ``NC`` rows (relevance 0) are sampled negatives and never count as relevant.
The subsets are built from positives (relevance > 0), so nDCG's ideal ranking and recall's
denominator are all of a subset's relevant documents; as scored (:func:`judgments`) they also
carry the other judged documents of their queries with relevance 0, for measures that read
judged non-relevant documents.

The label is also recomputed from the IPC3 lists of query and target and compared with the file's
``domain_rel``; disagreements are reported, and ``dataset.domain_source`` (``file`` | ``ipc3``)
decides which label is used.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import ipc
from ..files import write_text_atomic
from . import schema as S
from .schema import DataError

log = logging.getLogger(__name__)

SUBSETS = ("ALL", "IN", "OUT")


@dataclass
class DomainCheck:
    """How the file's IN/OUT labels compare with the recomputed IPC3 overlap."""

    pairs: int
    disagreements: int
    examples: list[dict]

    def __str__(self) -> str:
        if not self.disagreements:
            return f"domain_rel agrees with IPC3 overlap on all {self.pairs} positive pairs"
        return (
            f"domain_rel disagrees with IPC3 overlap on {self.disagreements} of {self.pairs} positive pairs, "
            f"e.g. {self.examples[:3]}"
        )


def positives(qrels: pd.DataFrame, queries: pd.DataFrame, doc_ipc3: dict, domain_source: str = "file"):
    """Positive pairs with a final ``domain`` column, and the check of file vs recomputed labels.

    A pair whose query or document has no IPC3 codes (or whose document is missing from the
    corpus, kept by ``dataset.unknown_ids=keep``) has no computable overlap: it takes the file's
    IN/OUT label, and without one it counts in ALL only (never guessed OUT)."""
    if domain_source not in ("file", "ipc3"):
        raise DataError(f"dataset.domain_source={domain_source!r}: expected 'file' or 'ipc3'.")
    pos = qrels[qrels[S.RELEVANCE] > 0].copy()
    q_codes = dict(zip(queries[S.QUERY_ID], queries[S.IPC3]))
    # No codes on either side (or a document missing from the corpus): the overlap is unknown, not OUT.
    pos["ipc3_domain"] = [
        ipc.domain(q_codes[q], doc_ipc3[d]) if q_codes[q] and doc_ipc3.get(d) else None
        for q, d in zip(pos[S.QUERY_ID], pos[S.DOC_ID])
    ]
    labelled = pos[S.DOMAIN].isin(["IN", "OUT"])
    known = pos["ipc3_domain"].notna()
    disagree = pos[labelled & known & (pos[S.DOMAIN] != pos["ipc3_domain"])]
    check = DomainCheck(
        pairs=int((labelled & known).sum()),
        disagreements=len(disagree),
        examples=disagree[[S.QUERY_ID, S.DOC_ID, S.DOMAIN, "ipc3_domain"]].head(5).to_dict("records"),
    )
    if domain_source == "file" and (~labelled).any():
        n = int((~labelled).sum())
        if n == len(pos):
            log.warning("qrels carry no IN/OUT labels (domain_rel): using IPC3 overlap for all %d positive pairs", n)
        else:
            log.warning("%d positive pairs have no IN/OUT label in domain_rel: using IPC3 overlap for them", n)
    if domain_source == "ipc3":
        pos["domain"] = pos["ipc3_domain"].where(known, pos[S.DOMAIN].where(labelled))
    else:
        pos["domain"] = pos[S.DOMAIN].where(labelled, pos["ipc3_domain"])
    if pos["domain"].isna().any():
        log.warning(
            "%d positive pairs have no IN/OUT label and no IPC3 codes to compute one (a query or document "
            "without codes, or a document missing from the corpus): they count in ALL only",
            int(pos["domain"].isna().sum()),
        )
    if check.disagreements:
        log.warning(
            "%s; using the %s label (dataset.domain_source)", check, "IPC3" if domain_source == "ipc3" else "file's"
        )
    out = pos.rename(columns={S.QUERY_ID: "query_id", S.DOC_ID: "doc_id", S.RELEVANCE: "relevance"})
    return out[["query_id", "doc_id", "relevance", "domain"]].reset_index(drop=True), check


def grade_scale(qrels: pd.DataFrame) -> int:
    """The power of ten :func:`integer_grades` multiplies the grades by (1: integer grades)."""
    rel = qrels["relevance"].astype(float)
    if (rel == rel.round()).all():
        return 1
    for digits in range(1, 7):
        scaled = rel * 10**digits
        if ((scaled - scaled.round()).abs() < 1e-6).all():
            break
    return 10**digits


def integer_grades(qrels: pd.DataFrame) -> pd.DataFrame:
    """Grades as the integers trec_eval and pytrec_eval require, keeping their ratios.

    Integer grades are returned as they are. Fractional grades (0.5, 0.9) are multiplied by the
    smallest power of ten that makes them integers (at most 10^6, then rounded), and a positive
    grade never becomes 0. nDCG's linear gains are unchanged by a common factor, and measures that
    binarise (R, P, AP: grade >= 1) see every positive as relevant: > 0 is relevant, as documented.
    """
    rel = qrels["relevance"].astype(float)
    scale = grade_scale(qrels)
    if scale == 1:
        return qrels.assign(relevance=rel.astype(int))
    ints = (rel * scale).round().astype(int)
    ints[(rel > 0) & (ints < 1)] = 1
    return qrels.assign(relevance=ints)


def judged_pairs(qrels: pd.DataFrame) -> pd.DataFrame:
    """Every judged (query, document) pair, relevant or not (DAPFAM's ``NC`` rows, relevance 0, are
    randomly sampled negatives)."""
    out = qrels[[S.QUERY_ID, S.DOC_ID]].rename(columns={S.QUERY_ID: "query_id", S.DOC_ID: "doc_id"})
    return out.drop_duplicates().reset_index(drop=True)


def judgments(pos: pd.DataFrame, judged: pd.DataFrame, name: str) -> pd.DataFrame:
    """One subset's qrels as scored: its positives, and every other judged document of the same
    queries with relevance 0 (sampled negatives, and in IN / OUT the other subset's positives).

    Zero rows change no measure that counts relevant documents (nDCG's ideal ranking and gains,
    recall's denominator, P, AP, RR: a grade of 0 is not relevant), but measures that read judged
    non-relevant documents (Judged@k, Bpref) see them. Queries without a positive in the subset
    stay out of it: their rows are not added."""
    rel = subset(pos, name)
    others = judged[judged["query_id"].isin(set(rel["query_id"]))]
    others = others.merge(rel[["query_id", "doc_id"]], how="left", indicator=True)
    zeros = others[others["_merge"] == "left_only"][["query_id", "doc_id"]].assign(relevance=0)
    return pd.concat([rel, zeros], ignore_index=True)


def subset(pos: pd.DataFrame, name: str) -> pd.DataFrame:
    """ALL, IN or OUT qrels as ir-measures expects them (query_id, doc_id, relevance)."""
    if name not in SUBSETS:
        raise ValueError(f"unknown qrels subset {name!r}; expected one of {SUBSETS}")
    sel = pos if name == "ALL" else pos[pos["domain"] == name]
    return sel[["query_id", "doc_id", "relevance"]].reset_index(drop=True)


def write_trec_qrels(qrels: pd.DataFrame, path: str | Path) -> Path:
    """``qid 0 docid rel`` lines, readable by trec_eval, Anserini and ir-measures (fractional
    grades scaled to integers by :func:`integer_grades`)."""

    qrels = integer_grades(qrels)
    lines = [f"{q} 0 {d} {r}\n" for q, d, r in qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False)]
    write_text_atomic(path, "".join(lines))
    return Path(path)


def write_trec_topics(topics: dict[str, str], path: str | Path) -> Path:
    """Anserini's TSV topic format (``qid<TAB>text``), with text on one line; empty topics are left out."""

    lines = [f"{q}\t{' '.join(t.split())}\n" for q, t in topics.items() if t.strip()]
    write_text_atomic(path, "".join(lines))
    return Path(path)
