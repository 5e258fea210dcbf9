"""Regression files: what a reproduction should give, checked number by number.

    python -m harness.regress mini                                   # regressions/mini.yaml
    python -m harness.regress cacm-xdom path=../shared/data/cacm-xdom
    python -m harness.regress ./my-copy.yaml                         # a file, by its path
    python -m harness.regress all                                    # every file under regressions/

Anserini's regressions in this harness's terms. A file (``regressions/NAME.yaml``) names the data
(``dataset:`` overrides), the conditions (an experiment and its overrides, as a sweep's block
would give them) and, per condition, the counts and scores it should give, with a tolerance per
measure. Each condition runs through :mod:`harness.run`'s path: cached artifacts are reused, the
row goes to the results table. Then every value is printed on its own line:

* ``OK``: equal to the file's value at the file's precision (4 decimals);
* ``OK*``: not equal, within the measure's tolerance (a library or a platform moved a little);
* ``FAIL``: outside it, with the expected and the obtained number.

Exit status 1 on any FAIL, 2 when a regression cannot run (its data cannot be loaded, a key of
the file or an override is wrong), saying which and why before anything runs; 0 otherwise.

A file with ``published:`` holds numbers a paper reports (the reference is the value) rather than
numbers this harness computed; its tolerance says how close a reproduction must come, and a value
the file leaves ``null`` is printed as not given, never as OK; in a file of this harness's own
systems a ``null`` is a value no run has measured yet, printed as not measured. Published points are drawn on a
sweep's IN-vs-OUT plot when the sweep's rows are on that dataset (:func:`published_points`).

What was checked is recorded under ``<root>/runs/regressions/NAME.json`` (scores key -> condition,
expected, obtained, status), so the results table and page show, for each row a regression
covers, its expected value and status (:func:`annotate`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import yaml
from omegaconf import OmegaConf

from . import data, stage
from .config import ConfigError, check, compose
from .evaluate import canonical
from .experiment import run_experiment
from .files import write_json_atomic
from .results import add_row
from .run import user_errors  # the errors whose messages name the file or key and the fix
from .store import Store

log = logging.getLogger(__name__)

FOLDER = Path(__file__).resolve().parents[1] / "regressions"
SUBSETS = ("ALL", "IN", "OUT")
DECIMALS = 4  # the precision of the files' values: OK means equal at this precision
COUNTS = ("units", "families", "queries")
# A value a file leaves null: a paper's value the file does not have (published files), or a
# value no run has measured yet (the file's own systems). Never OK.
NOT_GIVEN, NOT_MEASURED = "not given", "not measured"


class RegressionError(ValueError):
    """A regression file that cannot be read; the message names the file, the key and the fix."""


@dataclass
class Condition:
    name: str
    overrides: list[str]
    counts: dict = field(default_factory=dict)
    scores: dict = field(default_factory=dict)  # measure -> subset -> expected (or None: not given)


@dataclass
class Regression:
    name: str
    path: Path
    description: str
    dataset: list[str]
    conditions: list[Condition]
    tolerance: dict[str, float]
    published: str | None = None  # the reference, when the values are a paper's

    def overrides(self, condition: Condition, extra: list[str]) -> list[str]:
        """The file's overrides then the command line's; a key the command line sets (``path=``
        becomes ``dataset.path=``) replaces the file's."""
        given = {o.split("=", 1)[0].lstrip("+") for o in extra}
        own = [o for o in [*self.dataset, *condition.overrides] if o.split("=", 1)[0].lstrip("+") not in given]
        return [*own, *extra]


# ------------------------------------------------------------------ reading files
def resolve(name: str) -> Path:
    """``NAME`` (a file of the regressions folder) or a file's path."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise RegressionError(f"{p}: no such regression file. Fix: give a file's path or one of {names()}.")
        return p
    f = FOLDER / f"{name}.yaml"
    if not f.is_file():
        raise RegressionError(f"regression {name!r}: no {f}. Fix: one of {names()}, 'all', or a file's path.")
    return f


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.yaml"))


class _UniqueKeys(yaml.SafeLoader):
    """YAML whose mappings refuse a key given twice (PyYAML keeps the last one silently: two
    conditions of one name would leave only the second, and a failing one could vanish)."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise RegressionError(
                f"line {key_node.start_mark.line + 1}: duplicate key {key!r}. Fix: give each key once "
                f"(rename one of the two)."
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

