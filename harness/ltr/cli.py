"""The command line, ``python -m harness.ltr identity SCORES_KEY``: the identity check of a results row's learned ranker."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .. import stage
from ..results import find, scores_dir
from ..store import default_results
from .identity import format_identity

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- command line
def learned_artifact(results: Path, scores_key: str) -> tuple[dict, Path | None]:
    """The results row of ``scores_key`` and the folder of its learned run (None: no learned ranker)."""
    row = find(results, scores_key)
    folder = scores_dir(results, row)
    runs = Path(results).resolve().parent
    meta = json.loads((folder / "meta.json").read_text())
    while meta["kind"] != stage.LTR_RUN:
        if meta["kind"] != stage.SCORES and stage.get(meta["kind"]).inner is None:  # no transform left
            return row, None
        parent = meta["parents"][0]
        folder = runs / parent["kind"] / parent["key"]
        meta = json.loads((folder / "meta.json").read_text())
    return row, folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.ltr", description="Learning to rank: checks of learned runs.")
    sub = ap.add_subparsers(dest="command", required=True)
    idc = sub.add_parser("identity", help="the identity check of a results row's learned ranker (module docstring)")
    idc.add_argument("scores_key", help="a results row: its scores key, run tag or experiment name")
    idc.add_argument("--results", type=Path, default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    a = ap.parse_args(argv)
    results = a.results or default_results()
    try:
        row, folder = learned_artifact(results, a.scores_key)
    except (OSError, ValueError) as e:
        print(f"identity check: cannot read the row {a.scores_key}: {e}", file=sys.stderr)
        return 2
    if folder is None:
        print(
            f"identity check: {row['tag']} has no learned ranker: nothing was learned from judgments, nothing to check"
        )
        return 0
    meta = json.loads((folder / "meta.json").read_text())
    if "identity" not in meta:
        print(
            f"identity check: {folder} was built before the identity check existed. Fix: rerun the row's "
            f"experiment (it builds a new learned run and checks it).",
            file=sys.stderr,
        )
        return 2
    for line in format_identity(meta["identity"]):
        print(line)
    flagged = meta["identity"].get("identifying", [])
    if flagged:
        print(f"identity check: {row['tag']}: identifying families {flagged} (allowed by ltr.allow_identifying)")
        return 1
    return 0
