"""Garbage collection of the artifact store: what no current key reaches.

A key sees the code and software that made an artifact (:mod:`harness.env`), so after an upgrade
(or a corpus, query or qrels edit) the old indexes, embeddings and runs are no longer reused, and
would stay on disk unseen. Here, the *current* keys are those the installed harness computes, on
the data as it is now, for:

* every experiment of the results table (``runs/results.jsonl``): its recorded config is planned
  again (``plan=True``: nothing is built), and
* every experiment of the sweeps named on the command line (``sweep=NAME``, with the sweep's own
  overrides), so that the artifacts of a sweep still under way are kept.

Every artifact folder under ``indexes/<kind>/`` and ``runs/<kind>/`` that none of them reaches is
unreachable. A results row whose dataset cannot be loaded any more (a folder moved away) cannot be
planned again: the artifacts its scores recorded (``meta.json`` parents, recursively) are kept and
the row is named, so nothing is deleted because of a missing disk.

    python -m harness.store gc --dry-run              # list unreachable artifacts and sizes
    python -m harness.store gc                        # delete them
    python -m harness.store gc --dry-run sweep=paper  # also keep what the paper sweep would use
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from .store import ROOTS, Store, _size, _tree_bytes

log = logging.getLogger(__name__)


@dataclass
class Garbage:
    kind: str
    key: str
    path: Path
    bytes: int


def on_disk(store: Store) -> dict[str, tuple[str, Path]]:
    """Every finished or unfinished artifact folder: ``{key: (kind, path)}`` (temporary folders
    and locks are left to the store's own sweep)."""
    out = {}
    for kind, top in ROOTS.items():
        folder = store.root / top / kind
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.is_dir() and not p.name.startswith("."):
                out[p.name] = (kind, p)
    return out


def recorded(key: str, kinds: dict[str, tuple[str, Path]], seen: set[str]) -> None:
    """Add ``key`` and its recorded ancestors (meta.json's parents) to ``seen``."""
    if key in seen or key not in kinds:
        return
    seen.add(key)
    try:
        import json

        meta = json.loads((kinds[key][1] / "meta.json").read_text())
    except (OSError, ValueError):
        return
    for p in meta.get("parents", []):
        recorded(p["key"], kinds, seen)


def reachable(store: Store, results: Path, sweep_args: Sequence[str] = ()) -> tuple[set[str], list[str]]:
    """Keys the current code computes for the results table's experiments and the named sweeps,
    and the rows that could not be planned (whose recorded artifacts are kept instead)."""
    from . import data
    from .experiment import Experiment
    from .results import read_rows

    keys: set[str] = set()
    kept: list[str] = []
    disk = on_disk(store)
    datasets: dict[str, Any] = {}
    rows = read_rows(results) if results.exists() else []
    configs: dict[str, dict] = {}
    for row in rows:
        configs.setdefault(OmegaConf.to_yaml(OmegaConf.create(row["config"])), row)
    for row in configs.values():
        cfg = OmegaConf.create(row["config"])
        try:
            dkey = OmegaConf.to_yaml(cfg.dataset)
            if dkey not in datasets:
                datasets[dkey] = data.load(cfg.dataset, store.root)
                keys.update(_dataset_folder_keys(store, datasets[dkey]))
            exp = Experiment(cfg, datasets[dkey], store, plan=True)
            exp.scores()
            keys.update(n.key for n in exp.nodes)
        except Exception as e:  # noqa: BLE001  (a row that cannot be planned keeps what it recorded)
            kept.append(f"{row.get('tag', row.get('experiment'))}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            recorded(row.get("scores_key", ""), disk, keys)
    if sweep_args:
        from .sweep import DatasetCache, expand, load_sweep, plan, split_args

        own, extra = split_args(sweep_args)
        cache = DatasetCache()
        nodes, _ = plan(expand(load_sweep(own.get("sweep", "default")), [*extra, f"root={store.root}"]), cache)
        keys.update(n.key for n in nodes)
        for ds in cache.loaded():
            keys.update(_dataset_folder_keys(store, ds))
    return keys, kept


def _dataset_folder_keys(store: Store, ds) -> set[str]:
    """A generated dataset (``mini``) lives in the store too: keep the folder it was read from."""
    path = Path((getattr(ds, "source", None) or {}).get("path", ""))
    if path.parent == store.root / "indexes" / "dataset":
        return {path.name}
    return set()


def unreachable(store: Store, keys: set[str]) -> list[Garbage]:
    return sorted(
        (
            Garbage(kind, key, path, _tree_bytes(path))
            for key, (kind, path) in on_disk(store).items()
            if key not in keys
        ),
        key=lambda g: (g.kind, g.key),
    )


def collect(
    store: Store, results: Path, dry_run: bool = True, sweep_args: Sequence[str] = ()
) -> tuple[list[Garbage], list[str]]:
    """The unreachable artifacts (removed unless ``dry_run``) and the rows kept unplanned."""
    keys, kept = reachable(store, results, sweep_args)
    garbage = unreachable(store, keys)
    if not dry_run:
        for g in garbage:
            with store.key_lock(g.kind, g.key):  # never under a builder's feet
                trash = g.path.with_name(f".{g.key}.gc.tmp")
                g.path.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
    return garbage, kept


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] != "gc":
        print(
            "usage: python -m harness.store gc [--dry-run] [sweep=NAME [overrides...]]\n"
            "  lists (--dry-run) or deletes the artifacts no current key reaches (see harness/collect.py)",
            file=sys.stderr,
        )
        return 2
    dry = "--dry-run" in argv[1:]
    rest = [a for a in argv[1:] if a != "--dry-run"]
    bad = [a for a in rest if "=" not in a]
    if bad:
        print(f"gc: unknown argument(s) {bad}. Fix: --dry-run, and sweep=NAME with its overrides.", file=sys.stderr)
        return 2
    from .store import default_results, default_root

    store = Store(default_root())
    garbage, kept = collect(store, default_results(), dry_run=dry, sweep_args=rest)
    for g in garbage:
        print(f"{g.kind:<13} {g.key}  {_size(g.bytes):>10}  {g.path}")
    total = sum(g.bytes for g in garbage)
    verb = "unreachable (dry run: nothing deleted)" if dry else "deleted"
    print(f"{len(garbage)} artifact(s), {_size(total)}, {verb}; root {store.root}")
    for k in kept:
        print(f"kept what this row recorded, it cannot be planned again: {k}")
    return 0
