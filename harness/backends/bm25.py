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

import itertools
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from .. import env, shards, stage
from ..artifact import Artifact
from ..data.qrels import write_trec_topics
from ..lucene import IndexBuildError, index_file, index_size, index_streaming  # noqa: F401  (re-exported: harness.backends.bm25.index_file ...)
from ..query_reduction import params_of, reduce_topics
from ..runs import read_trec
from ..stage import Context, Stage, register
from ..store import MissingFiles
from . import SearchError

log = logging.getLogger(__name__)

# Versions of this module's builders (harness.env): bump when a change alters what they write.
INDEX_VERSION = 1
SEARCH_VERSION = 1


def set_max_clauses(n: int) -> None:
    from ..jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(int(n))


def _raise_for_failing_query(
    index_dir, topics: dict, ids: list, k1: float, b: float, max_clauses: int, batch_error: Exception | None
):
    """Re-run queries one at a time (pyserini's searcher) to name a failing query and the cause.
    Queries that run and retrieve nothing are fine; one that retrieves what the batch lost is not.
    ``batch_error`` (if any) is raised when no single query fails."""
    from ..jvm import start  # starts the JVM on import: deferred (harness.jvm)

    start()  # Java 21 and the JVM before pyserini (harness.jvm)
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(float(k1), float(b))
    try:
        for q in ids:
            try:
                hits = searcher.search(topics[q], k=1)
            except Exception as e:
                msg = str(e)
                if "TooManyClauses" in msg or "maxClauseCount" in msg or "too many clauses" in msg.lower():
                    raise SearchError(
                        f"query {q!r} has more than bm25.max_clauses={max_clauses} distinct terms. Fix: "
                        f"raise bm25.max_clauses or use a shorter query view."
                    ) from e
                raise SearchError(f"BM25 search failed on query {q!r}: {msg.splitlines()[0]}") from e
            if batch_error is None and hits:
                raise SearchError(
                    f"BM25 search lost query {q!r}: Anserini's SearchCollection wrote no hits for it, "
                    f"though it has some. Fix: see the Java log above; rerun to search again."
                )
    finally:
        searcher.close()
    if batch_error is not None:
        raise batch_error


def search(
    index_dir: Path,
    topics: dict[str, str],
    k1: float,
    b: float,
    depth: int,
    threads: int = 2,
    max_clauses: int = 65536,
    prf: dict | None = None,
):
    """BM25 search of every topic. Returns (run table, seconds spent searching, queries with no text).

    Runs Anserini's own ``SearchCollection`` in this JVM, writing a TREC run file that is read
    back: pyserini's ``batch_search`` builds a Python result object per hit, which at depth 1000
    costs more than the search (``bench/bm25_search.py`` measures what is left). Same analyzer, query
    generator (bag of words), similarity and tie-breaking (score, then doc id), so the rankings are
    Anserini's. Topics are written in Anserini's TSV format, white space folded, which analyses to
    the same terms. ``prf`` (:func:`prf_params`) adds Anserini's RM3 or Rocchio reranker, the same
    classes pyserini's ``set_rm3`` / ``set_rocchio`` use (``tests/test_levers.py`` checks parity)."""

    from ..jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    if not list(Path(index_dir).glob("segments_*")):
        raise MissingFiles(
            f"Lucene index {index_dir} has no segments file. Fix: delete {Path(index_dir).parent} "
            f"and run again to rebuild it."
        )
    set_max_clauses(max_clauses)
    qids = [q for q, t in topics.items() if t.strip()]
    empty = [q for q, t in topics.items() if not t.strip()]
    with tempfile.TemporaryDirectory(prefix="bm25-search-") as tmp:
        topics_file, run_file = Path(tmp) / "topics.tsv", Path(tmp) / "run.trec"
        write_trec_topics({q: topics[q] for q in qids}, topics_file)
        args = collection_args(index_dir, topics_file, run_file, k1, b, depth, threads) + prf_args(prf)
        if qids and not _WARM:
            warm_up(index_dir, {q: topics[q] for q in qids[:WARM_QUERIES]}, k1, b, depth, threads, prf, Path(tmp))
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


