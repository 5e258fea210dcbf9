"""The harness's overhead over Anserini's SearchCollection: same index, topics, k and threads.

The harness's BM25 search *is* SearchCollection, called in-process, plus writing the topics and
reading the run back; this ratio measures that overhead (1.0: none), not a faster search. Ratio =
harness seconds / SearchCollection seconds. Both run in one JVM, after one warm-up each,
alternating, best of ``--rounds``; also checks that the two rankings are identical (every
query, document and score).
"""

import argparse
import tempfile
from pathlib import Path

from _util import add_quick, dataset, report, timer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--view", default="TA")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up; the best of each counts")
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.depth = 1, 100
    from harness import jvm, passages  # jvm: the JVM on Anserini's jar, before anything reaches for jnius
    from harness import lucene as lucene_index
    from harness.backends import bm25 as lucene
    from harness.data import views as V
    from harness.data.qrels import write_trec_topics
    from harness.runs import read_trec

    tmp = Path(tempfile.mkdtemp(prefix="bench-bm25-"))
    ds, name = dataset(tmp, a.quick)
    passages.write_units(passages.units(V.target_texts(ds.corpus, a.view), None), tmp / "units")
    lucene_index.build_index(tmp / "units", tmp / "index", a.threads)
    topics = V.query_texts(ds.queries, a.view)
    write_trec_topics(topics, tmp / "topics.tsv")
    sc = jvm.autoclass("io.anserini.search.SearchCollection")
    # Anserini alone, as a user would run it: the same index, topics, BM25 and threads
    args = lucene.collection_args(tmp / "index", tmp / "topics.tsv", tmp / "anserini.run", 0.9, 0.4, a.depth, a.threads)
    t = {"harness": [], "anserini": []}
    for rep in range(1 + a.rounds):  # round 0 warms both up; then the best of each, alternating
        with timer(times := {}, "harness"):
            run, _, _ = lucene.search(tmp / "index", topics, 0.9, 0.4, a.depth, a.threads)
        with timer(times, "anserini"):
            sc.main(args)
        if rep:
            for k in t:
                t[k].append(times[k])
    t = {k: min(v) for k, v in t.items()}
    theirs = read_trec(tmp / "anserini.run")
    key = ["query_id", "doc_id"]
    same = run.sort_values(key).reset_index(drop=True).equals(theirs.sort_values(key).reset_index(drop=True))
    report(
        "bm25 search overhead harness/SearchCollection",
        t["harness"] / t["anserini"],
        f"{len(topics)} queries of {name} ({a.view}), depth {a.depth}, {a.threads} threads: harness "
        f"{t['harness']:.2f}s, SearchCollection {t['anserini']:.2f}s; identical rankings: {same}",
    )


if __name__ == "__main__":
    main()
