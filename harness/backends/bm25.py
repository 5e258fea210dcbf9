"""BM25 through pyserini and Anserini, in-process.

Indexes are built by Anserini's ``IndexCollection`` over the units' JSON lines (the class the
``pyserini.index.lucene`` CLI calls; the CLI itself cannot start the JVM here, see
:mod:`harness.jvm`), with the default English analyzer (Porter stemming, stopwords) and raw
documents stored. Search is Anserini's ``SearchCollection``, in-process (see :func:`search`).

Long queries: a TAC query can hold thousands of distinct terms, and Lucene refuses a boolean
query of more than ``IndexSearcher.getMaxClauseCount()`` clauses (1024 by default) with
``TooManyClauses``. We raise that limit to ``bm25.max_clauses`` (default 65536) before searching,
so every query term counts as in a bag-of-words BM25 over the full text; nothing is truncated.
A query with even more distinct analysed terms fails with an error naming the query and the
setting to raise.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .. import jvm  # noqa: F401  (Java 21 and the JVM before pyserini)

log = logging.getLogger(__name__)

# Versions of this module's builders (harness.env): bump when a change alters what they write.
INDEX_VERSION = 1
SEARCH_VERSION = 1


def build_index(units_dir: Path, out: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Index ``units_dir/docs/*.jsonl`` into ``out`` with Anserini's IndexCollection. ``docvectors``
    stores each unit's term vector (``-storeDocvectors``), which RM3 and Rocchio read."""
    from jnius import autoclass

    index_collection = autoclass("io.anserini.index.IndexCollection")
    args = ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(Path(units_dir) / "docs"), "-index", str(out), "-threads", str(int(threads)),
            "-storeRaw", "-quiet"] + (["-storeDocvectors"] if docvectors else [])
    t0 = time.perf_counter()
    index_collection.main(args)
    seconds = time.perf_counter() - t0
    n = index_size(out)
    return {"index_seconds": round(seconds, 3), "indexed_units": n, "anserini_args": args}


PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size
CHUNK_CHARS = 1 << 18


class _Pipes:
    """Text sink over named pipes, one per IndexCollection thread. Lines are gathered into chunks
    of whole lines (256 K characters) and each chunk goes to the pipe with the fewest unread bytes.

    Why: with Linux's default 64 KiB pipes (a few dozen passages) and lines dealt round robin, the
    writer and the indexing threads ran in lockstep (whenever one pipe was full the writer waited
    while the other indexer starved). Each pipe is enlarged to 1 MiB where the system allows it.
    ``bench/dapfam_scale.py`` measures the stage against IndexCollection (README)."""

    def __init__(self, paths: list[Path]):
        import fcntl

        self.fds: list[int] = []
        try:
            for p in paths:  # each open waits for its reader: IndexCollection opens them all at once
                self.fds.append(os.open(p, os.O_WRONLY))
                try:
                    fcntl.fcntl(self.fds[-1], fcntl.F_SETPIPE_SZ, PIPE_BYTES)
                except (AttributeError, OSError):  # not Linux, or over the user's pipe quota: default size
                    pass
        except BaseException:
            self.close()
            raise
        self.chunk: list[str] = []
        self.size = 0

    def write(self, line: str) -> None:
        self.chunk.append(line)
        self.size += len(line)
        if self.size >= CHUNK_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.chunk:
            return
        data = memoryview("".join(self.chunk).encode("utf-8"))
        self.chunk, self.size = [], 0
        fd = min(self.fds, key=_unread) if len(self.fds) > 1 else self.fds[0]
        while data:
            data = data[os.write(fd, data):]

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:  # a reader that went away: the indexing error is raised elsewhere
                pass
        self.fds = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:  # the last lines; after an error the readers only need EOF
                self.flush()
        finally:
            self.close()


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD); 0 where the system cannot tell."""
    import fcntl
    import struct
    import termios

    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def index_streaming(exp, units, tmp: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Write the units and index them at once. A Python thread writes each unit to the units
    artifact and, in chunks, to ``threads`` named pipes (:class:`_Pipes`); Anserini's
    IndexCollection (in this JVM, which releases the GIL) reads the pipes as its JsonCollection, one
    indexing thread per pipe, so passaging and indexing share the cores (``bench/dapfam_scale.py``
    compares the stage with IndexCollection; README). Units are the same; only Lucene's internal
    document order differs, which no ranking sees (ties are broken by document id). If another
    process builds the same units meanwhile, they are reused and indexed from disk."""
    source = exp.store.path(units)
    meta = _index_fed(lambda sink: exp.build_now(units, sink), source, tmp, threads, docvectors)
    if meta is None:  # nothing was written: the units were reused
        return index_file(source, tmp, threads, docvectors)
    return {**meta, "indexed_while_passaging": True}


