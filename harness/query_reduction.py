"""Patent query reduction: keep a long query's most discriminative terms before BM25 searches.

Patent queries (title, abstract, claims) run to hundreds of distinct terms, most of them common
to every patent ("device", "method", "comprising"). The classic prior-art lever keeps only the
``n_terms`` terms that best tell the query's topic apart from the target collection
(Xue & Croft, "Transforming patents into prior-art queries", SIGIR 2009; Mahdabi et al.'s
KL-based term selection for patent search):

* ``tfidf``: ``tf(t, q) * idf(t)``, with Lucene's BM25 idf ``log(1 + (N - df + 0.5) / (df + 0.5))``;
* ``kl``: the term's contribution to the KL divergence of the query language model from the
  collection's, ``p(t|q) * log(p(t|q) / p(t|C))``, ``p(t|q) = tf / |q|``, ``p(t|C) = cf / |C|``.

Statistics are the searched index's own (its analyzer, its units: passages at passage level), read
through pyserini's index reader. Terms absent from the collection cannot match and are never kept;
ties go to the term that sorts first. The reduced query keeps each kept term's frequency: it is
written as the query's own surface words (a word whose analysis is exactly the kept term, repeated
``tf`` times), so Anserini's bag-of-words query analyses it to exactly the kept terms with their
weights, and the search itself is unchanged. Fewer clauses also make each query cheaper, which is
what lets long TAC queries run at DAPFAM scale (``bench/query_reduction.py``).
"""

from __future__ import annotations

import math
from collections import Counter

METHODS = ("tfidf", "kl")


def term_scores(tf: dict[str, int], df: dict[str, int], cf: dict[str, int], n_docs: int, total_terms: int, method: str):
    """``{term: score}`` of a query's analysed terms (``tf``) under ``method`` (module docstring).
    Terms with ``df == 0`` are left out: they match nothing."""
    if method not in METHODS:
        raise ValueError(f"query_reduction.method={method!r}: expected one of {METHODS}")
    length = sum(tf.values())
    out = {}
    for t, n in tf.items():
        if df.get(t, 0) <= 0:
            continue
        if method == "tfidf":
            out[t] = n * math.log(1 + (n_docs - df[t] + 0.5) / (df[t] + 0.5))
        else:
            pq = n / length
            out[t] = pq * math.log(pq / (cf[t] / total_terms))
    return out


def select(scores: dict[str, float], n_terms: int) -> list[str]:
    """The ``n_terms`` best-scoring terms; ties to the term that sorts first."""
    return [t for t, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:n_terms]]


def rewrite(words: list[str], analyzed: dict[str, list[str]], keep: list[str], tf: dict[str, int]) -> tuple[str, int]:
    """The reduced query text: for each kept term, a surface word of the query whose analysis is
    exactly that term, repeated ``tf`` times (the term itself when it analyses to itself); and the
    number of kept terms that neither could write (left out: a term only ever seen inside a word
    that also holds another, e.g. ``state-of-the-art``, whose stem is not a fixed point)."""
    surface: dict[str, str] = {}
    for w in words:
        a = analyzed.get(w, [])
        if len(a) == 1 and a[0] not in surface:
            surface[a[0]] = w
    out, lost = [], 0
    for t in keep:
        word = surface.get(t) or (t if analyzed.get(t) == [t] else None)
        if word is None:
            lost += 1
        else:
            out.extend([word] * tf[t])
    return " ".join(out), lost


class Reducer:
    """Query reduction against one Lucene index (its analyzer and statistics), cached per word."""

    def __init__(self, index_dir: str, method: str, n_terms: int):
        from .jvm import start

        start()  # Java 21 and the JVM before pyserini (harness.jvm)
        from pyserini.index.lucene import LuceneIndexReader

        self.reader = LuceneIndexReader(str(index_dir))
        stats = self.reader.stats()
        self.n_docs, self.total_terms = int(stats["documents"]), int(stats["total_terms"])
        self.method, self.n_terms = method, int(n_terms)
        self._analyzed: dict[str, list[str]] = {}
        self._counts: dict[str, tuple[int, int]] = {}
        self.lost = 0  # kept terms no surface word analyses to exactly (left out)
        self.terms_before: list[int] = []
        self.terms_after: list[int] = []

    def analyze(self, word: str) -> list[str]:
        if word not in self._analyzed:
            self._analyzed[word] = list(self.reader.analyze(word))
        return self._analyzed[word]

    def counts(self, term: str) -> tuple[int, int]:
        if term not in self._counts:
            df, cf = self.reader.get_term_counts(term, analyzer=None)
            self._counts[term] = (int(df or 0), int(cf or 0))
        return self._counts[term]

    def reduce(self, text: str) -> str:
        # Whitespace never joins two tokens in Lucene's tokenizer, so a query's terms are the
        # union of its whitespace-separated words' analyses.
        words = text.split()
        tf: Counter[str] = Counter()
        for w in words:
            tf.update(self.analyze(w))
        stats = {t: self.counts(t) for t in tf}
        scores = term_scores(
            dict(tf),
            {t: s[0] for t, s in stats.items()},
            {t: s[1] for t, s in stats.items()},
            self.n_docs,
            self.total_terms,
            self.method,
        )
        keep = select(scores, self.n_terms)
        for t in keep:
            self.analyze(t)
        out, lost = rewrite(words, self._analyzed, keep, dict(tf))
        self.lost += lost
        self.terms_before.append(len(tf))
        self.terms_after.append(len(keep) - lost)
        return out

    def close(self) -> None:
        self.reader.reader.close()  # the Java IndexReader (pyserini 1.6 has no close of its own)


def reduce_topics(index_dir, topics: dict[str, str], method: str, n_terms: int) -> tuple[dict[str, str], dict]:
    """Every topic reduced against the index; returns the reduced topics and a summary."""
    r = Reducer(str(index_dir), method, n_terms)
    try:
        out = {q: r.reduce(t) if t.strip() else t for q, t in topics.items()}
    finally:
        r.close()
    n = max(1, len(r.terms_before))
    return out, {
        "mean_terms_before": round(sum(r.terms_before) / n, 2),
        "mean_terms_after": round(sum(r.terms_after) / n, 2),
        "terms_not_written": r.lost,
    }


def params_of(q) -> dict | None:
    """The settings that change a run (the ``query_reduction`` config group), or None."""
    if q is None:
        return None
    return {"method": str(q.method), "n_terms": int(q.n_terms)}
