"""Query time means search time: the first BM25 experiment of a process against the same search
run again in that process. Ratio = the first row's ms/query (as the results table records it,
the JVM's start-up and JIT included before the search is warmed) / the same search's ms/query
run again, same index, topics, settings and threads (1.0: the first row measures searching only;
``harness.backends.bm25.WARM_QUERIES`` is what makes it so)."""

import argparse
import tempfile
from pathlib import Path

from _util import add_quick, compose, report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="searches again, the best counts")
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.rounds = 1
    from harness import data, stage
    from harness.backends import bm25
    from harness.data import views as V
    from harness.run import execute

    root = Path(tempfile.mkdtemp(prefix="bench-qtime-"))
    small = ["dataset.params.n_docs=60", "dataset.params.n_queries=8"] if a.quick else []
    cfg = compose("+experiment=doc_bm25", "query_fields=TAC", "target_fields=TAC", f"root={root}", *small)
    row = execute(cfg)  # the first search of this process, as a sweep's first row
    ds = data.load(cfg.dataset, root)
    topics = V.query_texts(ds.queries, "TAC")
    index = next(p for p in (root / "indexes" / stage.LUCENE).iterdir() if (p / "meta.json").exists()) / "index"
    again = []
    for _ in range(a.rounds):
        _, seconds, empty = bm25.search(index, topics, cfg.bm25.k1, cfg.bm25.b, cfg.search.depth, cfg.search.threads)
        again.append(seconds / max(1, len(topics) - len(empty)))
    first = row["seconds_per_query"]
    report(
        "bm25 ms/query first row/same search again",
        first / min(again),
        f"doc_bm25 TAC->TAC on {ds.name} ({len(topics)} queries, depth {cfg.search.depth}, {cfg.search.threads} "
        f"threads): first row {1000 * first:.1f} ms/query, again {1000 * min(again):.1f} ms/query (best of {a.rounds})",
    )


if __name__ == "__main__":
    main()
