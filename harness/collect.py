"""Garbage collection of the artifact store: what nothing uses and no current key reaches.

A key sees the code and software that made an artifact (:mod:`harness.env`), so after an upgrade
(or a corpus, query or qrels edit) the old indexes, embeddings and runs are no longer reused, and
would stay on disk unseen. gc lists them, and deletes them only when asked (``--yes``). It never
deletes what is used:

* **what a results row or a report names**: a row's scores and run file, and every artifact they
  were built from (``meta.json`` parents, recursively), for every row of the results table
  (``results=``, default ``runs/results.jsonl`` under the root) and every report under
  ``runs/report/``, while the row is there. ``--drop-stale`` also removes the rows whose
  configuration the installed harness would now compute under another key (with the reports
  that show them), so that their artifacts can go and nothing points to a deleted file;
* **what is current**: each row's config planned again (``plan=True``: nothing is built), and the
  sweeps named on the command line (``sweep=NAME`` with the sweep's own overrides);
* **what a running process uses**: every artifact a live process has built or reused in this
  root is in its lease (:class:`harness.store.Lease`); gc deletes under the key's lock after
  reading the leases, and a process passes through that lock before it reuses an artifact;
* **what the store did not write**: only folders with the store's ``meta.json`` (its kind and key
  those of the folder) are artifacts; anything else under ``indexes/`` or ``runs/`` is listed as
  left alone.

A missing or unreadable results table makes gc refuse rather than take every artifact for garbage
(where there are artifacts: an empty root lists nothing).

    python -m harness.collect gc                        # list what would go, with sizes
    python -m harness.collect gc --yes                  # delete it
    python -m harness.collect gc sweep=paper            # also keep what the paper sweep would use
    python -m harness.collect gc --drop-stale --yes     # also drop rows the harness would re-key
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from . import data, stage
from .experiment import Experiment
from .results import ResultsError, drop_rows, read_rows
from .store import Store, StoreError, _size, _tree_bytes, default_root, live_leases
from .sweep import DatasetCache, expand, load_sweep, plan, split_args

log = logging.getLogger(__name__)

USAGE = (
    "usage: python -m harness.collect gc [--yes] [--drop-stale] [results=PATH] [sweep=NAME [overrides...]]\n"
    "  lists the artifacts nothing uses and no current key reaches; --yes deletes them (harness/collect.py)"
)


class GcError(RuntimeError):
    """gc cannot decide safely; the message names the file or argument and the fix."""


@dataclass
class Garbage:
    kind: str
    key: str
    path: Path
    bytes: int


@dataclass
class Plan:
    """What gc found: the garbage, and why the rest stays."""

    garbage: list[Garbage] = field(default_factory=list)
    unplanned: list[str] = field(default_factory=list)  # rows kept as recorded: they cannot be planned
    stale: list[dict] = field(default_factory=list)  # rows the installed harness computes under other keys
    in_use: list[str] = field(default_factory=list)  # unreachable, but a live process uses them
    foreign: list[Path] = field(default_factory=list)  # folders the store did not write
    reports: list[Path] = field(default_factory=list)  # reports that show a stale row
    results: Path | None = None  # the table the survey read, read again by delete() when it changes
    disk: dict = field(default_factory=dict)  # the survey's artifacts (parents), for what a new row names
    dropped: set = field(default_factory=set)  # scores keys whose rows --drop-stale removes


@dataclass
class Found:
    """A finished artifact on disk, with the parents its meta.json records."""

    kind: str
    path: Path
    parents: list[str]


def on_disk(store: Store) -> tuple[dict[str, Found], list[Path]]:
    """The store's finished artifacts by key (a folder with the store's ``meta.json`` whose kind
    and key are the folder's), and the other folders found there."""
    artifacts, foreign = {}, []
    for kind, top in stage.roots().items():
        folder = store.root / top / kind
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            if not p.is_dir() or p.name.startswith("."):  # temporary folders: the store's own sweep
                continue
            try:
                meta = json.loads((p / "meta.json").read_text())
            except (OSError, ValueError):
                meta = None
            if isinstance(meta, dict) and meta.get("kind") == kind and meta.get("key") == p.name:
                artifacts[p.name] = Found(kind, p, [q["key"] for q in meta.get("parents", [])])
            else:
                foreign.append(p)
    return artifacts, foreign


def recorded(key: str, disk: dict[str, Found], seen: set[str]) -> None:
    """Add ``key`` and its recorded ancestors (meta.json's parents) to ``seen``."""
    if key in seen or key not in disk:
        return
    seen.add(key)
    for parent in disk[key].parents:
        recorded(parent, disk, seen)


def named_keys(row: dict) -> list[str]:
    """The artifacts a row names itself: its scores and its run file's artifact."""
    keys = [str(row.get("scores_key", ""))]
    if row.get("run_file") and len(Path(str(row["run_file"])).parts) >= 3:
        keys.append(Path(str(row["run_file"])).parts[-2])
    return keys


