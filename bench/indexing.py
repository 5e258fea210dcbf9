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

    from harness import lucene, passages
    from harness.data import views as V

    tmp = Path(tempfile.mkdtemp(prefix="bench-index-"))
    ds, name = dataset(tmp)
    t = {}
    with timer(t, "harness"):
        splitter = passages.make_splitter("words", a.length, a.length)
        n = passages.write_units(passages.units(V.target_texts(ds.corpus, "FULL"), splitter), tmp / "units")
        lucene.build_index(tmp / "units", tmp / "index-harness", a.threads)
    ic = autoclass("io.anserini.index.IndexCollection")
    with timer(t, "anserini"):
        ic.main(["-collection", "JsonCollection", "-input", str(tmp / "units" / "docs"), "-index",
                 str(tmp / "index-anserini"), "-threads", str(a.threads), "-storeRaw", "-quiet"])
    report("indexing harness/IndexCollection", t["harness"] / t["anserini"],
           f"{n['units']} passages of {a.length} words ({name}, FULL): harness {t['harness']:.2f}s "
           f"(passaging + indexing), IndexCollection {t['anserini']:.2f}s (indexing the same file)")


if __name__ == "__main__":
    main()
