"""The leakage audit: what the judgments a model learns from share with the judgments it is scored on.

Anything that learns from judgments (``ltr.train``, ``ltr.prior``, ``encoder.train``, cross-fitting)
is only honest when it cannot have seen the answers it is scored on. Comparing ids is not enough:
the same patent comes under another id in another source, and CACM's symmetric citations bring a
training pair (q, d) back as a scored pair (d, q) when one split's corpus holds another split's
queries (../shared/README.md: 1,388 of 1,537 scored positives were training pairs read backwards).
So queries and documents are matched by their **normalised text** (Unicode NFKC, case-folded,
runs of non-word characters as one space), and the audit counts, before anything is scored:

* ``same_pairs``: scored positive pairs that are training positive pairs;
* ``reversed_pairs``: scored positive pairs (q, d) whose reverse (d, q) is a training positive;
* ``shared_queries``: scored queries that are training queries (queries with training positives);
* ``queries_as_documents``: scored queries that are documents of the training corpus;
* ``shared_positives``: scored positive pairs whose document is also a training positive
  (popular targets: allowed, but what a model can learn about *which documents are cited*, so
  its share goes in the results row, and the identity check is what keeps it honest).

The first three are refused (:class:`Leakage`, one line with the counts and the fix).
:func:`without_overlap` gives the training positives without them: ``finetune.leakage=drop``
trains a fine-tuned encoder on those instead of refusing, and the row counts what went
(``finetune_dropped_pairs``). Pure functions of the two judgment sets, so every caller (and a test)
audits the same way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property

import pandas as pd

from .data import schema as S
from .data import views as V

_NON_WORD = re.compile(r"[\W_]+")


class Leakage(Exception):
    """Training judgments overlap the scored ones (the message names the counts and the fix)."""


def normalise(text: object) -> str:
    """The text as the audit compares it: NFKC, case-folded, non-word runs as one space."""
    t = unicodedata.normalize("NFKC", str(text or "")).casefold()
    return _NON_WORD.sub(" ", t).strip()


@dataclass(frozen=True)
class Judged:
    """One side of the audit: query texts, document texts (the corpus a model saw or is scored
    on) and the positive pairs, by id."""

    queries: Mapping[str, str]
    documents: Mapping[str, str]
    positives: pd.DataFrame  # query_id, doc_id

    @cached_property
    def query_texts(self) -> dict[str, str]:
        """``{query id: normalised text}``, computed once (a DAPFAM corpus is 45,336 documents)."""
        return _norm_map(self.queries)

    @cached_property
    def document_texts(self) -> dict[str, str]:
        return _norm_map(self.documents)

    def pairs(self) -> set[tuple[str, str]]:
        q, d = self.query_texts, self.document_texts
        return {
            (q[a], d[b])
            for a, b in zip(self.positives["query_id"].astype(str), self.positives["doc_id"].astype(str))
            if q.get(a) and d.get(b)
        }


def _norm_map(texts: Mapping[str, str]) -> dict[str, str]:
    return {str(k): normalise(v) for k, v in texts.items()}


@dataclass(frozen=True)
class Audit:
    same_pairs: int
    reversed_pairs: int
    shared_queries: int
    queries_as_documents: int
    shared_positives: int
    scored_positives: int

    @property
    def shared_positive_share(self) -> float:
        return self.shared_positives / self.scored_positives if self.scored_positives else 0.0

    @property
    def refused(self) -> bool:
        return bool(self.same_pairs or self.reversed_pairs or self.shared_queries)

    def columns(self, prefix: str = "leakage_") -> dict:
        """The results row's columns: every count, and the shared-positive share."""
        return {
            **{f"{prefix}{k}": v for k, v in asdict(self).items()},
            f"{prefix}shared_positive_share": round(self.shared_positive_share, 4),
        }

    def summary(self) -> str:
        return (
            f"{self.same_pairs} same pairs, {self.reversed_pairs} reversed pairs, {self.shared_queries} scored "
            f"queries that are training queries, {self.queries_as_documents} that are training documents; "
            f"{self.shared_positives} of {self.scored_positives} scored positives have a document that is a "
            f"training positive"
        )


def audit(train: Judged, scored: Judged) -> Audit:
    """The counts of the module docstring, by normalised text."""
    train_pairs, scored_pairs = train.pairs(), scored.pairs()
    judged = set(train.positives["query_id"].astype(str))  # a query without positives teaches no label
    train_queries = {t for q, t in train.query_texts.items() if t and q in judged}
    train_docs = {t for t in train.document_texts.values() if t}
    scored_queries = {t for t in scored.query_texts.values() if t}
    train_positive_docs = {d for _, d in train_pairs}
    return Audit(
        same_pairs=len(scored_pairs & train_pairs),
        reversed_pairs=len({(q, d) for q, d in scored_pairs if (d, q) in train_pairs}),
        shared_queries=len(scored_queries & train_queries),
        queries_as_documents=len(scored_queries & train_docs),
        shared_positives=sum(1 for _, d in scored_pairs if d in train_positive_docs),
        scored_positives=len(scored_pairs),
    )


def check(result: Audit, what: str, drop: bool = False) -> None:
    """Refuse a leaking training set in one line (unless ``drop``: the caller removes the overlap
    from training with :func:`without_overlap` and says so in the row)."""
    if result.refused and not drop:
        raise Leakage(
            f"{what}: leakage audit: {result.summary()}. A model trained on these judgments has seen the "
            f"answers it is scored on. Fix: train on other queries (python -m harness.data.split makes two "
            f"halves of a dataset whose queries are never documents)."
        )


def shown_documents(train: Judged, scored: Judged) -> list[str]:
    """The scored side's documents that are training positives, by content: what a model trained on
    ``train`` has seen as relevant (the never-shown view leaves them out)."""
    seen = {train.document_texts.get(d, "") for d in train.positives["doc_id"].astype(str)} - {""}
    return sorted(d for d, t in scored.document_texts.items() if t in seen)


def judged(ds) -> Judged:
    """A dataset's judgments as the audit reads them: TA texts of queries and documents."""
    pos = ds.positives.rename(columns={S.DOC_ID: "doc_id"})[[S.QUERY_ID, "doc_id"]]
    return Judged(V.query_texts(ds.queries, "TA"), dict(V.target_texts(ds.corpus, "TA")), pos)


def without_overlap(train: Judged, scored: Judged) -> pd.DataFrame:
    """The training positives without the pairs a scored pair repeats or reverses and without the
    queries a scored query repeats (``finetune.leakage=drop``)."""
    tq, td = train.query_texts, train.document_texts
    scored_pairs = scored.pairs()
    scored_queries = {t for t in scored.query_texts.values() if t}
    keep = []
    for a, b in zip(train.positives["query_id"].astype(str), train.positives["doc_id"].astype(str)):
        q, d = tq.get(a, ""), td.get(b, "")
        keep.append(not (q in scored_queries or (q, d) in scored_pairs or (d, q) in scored_pairs))
    return train.positives[keep]