def report_keys(store: Store) -> dict[Path, set[str]]:
    """The scores keys each report under ``runs/report/`` shows (its results.csv)."""
    out: dict[Path, set[str]] = {}
    for csv in sorted((store.root / "runs" / "report").glob("*/results.csv")):
        try:
            out[csv.parent] = set(pd.read_csv(csv, usecols=["scores_key"], dtype=str)["scores_key"].dropna())
        except (OSError, ValueError, KeyError):
            out[csv.parent] = set()
    return out


def read_results(results: Path) -> list[dict]:
    """The results table, or a refusal: without it every artifact would look unused."""
    if not results.is_file():
        raise GcError(
            f"gc: no results table at {results}: without it every artifact would look unused, so gc "
            f"deletes nothing. Fix: name the table your runs wrote with results=PATH (relative to the "
            f"root {results.parent.parent}), or set HARNESS_ROOT to the root they ran under."
        )
    try:
        return read_rows(results)
    except (ResultsError, OSError) as e:
        raise GcError(f"gc: {e} gc deletes nothing while the table cannot be read.") from None


def current(store: Store, rows: list[dict], sweep_args: Sequence[str]) -> tuple[set[str], dict[str, str], list[str]]:
    """Keys the installed harness computes for the rows' configs and the named sweeps;
    ``{recorded scores key: current scores key}`` per row planned; the rows that cannot be planned."""

    keys: set[str] = set()
    now: dict[str, str] = {}
    unplanned: list[str] = []
    datasets: dict[str, Any] = {}
    planned: dict[str, str] = {}  # config (YAML) -> its current scores key: each config planned once
    for row in rows:
        try:
            cfg = OmegaConf.create(row["config"])
            ckey = OmegaConf.to_yaml(cfg)
            if ckey not in planned:
                dkey = OmegaConf.to_yaml(cfg.dataset)
                if dkey not in datasets:
                    datasets[dkey] = data.load(cfg.dataset, store.root)
                    keys.update(_dataset_folder_keys(store, datasets[dkey]))
                exp = Experiment(cfg, datasets[dkey], store, plan=True)
                planned[ckey] = exp.scores().key
                keys.update(n.key for n in exp.nodes)
            now[row["scores_key"]] = planned[ckey]
        except Exception as e:  # noqa: BLE001  (a row that cannot be planned keeps what it recorded)
            unplanned.append(
                f"{row.get('tag', row.get('experiment'))}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            )
    if sweep_args:
        own, extra = split_args(sweep_args)
        cache = DatasetCache()
        nodes, _ = plan(expand(load_sweep(own.get("sweep", "default")), [*extra, f"root={store.root}"]), cache)
        keys.update(n.key for n in nodes)
        for ds in cache.loaded():
            keys.update(_dataset_folder_keys(store, ds))
    return keys, now, unplanned


def _dataset_folder_keys(store: Store, ds) -> set[str]:
    """A generated dataset (``mini``) lives in the store too: keep the folder it was read from."""
    path = Path((getattr(ds, "source", None) or {}).get("path", ""))
    if path.parent == store.folder(stage.DATASET, path.name).parent:
        return {path.name}
    return set()


def survey(store: Store, results: Path, sweep_args: Sequence[str] = (), drop_stale: bool = False) -> Plan:
    """What gc would delete and why everything else stays (nothing is changed).

    The live leases are read first, before the listing and the results table: a run that is still
    alive then keeps what its lease names, and a run that has finished by then wrote its row before
    it exited (``add_row``, then exit), so the table read after holds it. Read the other way round,
    a run that writes its row and exits between the two reads is in neither, and its run file
    would go while its row stays."""
    leased = live_leases(store.root)
    disk, foreign = on_disk(store)
    rows = read_results(results) if disk or results.exists() else []  # an empty root has nothing to lose
    keys, now, unplanned = current(store, rows, sweep_args)
    stale = [r for r in rows if r["scores_key"] in now and now[r["scores_key"]] != r["scores_key"]]
    dropped = {r["scores_key"] for r in stale} if drop_stale else set()
    reports = report_keys(store)
    gone_reports = [p for p, shown in reports.items() if shown & dropped]
    keep: set[str] = set(keys)
    for row in rows:
        if row["scores_key"] not in dropped:
            for k in named_keys(row):
                recorded(k, disk, keep)
    for p, shown in reports.items():
        if p not in gone_reports:
            for k in shown:
                recorded(k, disk, keep)
    plan = Plan(
        unplanned=unplanned,
        stale=stale,
        foreign=foreign,
        reports=gone_reports,
        results=results,
        disk=disk,
        dropped=dropped,
    )
    for key, found in sorted(disk.items(), key=lambda kv: (kv[1].kind, kv[0])):
        if key in keep:
            continue
        if key in leased:
            plan.in_use.append(f"{found.kind} {key} (lease {leased[key]})")
            continue
        plan.garbage.append(Garbage(found.kind, key, found.path, _tree_bytes(found.path)))
    return plan


class _Named:
    """What the results table and the reports name now (with recorded ancestors), read again only
    when the table's or a report's file changed since the last read."""

    def __init__(self, store: Store, plan: Plan):
        self.store, self.plan = store, plan
        self.stamp: tuple | None = None
        self.keys: set[str] = set()

    def _stamp(self):
        files = [self.plan.results] if self.plan.results else []
        files += sorted((self.store.root / "runs" / "report").glob("*/results.csv"))
        return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f and f.exists())

    def __contains__(self, key: str) -> bool:
        stamp = self._stamp()
        if stamp != self.stamp:
            self.stamp, self.keys = stamp, set()
            rows = read_rows(self.plan.results) if self.plan.results and self.plan.results.exists() else []
            for row in rows:
                if row["scores_key"] not in self.plan.dropped:
                    for k in named_keys(row):
                        recorded(k, self.plan.disk, self.keys)
            for shown in report_keys(self.store).values():
                for k in shown:
                    recorded(k, self.plan.disk, self.keys)
        return key in self.keys


