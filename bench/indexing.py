"""Harness indexing (units written from the dataset, then indexed) vs Anserini's IndexCollection
alone on the same passages file. Ratio = harness / IndexCollection seconds."""
import argparse
import tempfile
from pathlib import Path

from _util import dataset, report, timer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length", type=int, default=128)
    a = ap.parse_args()
    from harness import jvm  # noqa: F401
    from jnius import autoclass

    from harness import passages
    from harness.backends import bm25 as lucene
    from harness.data import views as V

    tmp = Path(tempfile.mkdtemp(prefix="bench-index-"))
    ds, name = dataset(tmp)
    t = {}
    ic = autoclass("io.anserini.index.IndexCollection")
    splitter = passages.make_splitter("words", a.length, a.length)
    for rep in range(2):  # the first round warms up the JVM and the file cache for both
        with timer(t, "harness"):
            n = passages.write_units(passages.units(V.target_texts(ds.corpus, "FULL"), splitter), tmp / f"units{rep}")
            lucene.build_index(tmp / f"units{rep}", tmp / f"index-harness{rep}", a.threads)
        with timer(t, "anserini"):
            ic.main(["-collection", "JsonCollection", "-input", str(tmp / f"units{rep}" / "docs"), "-index",
                     str(tmp / f"index-anserini{rep}"), "-threads", str(a.threads), "-storeRaw", "-quiet"])
    report("indexing harness/IndexCollection", t["harness"] / t["anserini"],
           f"{n['units']} passages of {a.length} words ({name}, FULL): harness {t['harness']:.2f}s "
           f"(passaging + indexing), IndexCollection {t['anserini']:.2f}s (indexing the same file)")


if __name__ == "__main__":
    main()