# Query time is search time: the first search of a JVM also loads Anserini's search classes and
# runs cold code until the JIT compiles it (the first row of a sweep measured 59 ms/query against
# 11-15 for the same kind of search later). So the first search of a process first runs, untimed,
# the first WARM_QUERIES of its own topics at its own settings; every timed search is then warm.
WARM_QUERIES = 20
_WARM = False


def warm_up(index_dir: Path, topics: dict[str, str], k1, b, depth, threads, prf, tmp: Path) -> None:
    """One untimed SearchCollection run over a few topics (see :data:`WARM_QUERIES`)."""
    global _WARM
    from ..jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    write_trec_topics(topics, tmp / "warm-topics.tsv")
    args = collection_args(index_dir, tmp / "warm-topics.tsv", tmp / "warm.run", k1, b, depth, threads) + prf_args(prf)
    try:
        autoclass("io.anserini.search.SearchCollection").main(args)
    except Exception:  # noqa: BLE001  (a failing query is found and named by the timed search)
        pass
    _WARM = True


def collection_args(index_dir, topics_file, run_file, k1, b, depth, threads) -> list[str]:
    """SearchCollection's arguments: one BM25 configuration, ``threads`` queries at a time.

    In Anserini, ``-threads`` is the pool that runs queries; ``-parallelism`` runs parameter
    configurations side by side (its usage text says otherwise). With one configuration per call,
    ``-parallelism`` above 1 only idles: an earlier version passed ``-threads 1 -parallelism N``
    and searched on one core."""
    return [
        "-index",
        str(index_dir),
        "-topics",
        str(topics_file),
        "-topicReader",
        "TsvString",
        "-output",
        str(run_file),
        "-bm25",
        "-bm25.k1",
        repr(float(k1)),
        "-bm25.b",
        repr(float(b)),
        "-hits",
        str(int(depth)),
        "-threads",
        str(int(threads)),
        "-parallelism",
        "1",
        "-runtag",
        "bm25",
    ]


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
        return [
            "-rm3",
            "-rm3.fbTerms",
            str(prf["fb_terms"]),
            "-rm3.fbDocs",
            str(prf["fb_docs"]),
            "-rm3.originalQueryWeight",
            repr(prf["original_query_weight"]),
        ]
    return [
        "-rocchio",
        "-rocchio.topFbTerms",
        str(prf["fb_terms"]),
        "-rocchio.topFbDocs",
        str(prf["fb_docs"]),
        "-rocchio.alpha",
        repr(prf["alpha"]),
        "-rocchio.beta",
        repr(prf["beta"]),
    ]


def index_shard(tmp: Path, spec: dict, encoder=None) -> dict:
    """Index the units of one shard with Anserini (its own Lucene index, the shard's units only)."""
    units_dir = Path(spec["units"])
    lo, hi = shards.span(spec["shard"], spec["shards"], shards.units_count(units_dir))
    part = tmp / "units"
    (part / "docs").mkdir(parents=True)
    with (
        open(units_dir / "docs" / "units.jsonl", encoding="utf-8") as f,
        open(part / "docs" / "units.jsonl", "w", encoding="utf-8") as g,
    ):
        g.writelines(itertools.islice(f, lo, hi))
    (part / "meta.json").write_text(json.dumps({"units": hi - lo}))
    meta = index_file(part, tmp, spec["threads"], spec["docvectors"])
    shutil.rmtree(part)
    return {**meta, "units": hi - lo, "shard": spec["shard"], "shards": spec["shards"], "first_unit": lo}


def merge_shards(tmp: Path, shard_dirs: list[Path]) -> dict:
    """One Lucene index from the shards' (``IndexWriter.addIndexes``: their segments copied as they
    are, so every statistic BM25 reads, document count, lengths, document frequencies, is the
    whole corpus's)."""
    from ..jvm import autoclass, cast  # starts the JVM on Anserini's jar: deferred (harness.jvm)

    file, fs = autoclass("java.io.File"), autoclass("org.apache.lucene.store.FSDirectory")
    writer_cls, config = (
        autoclass("org.apache.lucene.index.IndexWriter"),
        autoclass("org.apache.lucene.index.IndexWriterConfig"),
    )
    t0 = time.perf_counter()
    metas = [json.loads((d / "meta.json").read_text()) for d in shard_dirs]
    writer = writer_cls(fs.open(file(str(tmp / "index")).toPath()), config())
    try:
        writer.addIndexes(
            *[cast("org.apache.lucene.store.Directory", fs.open(file(str(d / "index")).toPath())) for d in shard_dirs]
        )
        writer.commit()
    finally:
        writer.close()
    n = index_size(tmp / "index")
    written = sum(m["units"] for m in metas)
    if n != written:
        raise IndexBuildError(f"the merged BM25 index holds {n} units, its shards {written}. Nothing was committed.")
    return {
        "indexed_units": n,
        "shards": len(shard_dirs),
        "shard_index_seconds": [m["index_seconds"] for m in metas],  # (the rows count the shards' own)
        "merge_seconds": round(time.perf_counter() - t0, 3),
    }