def index_file(units_dir: Path, tmp: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Index finished units into ``tmp/index`` on ``threads`` threads. IndexCollection gives each
    input file one thread, and the units artifact is one file: its lines are dealt to ``threads``
    pipes instead, which indexes as fast as IndexCollection over the same lines split into files."""
    files = sorted((Path(units_dir) / "docs").glob("*.jsonl"))
    if int(threads) < 2 or len(files) != 1:
        return build_index(units_dir, tmp / "index", threads, docvectors)

    def copy(sink):
        with open(files[0], encoding="utf-8") as f, sink() as g:
            for line in f:
                g.write(line)

    return _index_fed(copy, units_dir, tmp, threads, docvectors)


def _index_fed(write, source: Path, tmp: Path, threads: int, docvectors: bool) -> dict | None:
    """IndexCollection over ``threads`` named pipes under ``tmp/feed`` while a Python thread runs
    ``write(sink)``; ``sink()`` opens the pipes (:class:`_Pipes`). Returns the index's metadata
    (its arguments naming the units folder ``source``, not the pipes), or None (and no index) when
    ``write`` returned without opening the sink. An error on either side is raised here, without a
    hang: a failed indexer breaks the writer's pipes. The pipes are removed before the index is
    committed."""
    import shutil
    import threading

    feed = tmp / "feed"
    (feed / "docs").mkdir(parents=True)
    fifos = [feed / "docs" / f"units-{i}.jsonl" for i in range(max(1, int(threads)))]
    for f in fifos:
        os.mkfifo(f)
    state = {"fed": False, "error": None, "abort": False}

    def sink():
        if state["abort"]:
            raise RuntimeError("indexing failed")
        state["fed"] = True
        return _Pipes(fifos)

    def produce():
        try:
            write(sink)
        except BaseException as e:  # noqa: BLE001  (raised in the main thread below)
            state["error"] = e
        finally:
            if not state["fed"]:  # nothing written (units reused or failed early): let the readers see EOF
                for f in fifos:
                    with open(f, "w"):
                        pass

    writer = threading.Thread(target=produce, name="units-writer", daemon=True)
    writer.start()
    try:
        try:
            meta = build_index(feed, tmp / "index", threads, docvectors)
        except BaseException:
            state["abort"] = True
            while writer.is_alive():  # unblock a writer waiting for a reader, then break its pipes
                for f in fifos:
                    os.close(os.open(f, os.O_RDONLY | os.O_NONBLOCK))
                writer.join(0.1)
            raise
        writer.join()
        if state["error"] is not None:
            raise state["error"]
        if not state["fed"]:
            shutil.rmtree(tmp / "index", ignore_errors=True)
            return None
        meta["anserini_args"] = [str(Path(source) / "docs") if a == str(feed / "docs") else a
                                 for a in meta["anserini_args"]]
        return {**meta, "pipes": len(fifos)}
    finally:
        shutil.rmtree(feed, ignore_errors=True)


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


def _raise_for_failing_query(index_dir, topics: dict, ids: list, k1: float, b: float, max_clauses: int,
                             batch_error: Exception | None):
    """Re-run queries one at a time (pyserini's searcher) to name a failing query and the cause.
    Queries that run and retrieve nothing are fine; one that retrieves what the batch lost is not.
    ``batch_error`` (if any) is raised when no single query fails."""
    from pyserini.search.lucene import LuceneSearcher

    from . import SearchError

    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(float(k1), float(b))
    try:
        for q in ids:
            try:
                hits = searcher.search(topics[q], k=1)
            except Exception as e:
                msg = str(e)
                if "TooManyClauses" in msg or "maxClauseCount" in msg or "too many clauses" in msg.lower():
                    raise SearchError(f"query {q!r} has more than bm25.max_clauses={max_clauses} distinct terms. Fix: "
                                      f"raise bm25.max_clauses or use a shorter query view.") from e
                raise SearchError(f"BM25 search failed on query {q!r}: {msg.splitlines()[0]}") from e
            if batch_error is None and hits:
                raise SearchError(f"BM25 search lost query {q!r}: Anserini's SearchCollection wrote no hits for it, "
                                  f"though it has some. Fix: see the Java log above; rerun to search again.")
    finally:
        searcher.close()
    if batch_error is not None:
        raise batch_error


def search(index_dir: Path, topics: dict[str, str], k1: float, b: float, depth: int, threads: int = 2,
           max_clauses: int = 65536, prf: dict | None = None):
    """BM25 search of every topic. Returns (run table, seconds spent searching, queries with no text).

    Runs Anserini's own ``SearchCollection`` in this JVM, writing a TREC run file that is read
    back: pyserini's ``batch_search`` builds a Python result object per hit, which at depth 1000
    costs more than the search (``bench/bm25_search.py`` measures what is left). Same analyzer, query
    generator (bag of words), similarity and tie-breaking (score, then doc id), so the rankings are
    Anserini's. Topics are written in Anserini's TSV format, white space folded, which analyses to
    the same terms. ``prf`` (:func:`prf_params`) adds Anserini's RM3 or Rocchio reranker, the same
    classes pyserini's ``set_rm3`` / ``set_rocchio`` use (``tests/test_levers.py`` checks parity)."""
    import tempfile

    from jnius import autoclass

    from ..data.qrels import write_trec_topics
    from ..runs import read_trec

    if not list(Path(index_dir).glob("segments_*")):
        from ..store import MissingFiles

        raise MissingFiles(f"Lucene index {index_dir} has no segments file. Fix: delete {Path(index_dir).parent} "
                           f"and run again to rebuild it.")
    set_max_clauses(max_clauses)
    qids = [q for q, t in topics.items() if t.strip()]
    empty = [q for q, t in topics.items() if not t.strip()]
    with tempfile.TemporaryDirectory(prefix="bm25-search-") as tmp:
        topics_file, run_file = Path(tmp) / "topics.tsv", Path(tmp) / "run.trec"
        write_trec_topics({q: topics[q] for q in qids}, topics_file)
        args = collection_args(index_dir, topics_file, run_file, k1, b, depth, threads) + prf_args(prf)
        t0 = time.perf_counter()
        try:
            autoclass("io.anserini.search.SearchCollection").main(args)
        except Exception as e:  # noqa: BLE001  (pyjnius' JavaException: find the query and say why)
            _raise_for_failing_query(index_dir, topics, qids, k1, b, max_clauses, e)
        seconds = time.perf_counter() - t0
        if not run_file.exists():
            _raise_for_failing_query(index_dir, topics, qids, k1, b, max_clauses, RuntimeError("no run written"))
        run = read_trec(run_file)
    missing = sorted(set(qids) - set(run["query_id"].unique()))
    if missing:  # SearchCollection logs a failing query and goes on: never let one pass as "no hits"
        _raise_for_failing_query(index_dir, topics, missing, k1, b, max_clauses, None)
    return run, seconds, empty


def collection_args(index_dir, topics_file, run_file, k1, b, depth, threads) -> list[str]:
    """SearchCollection's arguments: one BM25 configuration, ``threads`` queries at a time.

    In Anserini, ``-threads`` is the pool that runs queries; ``-parallelism`` runs parameter
    configurations side by side (its usage text says otherwise). With one configuration per call,
    ``-parallelism`` above 1 only idles: an earlier version passed ``-threads 1 -parallelism N``
    and searched on one core."""
    return ["-index", str(index_dir), "-topics", str(topics_file), "-topicReader", "TsvString", "-output",
            str(run_file), "-bm25", "-bm25.k1", repr(float(k1)), "-bm25.b", repr(float(b)), "-hits", str(int(depth)),
            "-threads", str(int(threads)), "-parallelism", "1", "-runtag", "bm25"]


def prf_params(p) -> dict | None:
    """The PRF settings that change a run (the ``prf`` config group), or None without PRF."""
    if p is None:
        return None
    out = {"method": str(p.method), "fb_terms": int(p.fb_terms), "fb_docs": int(p.fb_docs)}
    if out["method"] == "rm3":
        out["original_query_weight"] = float(p.original_query_weight)
    else:
        out.update(alpha=float(p.alpha), beta=float(p.beta))
    return out


def prf_args(prf: dict | None) -> list[str]:
    """SearchCollection's reranker options for :func:`prf_params`. Rocchio uses only the top
    documents (no negative feedback), as pyserini's ``set_rocchio`` does by default."""
    if not prf:
        return []
    if prf["method"] == "rm3":
        return ["-rm3", "-rm3.fbTerms", str(prf["fb_terms"]), "-rm3.fbDocs", str(prf["fb_docs"]),
                "-rm3.originalQueryWeight", repr(prf["original_query_weight"])]
    return ["-rocchio", "-rocchio.topFbTerms", str(prf["fb_terms"]), "-rocchio.topFbDocs", str(prf["fb_docs"]),
            "-rocchio.alpha", repr(prf["alpha"]), "-rocchio.beta", repr(prf["beta"])]


class BM25:
    """Lucene BM25: an Anserini index of the units, searched with ``bm25.k1`` / ``bm25.b``."""

    name = "bm25"
    tokenizer = "words"
    streams_units = True  # its units are written while they are indexed (index_streaming)

    def index(self, exp, units):
        from .. import env
        from ..store import Artifact

        params = {"generator": "DefaultLuceneDocumentGenerator", "analyzer": "default"}
        docvectors = exp.cfg.prf is not None  # only PRF experiments pay for document vectors
        if docvectors:
            params["docvectors"] = True
        art = Artifact("lucene", params, (units,), env.lucene(INDEX_VERSION))
        threads = exp.cfg.index.threads

        def build(tmp):
            if exp.store.exists(units):
                return index_file(exp.store.path(units), tmp, threads, docvectors)
            return index_streaming(exp, units, tmp, threads, docvectors)

        exp.ensure(art, build, "BM25 index")
        exp.build_now(units)  # reused, or built just now; built anyway if only the index was cached
        return art

    def search_env(self, exp) -> dict:
        from .. import env

        return env.lucene(SEARCH_VERSION)

    def run_params(self, exp) -> dict:
        out = {"k1": float(exp.cfg.bm25.k1), "b": float(exp.cfg.bm25.b)}
        prf = prf_params(exp.cfg.prf)
        if prf:
            out["prf"] = prf
        return out

    def search(self, exp, index, topics, params):
        return search(exp.store.path(index) / "index", topics, params["k1"], params["b"], params["depth"],
                      exp.cfg.search.threads, exp.cfg.bm25.max_clauses, params.get("prf"))


BACKEND = BM25()