def delete(store: Store, plan: Plan) -> list[Garbage]:
    """Delete the plan's garbage: each under its key's lock, after reading the leases again there
    (a process that started using it since the survey keeps it), then the results table and the
    reports where they changed since (a run that started after the survey, reused it and finished,
    wrote its row before it exited: the row keeps it). Returns what was deleted."""
    done: list[Garbage] = []
    named = _Named(store, plan)
    for g in plan.garbage:
        with store.key_lock(g.kind, g.key):  # never under a builder's or a reuser's feet
            if g.key in live_leases(store.root) or not g.path.is_dir() or g.key in named:
                continue
            trash = g.path.with_name(f".{g.key}.gc.tmp")
            g.path.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
            done.append(g)
    return done


def drop_stale(plan: Plan, results: Path) -> None:
    """Remove the stale rows from the results table and the reports that show them (before their
    artifacts go, so nothing points to a deleted file)."""
    drop_rows(results, {r["scores_key"] for r in plan.stale})
    for p in plan.reports:
        shutil.rmtree(p, ignore_errors=True)


def parse(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """gc's flags and ``results=``; the rest are a sweep's arguments. Errors are one line."""
    opts: dict[str, Any] = {"yes": False, "drop_stale": False, "results": None}
    rest: list[str] = []
    for a in argv:
        if a in ("--yes", "-y"):
            opts["yes"] = True
        elif a == "--drop-stale":
            opts["drop_stale"] = True
        elif a == "--dry-run":
            pass  # listing is what gc does without --yes
        elif a.startswith("-"):
            raise GcError(
                f"gc: unknown option {a!r}. Fix: --yes to delete (without it gc only lists), --drop-stale, "
                f"results=PATH, sweep=NAME with its overrides."
            )
        elif a.startswith("results="):
            opts["results"] = a.split("=", 1)[1]
        elif "=" in a:
            rest.append(a)
        else:
            raise GcError(
                f"gc: unknown argument {a!r}. Fix: --yes, --drop-stale, results=PATH, sweep=NAME with its overrides."
            )
    if rest and not any(a.startswith("sweep=") for a in rest):
        raise GcError(f"gc: {rest} are a sweep's overrides, but no sweep=NAME names the sweep. Fix: add sweep=NAME.")
    return opts, rest


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] != "gc":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        opts, rest = parse(argv[1:])
        store = Store(default_root())
        results = store.root / (opts["results"] or "runs/results.jsonl")
        plan = survey(store, results, rest, drop_stale=opts["drop_stale"])
        if opts["yes"] and opts["drop_stale"]:
            drop_stale(plan, results)
        deleted = delete(store, plan) if opts["yes"] else plan.garbage
    except (GcError, StoreError, ResultsError) as e:
        print(str(e), file=sys.stderr)
        return 2
    for g in deleted:
        print(f"{g.kind:<13} {g.key}  {_size(g.bytes):>10}  {g.path}")
    total = sum(g.bytes for g in deleted)
    verb = "deleted" if opts["yes"] else "unused (nothing deleted: --yes deletes them)"
    print(f"{len(deleted)} artifact(s), {_size(total)}, {verb}; root {store.root}")
    for k in plan.unplanned:
        print(f"kept what this row recorded, it cannot be planned again: {k}")
    for k in plan.in_use:
        print(f"kept, a running process uses it: {k}")
    for p in plan.foreign:
        print(f"left alone, not an artifact the store wrote: {p}")
    if plan.stale:
        tags = ", ".join(str(r.get("tag", r["scores_key"])) for r in plan.stale[:5])
        if opts["drop_stale"]:
            what = "dropped" if opts["yes"] else "would be dropped (with --yes)"
            print(f"{len(plan.stale)} stale row(s) {what}, and {len(plan.reports)} report(s) showing them: {tags}")
        else:
            print(
                f"kept {len(plan.stale)} stale row(s) and what they name (the installed harness computes them "
                f"under other keys): {tags}. --drop-stale drops them and their reports."
            )
    return 0


if __name__ == "__main__":  # python -m harness.collect gc [--yes]
    sys.exit(main(sys.argv[1:]))
