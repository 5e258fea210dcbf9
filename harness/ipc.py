"""Patent classification codes: parsing, levels, overlap and DAPFAM's IN/OUT relation, in one place.

DAPFAM calls a relevant (query, target) pair IN-domain when the two share a 3-character IPC code
(IPC3, a class such as ``G06``), else OUT-domain. The same relation drives the qrels' IN/OUT
subsets (:mod:`harness.data.qrels`), the domain-aware re-ranking (:mod:`harness.rerank`), the
learning-to-rank features (:mod:`harness.ltr`) and the domain view (:mod:`harness.domains`), so
it is defined once, here. Levels: the section is a code's first character (A-H in IPC; the first
digit of cacm-xdom's Computing Reviews codes), IPC3 the class, IPC4 the subclass (``A61K``).

A side without codes is *unknown*, never disjoint: :func:`disjoint` is False there, and the
overlap measures are NaN.
"""

from __future__ import annotations

import re

import numpy as np

_QUOTED = re.compile(r"""['"]([^'"]*)['"]""")
_SEPARATORS = re.compile(r"[\s,;|]+")
IPC4 = re.compile(r"\b[A-H][0-9]{2}[A-Z]")  # an IPC subclass, as in "A61K 31/00" or "A61K31/00"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def parse_codes(value) -> tuple[tuple[str, ...], bool]:
    """A cell of an IPC3 column as a sorted tuple of codes, and whether it was a string.

    Lists (parquet list columns arrive as numpy arrays) are taken as they are. Strings are parsed,
    never split into characters: a Python or numpy list repr (``"['G06', 'H04']"``,
    ``"['G06' 'H04']"``) by its quoted items, anything else (``"G06 H04"``, ``"G06;H04"``) by
    white space, commas, semicolons or bars.
    """
    if _missing(value):
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


def code_set(values) -> set[str]:
    """A code list (list, array, space-separated string, None or NaN) as a set of codes."""
    if _missing(values):
        return set()
    if isinstance(values, str):
        values = values.split()
    return {str(v) for v in values if v is not None and str(v)}


def sections(values) -> set[str]:
    """The sections (first characters) of a code list."""
    return {c[0] for c in code_set(values)}


def ipc4(values) -> set[str]:
    """IPC subclasses (four characters) of a full-codes value: IPC codes wherever they stand
    (``"A61K 31/00; G06F 16/00"``), else the first four characters of each space-, comma- or
    semicolon-separated code (other schemes, such as cacm-xdom's ``"4.22"``)."""
    if _missing(values):
        return set()
    text = values if isinstance(values, str) else " ".join(str(v) for v in values if v is not None)
    found = set(IPC4.findall(text))
    return found or {c[:4] for c in re.split(r"[\s,;|]+", text) if c}


def disjoint(a, b) -> bool:
    """Whether both sides have codes and share none: the OUT relation, known on both sides."""
    x, y = code_set(a), code_set(b)
    return bool(x) and bool(y) and x.isdisjoint(y)


def domain(query_codes, doc_codes) -> str:
    """``IN`` when the two code lists share a code (IPC3: DAPFAM's definition), else ``OUT``."""
    return "IN" if code_set(query_codes) & code_set(doc_codes) else "OUT"


def overlap(a: list[set], b: list[set], name: str) -> dict:
    """Per pair of code sets: ``{name}_shared`` (codes in common) and ``{name}_jaccard``; NaN where
    a side has no codes."""
    shared = np.array([len(x & y) for x, y in zip(a, b)], float)
    union = np.array([len(x | y) for x, y in zip(a, b)], float)
    known = np.array([bool(x) and bool(y) for x, y in zip(a, b)])
    return {
        f"{name}_shared": np.where(known, shared, np.nan),
        f"{name}_jaccard": np.where(known, shared / np.maximum(union, 1), np.nan),
    }
