"""Synthetic DAPFAM-format text at any size, for benchmarks and the cost calibration.

Not a retrieval benchmark (that is :mod:`harness.data.mini`): words are drawn from a Zipf law over
a fixed vocabulary of 50,000 made-up words, so that posting lengths (what BM25 search and Lucene
indexing cost) grow with the corpus as in real text. ``bench/dapfam_scale.py`` and
:func:`harness.cost.calibrate` use this one generator, so an estimate calibrated on a small
corpus of it can be checked against a full-size run of it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from . import schema as S

VOCABULARY = 50_000
ZIPF = 1.2
CODES = ("A61", "B01", "C07", "G06", "H04", "F16")
CHARS_PER_WORD = 7  # made-up words of 3-10 letters and a space


@lru_cache(maxsize=4)
def vocabulary(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return np.array(["".join(rng.choice(letters, int(rng.integers(3, 11)))) for _ in range(VOCABULARY)])


def texts(n: int, words: int, rng: np.random.Generator, vocab_seed: int = 0) -> list[str]:
    """``n`` texts of ``words`` Zipf-distributed words each."""
    vocab = vocabulary(vocab_seed)
    return [" ".join(r) for r in vocab[rng.zipf(ZIPF, size=(n, words)) % len(vocab)]]


def write_dataset(
    folder: Path, families: int, chars: int, queries: int, query_chars: int, seed: int = 0, batch: int = 500
) -> int:
    """A DAPFAM-format folder (corpus.parquet streamed in batches, queries.parquet, qrels_all.parquet)
    of ``families`` families of about ``chars`` characters of full text and ``queries`` queries of
    about ``query_chars`` characters of title + abstract + claims. Returns the corpus characters."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    codes = np.array(CODES)
    writer, total = None, 0
    for start in range(0, families, batch):
        n = min(batch, families - start)
        ids = [f"FAM{start + i:07d}" for i in range(n)]
        desc = texts(n, chars // CHARS_PER_WORD, rng, seed)
        total += sum(len(d) for d in desc)
        table = pa.table(
            {
                S.DOC_ID: ids,
                S.TITLE: ["title " + i for i in ids],
                S.ABSTRACT: [d[:1000] for d in desc],
                S.CLAIMS: [d[1000:5000] for d in desc],
                S.DESCRIPTION: [d[5000:] for d in desc],
                S.IPC3: [[str(codes[(start + i) % len(codes)])] for i in range(n)],
            }
        )
        writer = writer or pq.ParquetWriter(folder / "corpus.parquet", table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    qids = [f"Q{i:05d}" for i in range(queries)]
    text = texts(queries, query_chars // CHARS_PER_WORD, rng, seed)
    pq.write_table(
        pa.table(
            {
                S.QUERY_ID: qids,
                S.TITLE: [t[:80] for t in text],
                S.ABSTRACT: [t[80:1000] for t in text],
                S.CLAIMS: [t[1000:] for t in text],
                S.KEYWORDS: [""] * queries,
                S.IPC3: [[str(codes[i % len(codes)])] for i in range(queries)],
            }
        ),
        folder / "queries.parquet",
    )
    rel = [(i, int(d)) for i in range(queries) for d in rng.choice(families, min(5, families), replace=False)]
    pq.write_table(
        pa.table(
            {
                S.QUERY_ID: [qids[i] for i, _ in rel],
                S.DOC_ID: [f"FAM{d:07d}" for _, d in rel],
                S.RELEVANCE: [1] * len(rel),
                S.DOMAIN: ["IN" if i % len(codes) == d % len(codes) else "OUT" for i, d in rel],
            }
        ),
        folder / "qrels_all.parquet",
    )
    return total
