"""Harness passaging + indexing (the BM25 index stage as an experiment runs it: units written
while IndexCollection indexes them) vs Anserini's IndexCollection alone on the same passages,
already split into one file per thread (so both sides index on ``--threads`` threads; the
harness passages the text as well). Ratio = harness / IndexCollection seconds."""

import argparse
import tempfile
from pathlib import Path

from _util import add_quick, compose, dataset, report, split_units, timer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length", type=int, default=128)
    add_quick(ap)
    a = ap.parse_args()
    from harness import (
        jvm,  # noqa: F401
        passages,
    )
    from harness import lucene as lucene_index
    from harness.backends import get
    from harness.experiment import Experiment
    from harness.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="bench-index-"))
    ds, name = dataset(tmp, a.quick)
    t = {}
    for rep in range(2):  # the first round warms up the JVM and the file cache for both
        store = Store(tmp / f"store{rep}")
        cfg = compose(
            "+experiment=passage_bm25",
            "target_fields=FULL",
            f"passage.length={a.length}",
            f"index.threads={a.threads}",
            f"root={store.root}",
        )
        exp = Experiment(cfg, ds, store)
        be = get("bm25")
        with timer(t, "harness"):
            units = passages.node(exp, be, build=False)
            be.index(exp, units)
        split = split_units(store.path(units), tmp / f"split{rep}", a.threads)
        with timer(t, "anserini"):
            lucene_index.build_index(split, tmp / f"index-anserini{rep}", a.threads)
    n = store.meta(units)["units"]
    report(
        "passaging+indexing harness/IndexCollection",
        t["harness"] / t["anserini"],
        f"{n} passages of {a.length} words ({name}, FULL), {a.threads} threads each: harness {t['harness']:.2f}s "
        f"(passaging streamed into IndexCollection), IndexCollection {t['anserini']:.2f}s (the same passages in "
        f"{a.threads} files)",
    )


if __name__ == "__main__":
    main()
