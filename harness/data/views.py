"""Field views: which fields of a family make up its query or target text.

Join order is fixed and documented: title, abstract, claims, description, fields separated by a
blank line (``"\\n\\n"``); empty fields are skipped, so a family without an abstract renders its
title alone rather than a title and a dangling separator.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pandas as pd

from . import schema as S
from .schema import DataError

SEP = "\n\n"

QUERY_VIEWS = {
    "T": [S.TITLE],
    "TA": [S.TITLE, S.ABSTRACT],
    "TAC": [S.TITLE, S.ABSTRACT, S.CLAIMS],
    "KW": [S.KEYWORDS],
}
TARGET_VIEWS = {
    "TA": [S.TITLE, S.ABSTRACT],
    "TAC": [S.TITLE, S.ABSTRACT, S.CLAIMS],
    "FULL": [S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION],
    "DESC": [S.DESCRIPTION],
}


def fields(view: str, kind: str) -> list[str]:
    table = QUERY_VIEWS if kind == "query" else TARGET_VIEWS
    if view not in table:
        group = "query_fields" if kind == "query" else "target_fields"
        raise DataError(f"{group}={view!r} is not a {kind} view. Fix: use one of {sorted(table)}.")
    return table[view]


def join(values: Iterable) -> str:
    parts = []
    for v in values:
        if v is None or (isinstance(v, float) and v != v):
            continue
        if not isinstance(v, str) and hasattr(v, "__iter__"):  # a list column (keywords as a list)
            v = ", ".join(str(x) for x in v if x is not None)
        text = str(v).strip()
        if text:
            parts.append(text)
    return SEP.join(parts)


def render(frame: pd.DataFrame, cols: list[str]) -> list[str]:
    return [join(row) for row in frame[cols].itertuples(index=False, name=None)]


def query_texts(queries: pd.DataFrame, view: str) -> dict[str, str]:
    """``{query_id: text}`` for a query view; queries whose view is empty are kept with ``""``."""
    texts = dict(zip(queries[S.QUERY_ID], render(queries, fields(view, "query"))))
    if not any(texts.values()):
        raise DataError(
            f"query_fields={view}: every query text is empty. Fix: choose a view whose fields "
            f"the queries file fills (e.g. TA)."
        )
    return texts


def target_texts(corpus, view: str, batch_size: int = 2048) -> Iterator[tuple[str, str]]:
    """Stream ``(doc_id, text)`` for a target view, one record batch of the corpus at a time."""
    cols = fields(view, "target")
    for batch in corpus.iter_batches(cols, batch_size=batch_size):
        yield from zip(batch[S.DOC_ID].astype(str), render(batch, cols))
