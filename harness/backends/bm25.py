"""BM25 through pyserini and Anserini, in-process.

Indexes are built by Anserini's ``IndexCollection`` over the units' JSON lines (the class the
``pyserini.index.lucene`` CLI calls; the CLI itself cannot start the JVM here, see
:mod:`harness.jvm`), with the default English analyzer (Porter stemming, stopwords) and raw
documents stored. Search is pyserini's ``LuceneSearcher.batch_search`` with threads.

Long queries: a TAC query can hold thousands of distinct terms, and Lucene refuses a boolean
query of more than ``IndexSearcher.getMaxClauseCount()`` clauses (1024 by default) with
``TooManyClauses``. We raise that limit to ``bm25.max_clauses`` (default 65536) before searching,
so every query term counts as in a bag-of-words BM25 over the full text; nothing is truncated.
A query with even more distinct analysed terms fails with an error naming the query and the
setting to raise.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from .. import jvm  # noqa: F401  (Java 21 and the JVM before pyserini)

log = logging.getLogger(__name__)


def build_index(units_dir: Path, out: Path, threads: int = 2) -> dict:
    """Index ``units_dir/docs/*.jsonl`` into ``out`` with Anserini's IndexCollection."""
    from jnius import autoclass

    index_collection = autoclass("io.anserini.index.IndexCollection")
    args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(Path(units_dir) / "docs"), "-index", str(out), "-threads", str(int(threads)),
            "-storeRaw", "-quiet"]
    t0 = time.perf_counter()
    index_collection.main(args)
    seconds = time.perf_counter() - t0
    n = index_size(out)
    return {"index_seconds": round(seconds, 3), "indexed_units": n, "anserini_args": args}


def index_size(index_dir: Path) -> int:
    from jnius import autoclass

    reader = autoclass("io.anserini.index.IndexReaderUtils").getReader(str(index_dir))
    try:
        return int(reader.numDocs())
    finally:
        reader.close()


def set_max_clauses(n: int) -> None:
    from jnius import autoclass

    autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(int(n))


def _raise_for_failing_query(searcher, topics: dict, ids: list, max_clauses: int, batch_error: Exception):
    """Re-run a failed batch one query at a time to name the query and the cause."""
    for q in ids:
        try:
            searcher.search(topics[q], k=1)
        except Exception as e:
            msg = str(e)
            if "TooManyClauses" in msg or "maxClauseCount" in msg or "too many clauses" in msg.lower():
                raise RuntimeError(f"query {q!r} has more than bm25.max_clauses={max_clauses} distinct terms. Fix: raise "
                                   f"bm25.max_clauses or use a shorter query view.") from e
            raise RuntimeError(f"BM25 search failed on query {q!r}: {msg.splitlines()[0]}") from e
    raise batch_error


def search(index_dir: Path, topics: dict[str, str], k1: float, b: float, depth: int, threads: int = 2,
           max_clauses: int = 65536, batch: int = 256):
    """Batch BM25 search. Returns (run table, seconds spent searching, queries with no text)."""
    from pyserini.search.lucene import LuceneSearcher

    from ..runs import from_hits

    import pandas as pd
    from tqdm.auto import tqdm

    if not list(Path(index_dir).glob("segments_*")):
        from ..store import MissingFiles

        raise MissingFiles(f"Lucene index {index_dir} has no segments file. Fix: delete {Path(index_dir).parent} "
                                f"and run again to rebuild it.")
    set_max_clauses(max_clauses)
    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(float(k1), float(b))
    qids = [q for q, t in topics.items() if t.strip()]
    empty = [q for q, t in topics.items() if not t.strip()]
    parts, seconds = [], 0.0
    for i in tqdm(range(0, len(qids), batch), desc="bm25 search", unit=" batch", disable=None, mininterval=2):
        ids = qids[i:i + batch]
        t0 = time.perf_counter()
        try:
            hits = searcher.batch_search([topics[q] for q in ids], ids, k=int(depth), threads=int(threads))
        except Exception as e:  # a failure inside Anserini's thread pool only says "queryCount != completed"
            _raise_for_failing_query(searcher, topics, ids, max_clauses, e)
        seconds += time.perf_counter() - t0
        parts.append(from_hits(hits))
    searcher.close()
    run = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["query_id", "doc_id", "score"])
    return run, seconds, empty


class BM25:
    """Lucene BM25: an Anserini index of the units, searched with ``bm25.k1`` / ``bm25.b``."""

    name = "bm25"
    tokenizer = "words"

    def index(self, exp, units):
        from ..store import Artifact

        art = Artifact("lucene", {"generator": "DefaultLuceneDocumentGenerator", "analyzer": "default"}, (units,))
        return exp.ensure(art, lambda tmp: build_index(exp.store.path(units), tmp / "index", exp.cfg.index.threads),
                          "BM25 index")

    def run_params(self, exp) -> dict:
        return {"k1": float(exp.cfg.bm25.k1), "b": float(exp.cfg.bm25.b)}

    def search(self, exp, index, topics, params):
        return search(exp.store.path(index) / "index", topics, params["k1"], params["b"], params["depth"],
                      exp.cfg.search.threads, exp.cfg.bm25.max_clauses)


BACKEND = BM25()
