"""A results row in the never-shown view of a training dataset's judgments.

    python -m harness.never_shown ROW --train DIR
    python -m harness.never_shown ROW --like TUNED_ROW

Any row, learned or not: the scored positives whose document (matched by content) is not a
positive of DIR, the other positives taken out of the ranking, so that lifting documents DIR's
judgments cite is neither rewarded nor punished. How a configuration chosen on one split reads on
another that shares its corpus (docs/rechoice.md); a fine-tuned row carries the view of its own
training judgments already (:mod:`harness.tuned`); ``--like`` reads any row on that row's
never-shown positives (each query's own: a cross-fitted encoder's fold), so a plain run and a
fine-tuned one are compared on the same positives.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from . import data, leakage, stage, tuned
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
    how = ns.add_mutually_exclusive_group(required=True)
    how.add_argument("--train", help="a DAPFAM-format folder (or mini) whose positives count as shown")
    how.add_argument("--like", help="a fine-tuned row whose encoders' training positives count as shown")
    ns.add_argument("--results", default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    a = ap.parse_args(argv)
    results = a.results or default_results()
    row = find(results, a.row)
    cfg = OmegaConf.create(row["config"])
    try:
        ds = data.load(cfg.dataset, cfg.root)
        if a.like:
            like = find(results, a.like)
            shown = {q: set(d) for q, d in json.loads((shown_file(results, like)).read_text()).items()}
            what = f"the documents {like['tag']}'s encoders were trained on, per query"
        else:
            _, ds_a = data.load_training("--train", a.train, cfg.dataset, cfg.root)
            docs = set(leakage.shown_documents(leakage.judged(ds_a), leakage.judged(ds)))
            shown = dict.fromkeys(ds.query_ids, docs)
            what = f"{len(docs)} corpus documents that are positives of {a.train}"
    except (OSError, ValueError) as e:
        print(f"never-shown: cannot load the data ({e}). Fix: the row's dataset and --train / --like must be readable.")
        return 2
    view = tuned.never_shown_view(read_trec(row["run_file"]), ds, shown)
    print(f"never-shown view of {row['tag']} (shown: {what}):")
    for s, (mean, n) in view.items():
        print(f"  nDCG@100 {s:3s} {'-' if mean is None else f'{mean:.4f}'}  ({n} queries)")
    return 0


def shown_file(results, row: dict) -> Path:
    """The ``shown.json`` of the fine-tuned encoders a row's run was built with (its lineage, read
    from the store's ``meta.json`` files)."""
    runs = Path(results).resolve().parent
    root = runs.parent
    todo = [{"kind": stage.SCORES, "key": row["scores_key"]}]
    while todo:
        p = todo.pop()
        folder = root / stage.get(p["kind"]).root / p["kind"] / p["key"]
        if (folder / "shown.json").exists():
            return folder / "shown.json"
        if (folder / "meta.json").exists():  # (the data's own nodes have no folder)
            todo += json.loads((folder / "meta.json").read_text()).get("parents", [])
    raise ValueError(f"{row['tag']} has no fine-tuned encoder (no shown.json in its lineage)")


if __name__ == "__main__":
    sys.exit(main())