class BM25:
    """Lucene BM25: an Anserini index of the units, searched with ``bm25.k1`` / ``bm25.b``."""

    name = "bm25"
    tokenizer = "words"
    streams_units = True  # its units are written while they are indexed (index_streaming)

    def index(self, ctx: Context, units: Artifact) -> Artifact:
        params: dict[str, str | bool] = {"generator": "DefaultLuceneDocumentGenerator", "analyzer": "default"}
        docvectors = ctx.cfg.prf is not None  # only PRF experiments pay for document vectors
        if docvectors:
            params["docvectors"] = True
        threads, source = ctx.cfg.index.threads, ctx.store.path(units)
        if shards.count(ctx.cfg) > 1:  # indexed in shards, then merged (harness.shards)
            ctx.build_now(units)  # the shards read finished units
            spec = {"threads": int(threads), "docvectors": docvectors}
            parts = shards.build(
                ctx, stage.LUCENE_SHARD, units, params, env.lucene(INDEX_VERSION), spec, index_shard, "BM25 index shard"
            )
            art = Artifact(stage.LUCENE, {**params, "shards": len(parts)}, tuple(parts), env.lucene(INDEX_VERSION))
            return ctx.ensure(art, shards.merged(ctx.store, parts, merge_shards), "BM25 index (merged shards)")
        art = Artifact(stage.LUCENE, params, (units,), env.lucene(INDEX_VERSION))

        def build(tmp):
            if ctx.store.exists(units):
                return index_file(source, tmp, threads, docvectors)
            return index_streaming(source, lambda sink: ctx.build_now(units, sink), tmp, threads, docvectors)

        ctx.ensure(art, build, "BM25 index")
        ctx.build_now(units)  # reused, or built just now; built anyway if only the index was cached
        return art

    def search_env(self, ctx: Context) -> dict:
        return env.lucene(SEARCH_VERSION)

    def run_params(self, ctx: Context) -> dict:
        out: dict = {"k1": float(ctx.cfg.bm25.k1), "b": float(ctx.cfg.bm25.b)}
        prf = prf_params(ctx.cfg.prf)
        if prf:
            out["prf"] = prf

        reduction = params_of(ctx.cfg.get("query_reduction"))
        if reduction:
            out["query_reduction"] = reduction
        return out

    def search(self, ctx: Context, index: Artifact, topics: dict[str, str], params: dict):
        """BM25 search; with ``query_reduction``, of the reduced topics, its time counted in the
        search's (it is part of each query's cost)."""
        index_dir = ctx.store.path(index) / "index"
        reduced = params.get("query_reduction")
        t0 = time.perf_counter()
        if reduced:
            topics, summary = reduce_topics(index_dir, topics, reduced["method"], reduced["n_terms"])
            log.info("query reduction %s: %s", reduced, summary)
        reduce_seconds = time.perf_counter() - t0
        run, seconds, empty = search(
            index_dir,
            topics,
            params["k1"],
            params["b"],
            params["depth"],
            ctx.cfg.search.threads,
            ctx.cfg.bm25.max_clauses,
            params.get("prf"),
        )
        return run, seconds + reduce_seconds, empty


BACKEND = BM25()


STAGE = register(
    Stage(
        stage.LUCENE,
        "indexes",
        "BM25 indexes",
        INDEX_VERSION,
        index=True,
        cost="bm25_index",
        timings={"index_seconds": ("index_seconds", "build_seconds")},
    )
)