TOP_KEYS = {"description", "published", "dataset", "tolerance", "conditions"}
CONDITION_KEYS = {"command", "counts", "scores"}
# Measures whose values lie in [0, 1] (ir-measures' names): a score outside is a typo, not a number.
UNIT_RANGE = ("nDCG", "R@", "R(", "P@", "P(", "AP", "RR", "Success", "Judged", "Bpref", "Rprec", "iprec", "ERR")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def load(path: Path) -> Regression:
    """Read and check a regression file in full, before anything runs: types, ranges (a score in
    its measure's range, a finite tolerance >= 0, counts that are whole numbers), unknown and
    duplicate keys. Each error is one line naming the file, the key and the fix."""
    try:
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except RegressionError as e:
        raise RegressionError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise RegressionError(f"{path}: not YAML ({' '.join(str(e).split())}).") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("conditions"), dict) or not raw["conditions"]:
        raise RegressionError(
            f"{path}: no conditions. Fix: a mapping 'conditions: {{NAME: {{command: ..., scores: ...}}}}'."
        )
    unknown = sorted(set(map(str, raw)) - TOP_KEYS)
    if unknown:
        raise RegressionError(f"{path}: unknown key {unknown[0]!r}. Fix: use only {sorted(TOP_KEYS)}.")
    for key in ("description", "published"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise RegressionError(f"{path}: {key}: expected a string, got {raw[key]!r}.")
    tolerance = raw.get("tolerance") or {}
    if not isinstance(tolerance, dict):
        raise RegressionError(f"{path}: tolerance: expected a mapping of measure -> number, e.g. {{nDCG@100: 0.0005}}.")
    for measure, v in tolerance.items():
        if not _number(v) or v < 0:
            raise RegressionError(
                f"{path}: tolerance.{measure}: {v!r} is not a finite number >= 0. Fix: e.g. {measure}: 0.001."
            )
        if str(measure).startswith(UNIT_RANGE) and v >= 1:
            raise RegressionError(
                f"{path}: tolerance.{measure}: {v!r} accepts every value of a measure in [0, 1], so nothing "
                f"could FAIL. Fix: e.g. {measure}: 0.001."
            )
    conditions = []
    for cname, c in raw["conditions"].items():
        where = f"{path}: conditions.{cname}"
        if not isinstance(c, dict) or not isinstance(c.get("command"), str):
            raise RegressionError(f"{where}: no command. Fix: command: '+experiment=doc_bm25 query_fields=TA'.")
        extra = sorted(set(map(str, c)) - CONDITION_KEYS)
        if extra:
            raise RegressionError(f"{where}: unknown key {extra[0]!r}. Fix: use only {sorted(CONDITION_KEYS)}.")
        scores = c.get("scores") or {}
        if not isinstance(scores, dict):
            raise RegressionError(f"{where}.scores: expected a mapping of measure -> {{ALL, IN, OUT}}, got {scores!r}.")
        for measure, subsets in scores.items():
            if not isinstance(subsets, dict) or set(subsets) - set(SUBSETS):
                raise RegressionError(f"{where}.scores.{measure}: expected a mapping of ALL / IN / OUT -> value.")
            if measure not in tolerance:
                raise RegressionError(
                    f"{where}.scores.{measure}: no tolerance for {measure}. Fix: add it to tolerance."
                )
            bounded = str(measure).startswith(UNIT_RANGE)
            for subset, v in subsets.items():
                if v is None:
                    continue  # not given: printed so, never OK
                if not _number(v) or (bounded and not 0 <= v <= 1):
                    span = " in [0, 1]" if bounded else ""
                    raise RegressionError(
                        f"{where}.scores.{measure}.{subset}: {v!r} is not a number{span}. Fix: the expected "
                        f"value as a number (null where it is not known)."
                    )
        counts = c.get("counts") or {}
        if not isinstance(counts, dict):
            raise RegressionError(f"{where}.counts: expected a mapping, got {counts!r}.")
        strange = set(counts) - set(COUNTS)
        if strange:
            raise RegressionError(f"{where}.counts: {sorted(strange)} unknown. Fix: use {list(COUNTS)}.")
        for what, v in counts.items():
            values = v.items() if isinstance(v, dict) and what == "queries" else [(None, v)]
            for subset, n in values:
                if subset not in (None, *SUBSETS) or isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    key = f"{what}.{subset}" if subset else what
                    raise RegressionError(
                        f"{where}.counts.{key}: {n!r} is not a whole number >= 0. Fix: e.g. "
                        f"{'queries: {ALL: 185, IN: 182, OUT: 140}' if what == 'queries' else what + ': 1231'}."
                    )
        conditions.append(Condition(str(cname), c["command"].split(), counts, scores))
    dataset = raw.get("dataset") or []
    if isinstance(dataset, str):
        dataset = dataset.split()
    if not isinstance(dataset, list) or not all(isinstance(x, str) for x in dataset):
        raise RegressionError(f"{path}: dataset: expected a list of overrides, e.g. [dataset=local, dataset.path=DIR].")
    return Regression(
        name=Path(path).stem,
        path=Path(path),
        description=str(raw.get("description") or ""),
        dataset=list(dataset),
        conditions=conditions,
        tolerance={str(k): float(v) for k, v in tolerance.items()},
        published=raw.get("published"),
    )


# ------------------------------------------------------------------ checking values
def status(expected, got, tolerance: float) -> str:
    """``OK`` equal at the file's precision, ``OK*`` within tolerance, ``FAIL`` otherwise (or
    nothing obtained). Counts are integers: equal or FAIL."""
    if got is None or (isinstance(got, float) and got != got):
        return "FAIL"
    if isinstance(expected, int) and not isinstance(expected, bool):
        return "OK" if got == expected else "FAIL"
    if round(float(got), DECIMALS) == round(float(expected), DECIMALS):
        return "OK"
    return "OK*" if abs(float(got) - float(expected)) <= tolerance + 1e-12 else "FAIL"


def checks(reg: Regression, cond: Condition, row: dict, counts: dict) -> list[dict]:
    """One record per value the condition expects: what, expected, got, tolerance, status."""
    out = []
    for what, expected in cond.counts.items():
        got = counts.get(what)
        if isinstance(expected, dict):  # queries: per subset
            for s, e in expected.items():
                g = (got or {}).get(s)
                out.append({"value": f"{what}/{s}", "expected": e, "got": g, "tolerance": 0, "status": status(e, g, 0)})
        else:
            out.append(
                {"value": what, "expected": expected, "got": got, "tolerance": 0, "status": status(expected, got, 0)}
            )
    for measure, subsets in cond.scores.items():
        for s in SUBSETS:
            if s not in subsets:
                continue
            key, e, tol = f"{measure}/{s}", subsets[s], reg.tolerance[measure]
            g = row.get(key)
            out.append(
                {
                    "value": key,
                    "expected": e,
                    "got": g,
                    "tolerance": tol,
                    "status": (NOT_GIVEN if reg.published else NOT_MEASURED) if e is None else status(e, g, tol),
                    **({"published": True} if reg.published else {}),
                }
            )
    return out


def counts_of(store: Store, row: dict) -> dict:
    """What the experiment indexed (units and families of each distinct unit set: one number, or
    a list when a fusion reads several) and how many queries each subset's mean covers."""
    manifest = _manifest(store, row)
    units, families = [], []
    for a in manifest.get("artifacts", []):
        if a["kind"] == stage.UNITS:
            meta = json.loads((store.folder(a["kind"], a["key"]) / "meta.json").read_text())
            units.append(int(meta["units"]))
            families.append(int(meta["families"]))

    def one(xs):
        xs = sorted(set(xs))
        return xs[0] if len(xs) == 1 else (xs or None)

    return {
        "units": one(units),
        "families": one(families),
        "queries": {s: row.get(f"queries_{s}") for s in SUBSETS},
    }


def _manifest(store: Store, row: dict) -> dict:
    path = store.folder(stage.SCORES, row["scores_key"]) / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ------------------------------------------------------------------ running
def run(reg: Regression, extra: list[str], out=print) -> int:
    """Run one regression; print a line per value. 0: all OK / OK*; 1: a FAIL; 2: cannot run."""
    where = f"regression {reg.name} ({reg.path})"
    out(
        f"{where}: {len(reg.conditions)} conditions" + (f"; published values: {reg.published}" if reg.published else "")
    )
    try:
        cfgs = {c.name: compose(reg.overrides(c, extra)) for c in reg.conditions}
        for c in reg.conditions:
            check(cfgs[c.name])
            computed = canonical(cfgs[c.name].metrics)  # the canonical names of what the experiment measures
            missing = [m for m in c.scores if m not in computed]
            if missing:
                raise ConfigError(
                    f"{reg.path}: conditions.{c.name} expects {missing}, which its experiment does not "
                    f"measure ({computed}). Fix: add metrics=[...] naming them to its command."
                )
        first = next(iter(cfgs.values()))
        store = Store.from_config(first)
        # the data first, once: a regression whose data cannot be loaded runs nothing
        datasets: dict[str, data.Dataset] = {}
        for cfg in cfgs.values():
            key = json.dumps(_plain(cfg.dataset), sort_keys=True)
            if key not in datasets:
                datasets[key] = data.load(cfg.dataset, store.root)
    except user_errors() as e:
        out(f"{where}: cannot run: {type(e).__name__}: {e}")
        return 2
    records: dict[str, dict] = {}
    n = {"OK": 0, "OK*": 0, "FAIL": 0, NOT_GIVEN: 0, NOT_MEASURED: 0}
    width = max(len(c.name) for c in reg.conditions)
    for cond in reg.conditions:
        cfg = cfgs[cond.name]
        ds = datasets[json.dumps(_plain(cfg.dataset), sort_keys=True)]
        try:
            row = run_experiment(cfg, ds, store)
        except user_errors() as e:
            out(f"{where}: condition {cond.name} cannot run: {type(e).__name__}: {e}")
            _record(store.root, reg, records)  # what was checked before it stays recorded
            return 2
        add_row(store.root / cfg.results, row)
        counts = counts_of(store, row)
        if not cond.counts and not cond.scores:  # a new condition: what to paste into its file
            n[NOT_MEASURED] += 1
            out(f"  {cond.name}: no expected values; obtained (paste under conditions.{cond.name}):")
            out(snippet(obtained(row, counts, reg.tolerance or {"nDCG@100": 0}), 4))
        values = checks(reg, cond, row, counts)
        for v in values:
            n[v["status"]] += 1
            out(_line(cond.name, width, v))
        records[row["scores_key"]] = {
            "regression": reg.name,
            "condition": cond.name,
            "published": reg.published,
            "values": values,
        }
    _record(store.root, reg, records)
    out(f"{reg.name}: " + ", ".join(f"{v} {k}" for k, v in n.items() if v or k not in (NOT_GIVEN, NOT_MEASURED)))
    return 1 if n["FAIL"] else 0


def obtained(row: dict, counts: dict, tolerance: dict) -> dict:
    """A condition's counts and scores as a regression file holds them (the measures that have a
    tolerance, at the file's precision)."""
    scores = {
        m: {s: round(float(row[f"{m}/{s}"]), DECIMALS) for s in SUBSETS if row.get(f"{m}/{s}") is not None}
        for m in tolerance
    }
    return {"counts": {k: v for k, v in counts.items() if v is not None}, "scores": scores}


def snippet(values: dict, indent: int) -> str:
    """``counts`` and ``scores`` as the shipped files write them: one flow mapping a measure."""

    def flow(d) -> str:
        return "{" + ", ".join(f"{k}: {flow(v) if isinstance(v, dict) else v}" for k, v in d.items()) + "}"

    pad = " " * indent
    lines = [f"{pad}counts: {flow(values['counts'])}", f"{pad}scores:"]
    lines += [f"{pad}  {m}: {flow(v)}" for m, v in values["scores"].items()]
    return "\n".join(lines)


def _line(name: str, width: int, v: dict) -> str:
    def fmt(x):
        if x is None:
            return "-"
        if isinstance(x, list):
            return ",".join(map(str, x))
        return str(x) if isinstance(x, int) else f"{float(x):.{DECIMALS}f}"

    text = f"  {name:{width}s}  {v['value']:18s} {fmt(v['got']):>8s}  expected {fmt(v['expected']):>8s}  {v['status']}"
    ref = "published" if v.get("published") else "expected"
    if v["status"] == "FAIL":
        text += f" ({ref} {fmt(v['expected'])}, got {fmt(v['got'])}, tolerance {v['tolerance']:g})"
        if v.get("published"):
            text += ": not reproduced with this file's settings"
    elif v["status"] == "OK*":
        text += (
            f" (reproduced within {v['tolerance']:g} of the published value)"
            if v.get("published")
            else (f" (within {v['tolerance']:g})")
        )
    return text


def _plain(node):
    return OmegaConf.to_container(node, resolve=True)


def _record(root: Path, reg: Regression, records: dict) -> None:
    write_json_atomic(
        Path(root) / "runs" / "regressions" / f"{reg.name}.json",
        {
            "regression": reg.name,
            "file": str(reg.path.resolve()),
            "checked": datetime.now(UTC).isoformat(timespec="seconds"),
            "rows": records,
        },
    )


# ------------------------------------------------------------------ what the report reads
def recorded(root: Path) -> dict[str, dict]:
    """Scores key -> the last regression check of that row in this root (``runs/regressions/``)."""
    out: dict[str, dict] = {}
    for f in sorted((Path(root) / "runs" / "regressions").glob("*.json")):
        try:
            out.update(json.loads(f.read_text())["rows"])
        except (OSError, ValueError, KeyError):
            log.warning("%s: not a regression record; ignored (rerun its regression to write it again)", f)
    return out


def annotate(df: pd.DataFrame, root: Path, metric: str) -> pd.DataFrame:
    """The results frame with, for rows a regression has checked in this root, ``regression``
    (``NAME/CONDITION: STATUS``, the worst of its values) and the expected primary measure on
    ALL / IN / OUT. Unchanged when no row is covered."""
    rec = recorded(root)
    if df.empty or not any(k in rec for k in df["scores_key"]):
        return df
    order = {"FAIL": 0, NOT_GIVEN: 1, NOT_MEASURED: 1, "OK*": 2, "OK": 3}

    def label(key):
        r = rec.get(key)
        if r is None:
            return None
        worst = min((v["status"] for v in r["values"]), key=lambda s: order.get(s, 0), default="OK")
        return f"{r['regression']}/{r['condition']}: {worst}"

    def expected(key, col):
        r = rec.get(key) or {}
        return next((v["expected"] for v in r.get("values", []) if v["value"] == col), None)

    df = df.copy()
    df["regression"] = df["scores_key"].map(label)
    for s in SUBSETS:
        col = f"{metric}/{s}"
        df[f"expected {col}"] = [expected(k, col) for k in df["scores_key"]]
    return df


def published_points(dataset_names: set[str], metric: str) -> list[dict]:
    """The published conditions of every regression file on one of these datasets, as points
    for the IN-vs-OUT plot: ``{"name", "reference", "IN", "OUT"}`` (only where both are given)."""
    points = []
    for name in names():
        try:
            reg = load(FOLDER / f"{name}.yaml")
        except RegressionError as e:
            log.warning("%s", e)
            continue
        if not reg.published or _dataset_name(reg) not in dataset_names:
            continue
        for c in reg.conditions:
            vals = c.scores.get(metric) or {}
            if vals.get("IN") is not None and vals.get("OUT") is not None:
                points.append({"name": c.name, "reference": reg.published, "IN": vals["IN"], "OUT": vals["OUT"]})
    return points


def _dataset_name(reg: Regression) -> str | None:
    for o in reg.dataset:
        if o.startswith("dataset="):
            return o.split("=", 1)[1]
    return None


# ------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.regress", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "regressions", nargs="+", help="NAME (regressions/NAME.yaml), a file's path, or all; then overrides"
    )
    a = ap.parse_args(argv)
    targets = [x for x in a.regressions if "=" not in x]
    extra = [x for x in a.regressions if "=" in x]
    extra = [f"dataset.path={x.split('=', 1)[1]}" if x.startswith("path=") else x for x in extra]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not targets:
        print("regress: name a regression (one of " + ", ".join(names()) + "), a file's path, or all", file=sys.stderr)
        return 2
    try:
        files = [FOLDER / f"{n}.yaml" for n in names()] if targets == ["all"] else [resolve(t) for t in targets]
        regs = [load(f) for f in files]
    except (RegressionError, ConfigError) as e:
        print(f"regress: {e}", file=sys.stderr)
        return 2
    codes = [run(r, extra) for r in regs]
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main())
