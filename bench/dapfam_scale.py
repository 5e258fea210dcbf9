"""Passaging and indexing a DAPFAM-sized synthetic corpus: peak memory and throughput.

DAPFAM's target corpus: 45,336 families, about 68k characters of full text each (~3 GB). The
corpus is generated once, streamed to parquet in batches (the generator never holds it), then
read through the harness's streaming views, split into passages and indexed by Anserini.
Prints peak RSS of this process (the in-process JVM included) as a ratio to the corpus's size on
disk, and MB/s of text for passaging and for indexing.

    python bench/dapfam_scale.py                 # full size (minutes, ~3 GB of text)
    python bench/dapfam_scale.py --families 3000 # the quick version make bench runs
"""
import argparse
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from _util import peak_rss_mib, report, timer


def write_corpus(path: Path, families: int, chars: int, seed: int = 0, batch: int = 500) -> int:
    from harness.data import schema as S

    rng = np.random.default_rng(seed)
    vocab = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), int(rng.integers(3, 11))))
                      for _ in range(50000)])
    words_per_doc = chars // 7
    writer, total = None, 0
    for start in range(0, families, batch):
        n = min(batch, families - start)
        ids = [f"FAM{start + i:07d}" for i in range(n)]
        w = vocab[rng.zipf(1.2, size=(n, words_per_doc)) % len(vocab)]
        desc = [" ".join(row) for row in w]
        total += sum(len(d) for d in desc)
        table = pa.table({S.DOC_ID: ids, S.TITLE: ["title " + i for i in ids], S.ABSTRACT: [d[:1000] for d in desc],
                          S.CLAIMS: [d[1000:5000] for d in desc], S.DESCRIPTION: [d[5000:] for d in desc],
                          S.IPC3: [["G06"]] * n})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", type=int, default=45336)
    ap.add_argument("--chars", type=int, default=68000)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus", default=None, help="reuse a corpus.parquet written by an earlier run")
    a = ap.parse_args()
    from harness import jvm  # noqa: F401
    from harness import passages
    from harness.backends import bm25 as lucene
    from harness.data import views as V
    from harness.data import schema as S
    from harness.data.dapfam import ParquetCorpus

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    t = {}
    # Generate in a child process, so that this process's peak RSS is the harness's alone.
    corpus = Path(a.corpus) if a.corpus else tmp / "corpus.parquet"
    if a.corpus:
        text_bytes = sum(len(t) for b in ParquetCorpus(corpus).iter_batches([S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION])
                         for c in (S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION) for t in b[c])
        a.families = pq.ParquetFile(corpus).metadata.num_rows
    else:
        with timer(t, "generate"), ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            text_bytes = pool.submit(write_corpus, corpus, a.families, a.chars).result()
    base = peak_rss_mib()
    with timer(t, "passage"):
        splitter = passages.make_splitter("words", a.length, a.length)
        n = passages.write_units(passages.units(V.target_texts(ParquetCorpus(corpus), "FULL", 256),
                                                splitter), tmp / "units")
    rss_passage = peak_rss_mib()
    with timer(t, "index"):
        lucene.build_index(tmp / "units", tmp / "index", a.threads)
    rss = peak_rss_mib()
    mb = text_bytes / 2**20
    report("peak RSS / corpus text size", rss / mb,
           f"{a.families} families x ~{a.chars} chars = {mb:.0f} MiB of text; peak RSS {rss:.0f} MiB "
           f"(before passaging {base:.0f}, after passaging {rss_passage:.0f})")
    report("passaging throughput (MiB/s)", mb / t["passage"], f"{n['units']} passages of {a.length} words in {t['passage']:.1f}s")
    report("indexing throughput (MiB/s)", mb / t["index"], f"{a.threads} threads, {t['index']:.1f}s")


if __name__ == "__main__":
    main()
