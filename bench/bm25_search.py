"""Harness BM25 batch search vs Anserini's SearchCollection: same index, same topics, same k.

Ratio = harness seconds / SearchCollection seconds (below 1: the harness is faster). Both run
in one JVM, after one warm-up each; also checks that the two rankings agree.
"""
import argparse
import tempfile
from pathlib import Path

from _util import dataset, report, timer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--view", default="TA")
    a = ap.parse_args()
    from harness import jvm  # noqa: F401
    from jnius import autoclass

    from harness import passages
    from harness.backends import bm25 as lucene
    from harness.data import views as V
    from harness.data.qrels import write_trec_topics
    from harness.runs import read_trec

    tmp = Path(tempfile.mkdtemp(prefix="bench-bm25-"))
    ds, name = dataset(tmp)
    passages.write_units(passages.units(V.target_texts(ds.corpus, a.view), None), tmp / "units")
    lucene.build_index(tmp / "units", tmp / "index", a.threads)
    topics = V.query_texts(ds.queries, a.view)
    write_trec_topics(topics, tmp / "topics.tsv")
    sc = autoclass("io.anserini.search.SearchCollection")
    args = ["-index", str(tmp / "index"), "-topics", str(tmp / "topics.tsv"), "-topicReader", "TsvString",
            "-output", str(tmp / "anserini.run"), "-bm25", "-bm25.k1", "0.9", "-bm25.b", "0.4",
            "-hits", str(a.depth), "-threads", str(a.threads)]
    t = {}
    for rep in range(2):  # first round warms both up
        with timer(t, "harness"):
            run, _, _ = lucene.search(tmp / "index", topics, 0.9, 0.4, a.depth, a.threads)
        with timer(t, "anserini"):
            sc.main(args)
    theirs = read_trec(tmp / "anserini.run")
    q0 = ds.query_ids[0]
    top = lambda r: r[r.query_id == q0].sort_values("score", ascending=False).doc_id.tolist()[:10]
    same = top(run) == top(theirs)
    report("bm25 search harness/SearchCollection", t["harness"] / t["anserini"],
           f"{len(topics)} queries of {name} ({a.view}), depth {a.depth}, {a.threads} threads: harness "
           f"{t['harness']:.2f}s, SearchCollection {t['anserini']:.2f}s; same top 10: {same}")


if __name__ == "__main__":
    main()
