"""A results row in the never-shown view of a training dataset's judgments.

    python -m harness.never_shown ROW --train DIR

Any row, learned or not: the scored positives whose document (matched by content) is not a
positive of DIR, the other positives taken out of the ranking, so that lifting documents DIR's
judgments cite is neither rewarded nor punished. How a configuration chosen on one split reads on
another that shares its corpus (docs/rechoice.md); a fine-tuned row carries the view of its own
training judgments already (:mod:`harness.tuned`).
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from . import data, leakage, tuned
from .data import views as V
from .results import find
from .runs import read_trec
from .store import default_results


def main(argv=None) -> int:
    """``python -m harness.never_shown ROW --train DIR``: any results row (learned or not) in
    the never-shown view of a training dataset's judgments: the scored positives whose document
    (by content) is not a positive there, the others taken out of the ranking. How a configuration
    chosen on one split is read on another that shares its corpus (docs/rechoice.md)."""
    ap = argparse.ArgumentParser(prog="python -m harness.never_shown", description=__doc__.split("\n\n")[0])
    ns = ap
    ns.add_argument("row", help="a results row: scores key, run tag or experiment name")
    ns.add_argument("--train", required=True, help="a DAPFAM-format folder (or mini) whose positives count as shown")
    ns.add_argument("--results", default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    a = ap.parse_args(argv)
    results = a.results or default_results()
    row = find(results, a.row)
    cfg = OmegaConf.create(row["config"])
    try:
        ds = data.load(cfg.dataset, cfg.root)
        ds_a = data.load(data.training_config(a.train, cfg.dataset), cfg.root)
    except (OSError, ValueError) as e:
        print(f"never-shown: cannot load the data ({e}). Fix: the row's dataset and --train must be readable.")
        return 2
    docs = dict(V.target_texts(ds.corpus, "TA"))
    shown_docs = set(tuned.shown_by(leakage.judged(ds_a), docs))
    view = tuned.never_shown_view(read_trec(row["run_file"]), ds, dict.fromkeys(ds.query_ids, shown_docs))
    print(f"never-shown view of {row['tag']} ({len(shown_docs)} corpus documents are positives of {a.train}):")
    for s, (mean, n) in view.items():
        print(f"  nDCG@100 {s:3s} {'-' if mean is None else f'{mean:.4f}'}  ({n} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
