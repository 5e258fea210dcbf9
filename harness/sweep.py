"""Sweeps: named grids of experiments, listed before they run, resumable, reported after.

    python -m harness.sweep sweep=default                  # run (make sweep)
    python -m harness.sweep sweep=default list=true        # what it needs and what is cached
    python -m harness.sweep sweep=paper dataset=local dataset.path=DIR launcher=local_parallel

A sweep file (``conf/sweep/<name>.yaml``) holds blocks; each block is a Cartesian product of Hydra
overrides, written as on a ``-m`` command line. A sweep is the union of its experiments' paths:
listing it counts the distinct artifact keys of every experiment and checks which exist; running
it builds the missing ones. Every artifact is computed once, so an interrupted sweep resumes where
it stopped and a finished sweep run again only reads ``meta.json`` files.

Launchers: ``basic`` (default) runs the experiments in this process, one after another, sharing
one JVM and one loaded dataset. Any other value is a Hydra launcher config (``local_parallel``,
``joblib``, ``submitit_local``, ``slurm``): each block is handed to ``python -m harness.run -m``
with ``hydra/launcher=<value>``; jobs that need the same index wait on its lock and reuse it.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from . import console, cost, data, report, stage
from .config import CONF, _key, compose
from .data import DataError
from .experiment import Experiment, run_experiment
from .results import ResultsError, add_row
from .run import JOB_GROUP_ENV, user_errors
from .store import Store

log = logging.getLogger("harness.sweep")

OWN_KEYS = ("sweep", "list", "launcher", "log")


def load_sweep(name: str):
    """A sweep by name (``conf/sweep/<name>.yaml``) or by path to a YAML file of the same shape."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else CONF / "sweep" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))
        raise SystemExit(f"sweep={name}: no {path}. Fix: one of {known}, or add conf/sweep/{name}.yaml.")
    try:
        spec = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001  (YAML syntax, duplicate keys: name the file and the line)
        first = " ".join(str(e).split())[:300]
        raise SystemExit(f"{path}: not a valid sweep file ({first}). Fix: correct the YAML there.") from None
    blocks = spec.get("blocks") if isinstance(spec, DictConfig) else None
    if not blocks or not hasattr(blocks, "items"):
        raise SystemExit(
            f"{path}: needs a non-empty 'blocks:' mapping (block name -> Hydra overrides), e.g. "
            f"blocks: {{bm25: {{+experiment: doc_bm25, bm25.k1: '0.9,1.2'}}}}."
        )
    for name, params in blocks.items():
        if not hasattr(params, "items"):
            raise SystemExit(
                f"{path}: block {name!r} is {params!r}, not a mapping of overrides. Fix: e.g. "
                f"{name}: {{+experiment: doc_bm25}}."
            )
    return spec


def split_args(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The sweep's own ``key=value`` arguments (:data:`OWN_KEYS`) and the overrides it passes on."""
    own = {_key(a): a.split("=", 1)[1] for a in argv if "=" in a and _key(a) in OWN_KEYS}
    return own, [a for a in argv if not ("=" in a and _key(a) in OWN_KEYS)]


def block_params(params, extra: Sequence[str]) -> dict[str, str]:
    """A block's ``key: "v1,v2"`` pairs, less the keys that command-line overrides set."""
    extra_keys = {_key(o) for o in extra}
    return {k: str(v) for k, v in params.items() if k.lstrip("+") not in extra_keys}


def expand(spec, extra: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """``[(block, [override, ...]), ...]``, one per experiment; ``extra`` overrides win.

    Values are parsed by Hydra's own override parser, exactly as ``python -m harness.run -m``
    parses them for the launchers: ``a,b`` and ``range(...)`` sweep, ``[bm25,dense]`` is one list
    value, quoted strings keep their commas."""

    parser = OverridesParser.create()
    jobs = []
    for block, params in spec.blocks.items():
        overrides = parser.parse_overrides([f"{k}={v}" for k, v in block_params(params, extra).items()])
        choices = [
            [
                f"{o.get_key_element()}={v}"
                for v in (o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()])
            ]
            for o in overrides
        ]
        jobs += [(block, list(combo) + list(extra)) for combo in itertools.product(*choices)]
    return jobs


class DatasetCache:
    """One load per distinct dataset config across the sweep. ``published=True`` (listing only):
    a dataset that cannot be loaded (the hub offline) is planned from ``dataset.published``."""

    def __init__(self, published: bool = False):
        self._cache: dict[str, Any] = {}
        self.published = published

    def get(self, cfg):
        key = OmegaConf.to_yaml(cfg.dataset) + str(cfg.root)
        if key not in self._cache:
            try:
                self._cache[key] = data.load(cfg.dataset, cfg.root)
            except data.DataError as e:
                if not (self.published and cfg.dataset.get("published")):
                    raise
                log.warning("planning from the published size of the dataset, none of it cached: %s", e)
                self._cache[key] = published_stand_in(cfg.dataset)
        return self._cache[key]

    def loaded(self) -> list:
        """The datasets loaded so far."""
        return list(self._cache.values())


def published_stand_in(dataset_cfg):
    """What planning needs of a dataset that is not here: keys are placeholders, sizes published."""
    size = OmegaConf.to_container(dataset_cfg.published, resolve=True)
    missing = [k for k in ("families", "queries", "chars", "query_chars") if k not in size]
    if missing or not isinstance(size.get("chars"), dict) or not isinstance(size.get("query_chars"), dict):
        raise DataError(
            f"dataset.published lacks {missing or ['chars/query_chars as mappings']}. Fix: give families, "
            f"queries, chars and query_chars per field (see conf/dataset/dapfam.yaml)."
        )
    return SimpleNamespace(
        name=str(dataset_cfg.type),
        fingerprint="published-size",
        self_ids=set(),
        corpus_fingerprint="published-size",
        topics_fingerprint="published-size",
        qrels_digest="published-size",
        n_docs=size["families"],
        published=size,
    )


def plan(jobs, datasets: DatasetCache) -> tuple[list, dict]:
    """Compose every job and collect its artifact nodes without building anything."""
    nodes: dict[str, Any] = {}
    scores: dict[str, tuple] = {}
    store = None
    for _, overrides in jobs:
        cfg = compose(overrides)
        store = store or Store.from_config(cfg)
        exp = Experiment(cfg, datasets.get(cfg), store, plan=True)
        s = exp.scores()
        scores.setdefault(s.key, (overrides, cfg))
        for n in exp.nodes:
            nodes[n.key] = n
    return list(nodes.values()), {"scores": scores, "store": store}


def listing(name: str, jobs, nodes, store) -> str:
    """What the sweep will build: per kind of artifact (each stage's own label), how many and how
    many are cached."""
    total: Counter[str] = Counter()
    cached: Counter[str] = Counter()
    for n in nodes:
        total[n.kind] += 1
        cached[n.kind] += store.exists(n)
    stages = stage.stages()
    lines = [f"sweep {name}: {len(jobs)} jobs, {total[stage.SCORES]} distinct experiments"]
    idx = sum(total[s.kind] for s in stages if s.index)
    idx_c = sum(cached[s.kind] for s in stages if s.index)
    lines.append(f"  {'indexes (view x granularity x backend)':42s} {idx:5d}  cached {idx_c:5d}")
    for s in stages:
        if s.label and total[s.kind]:
            lines.append(f"  {s.label:42s} {total[s.kind]:5d}  cached {cached[s.kind]:5d}")
    missing = sum(total.values()) - sum(cached.values())
    lines.append(
        f"  to build: {missing} artifact(s)" if missing else "  everything is cached: the sweep only reads meta.json"
    )
    return "\n".join(lines)


def cost_estimate(nodes, info, datasets) -> str:
    """Predicted time of the artifacts not cached (see :mod:`harness.cost`), per kind and in total."""
    cfg = next(iter(info["scores"].values()))[1]
    ds = datasets.get(cfg)
    store = info["store"]
    if hasattr(ds, "published"):
        size = {
            "chars_per_token": 4.0,
            **ds.published,
            "source": "dataset.published (the data is not here)",
            "chars_per_token_source": "assumed: no text to measure",
        }
    else:
        size = {**cost.sizes(ds, store.root), "chars_per_token": cost.chars_per_token(ds, cfg.encoder)}
    missing = {
        n.key
        for n in nodes
        if stage.get(n.kind).cost != "free" and (ds.fingerprint == "published-size" or not store.exists(n))
    }
    calibration = {
        **cost.calibrate(
            store.root,
            cfg,
            cost.bm25_reach(nodes, missing, size),
            encoder=any(stage.get(n.kind).cost == "encoding" or n.params.get("backend") == "dense" for n in nodes),
            encoders=encoders_of(nodes, cfg),
        ),
        "chars_per_token": size["chars_per_token"],
    }
    return cost.report(nodes, missing, size, calibration, cfg, float(cfg.cost.gpu_speedup))


def encoders_of(nodes, cfg) -> list:
    """One encoder config per encoder x dtype the plan's embeddings use (an ensemble's, a sweep's
    grid over encoders), so each is timed and priced on its own: the experiment's config with the
    embeddings' model, length, pooling and dtype."""
    out: dict[str, Any] = {}
    for n in nodes:
        if n.kind == stage.EMBEDDINGS:
            keep = ("model", "revision", "pooling", "normalize", "max_length", "dtype")
            conf = OmegaConf.merge(cfg.encoder, {k: n.params[k] for k in keep if k in n.params})
            out.setdefault(cost.encoder_id(conf), conf)
    return list(out.values()) or [cfg.encoder]


def run_basic(scores: dict, datasets: DatasetCache, screen: console.Console | None = None) -> list[str]:
    failed = []
    items = scores.values()
    bar = screen.progress(items, len(scores)) if screen else tqdm(items, desc="sweep", unit=" exp", disable=None)
    for overrides, cfg in bar:
        try:
            row = run_experiment(cfg, datasets.get(cfg))
            add_row(Path(cfg.root) / cfg.results, row)
        except Exception as e:  # keep going: one bad experiment should not stop a night's sweep
            log.error("experiment %s failed: %s", " ".join(overrides), e)
            failed.append(" ".join(overrides))
    return failed


def _die_with_parent() -> None:
    """In a launcher job, before it starts: SIGTERM when the sweep that started it dies, even by
    SIGKILL (Linux's parent-death signal; elsewhere the job is only stopped by a live sweep)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a launcher job and every process of its group (its joblib workers): SIGTERM, then
    SIGKILL after ``grace`` seconds. Artifacts are committed atomically, so nothing half-built stays."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    try:  # whatever of the group is left: the leader after the grace, or workers that outlived it
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_launcher(spec, extra: list[str], launcher: str) -> list[str]:
    """Each block as one ``harness.run -m`` job of the launcher. The job runs in a process group of
    its own: stopping the sweep (SIGINT, SIGTERM) stops the job and its workers, and a sweep killed
    outright makes its job stop itself (:func:`_die_with_parent`, and ``harness.run``'s handler)."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # (the basic launcher keeps SIGTERM's default)
        signal.signal(signal.SIGTERM, _terminate)
    failed = []
    for block, params in spec.blocks.items():
        args = [f"{k}={v}" for k, v in block_params(params, extra).items()] + list(extra)
        cmd = [sys.executable, "-m", "harness.run", "-m", f"hydra/launcher={launcher}", *args]
        log.info("block %s: %s", block, " ".join(cmd))
        proc = subprocess.Popen(
            cmd,
            cwd=CONF.parent,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            env={**os.environ, JOB_GROUP_ENV: "1"},
        )
        try:
            if proc.wait() != 0:
                failed.append(block)
        except BaseException:
            log.warning("stopping block %s and its workers", block)
            stop_group(proc)
            raise
    return failed


def _terminate(signum, frame) -> None:
    """SIGTERM ends the sweep as Ctrl-C does, so launcher jobs are stopped on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in argv)
    argv = [a for a in argv if a not in ("-v", "--verbose")]
    own, extra = split_args(argv)
    spec = load_sweep(own.get("sweep", "default"))
    name = Path(own.get("sweep", "default")).stem
    try:
        level = console.level_of(own, verbose)
        jobs = expand(spec, extra)
    except ValueError as e:  # log=: the one line
        print(f"sweep {name}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (Hydra's override parser: name the sweep and the value)
        print(
            f"sweep {name}: an override cannot be parsed ({' '.join(str(e).split())[:300]}). Fix: write values as "
            f"on a `-m` command line, e.g. bm25.k1: '0.9,1.2'.",
            file=sys.stderr,
        )
        return 2
    listing_only = own.get("list", "false").lower() in ("1", "true", "yes")
    launcher = own.get("launcher", "basic")
    if listing_only or launcher != "basic" or not jobs:
        logging.basicConfig(level=logging.INFO, format=console.FORMAT)
        logging.getLogger("faiss.loader").setLevel(logging.WARNING)
        return _sweep(name, spec, jobs, extra, listing_only, launcher, None)
    try:
        root = Path(compose(jobs[0][1]).root)
    except user_errors() as e:
        print(f"sweep {name}: {e}", file=sys.stderr)
        return 2
    screen = console.open_console(root / "runs" / "logs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log", level)
    try:
        return _sweep(name, spec, jobs, extra, listing_only, launcher, screen)
    finally:
        screen.close()


def _sweep(name: str, spec, jobs, extra, listing_only: bool, launcher: str, screen: console.Console | None) -> int:
    datasets = DatasetCache(published=listing_only)
    t0 = time.perf_counter()
    try:
        nodes, info = plan(jobs, datasets)
    except user_errors() as e:
        print(f"sweep {name}: {e}", file=sys.stderr)
        return 2
    store = info["store"]
    print(listing(name, jobs, nodes, store), flush=True)
    if listing_only:
        print(cost_estimate(nodes, info, datasets), flush=True)
        return 0
    if screen is not None:
        print(f"  log: {screen.log_file}", flush=True)
    failed = run_basic(info["scores"], datasets, screen) if launcher == "basic" else run_launcher(spec, extra, launcher)
    first_cfg = next(iter(info["scores"].values()))[1]
    results = Path(first_cfg.root) / first_cfg.results
    try:
        out = report.write_report(
            store,
            results,
            list(info["scores"]),
            name,
            {k: list(o) for k, (o, _) in info["scores"].items()},
            lambda key: datasets.get(info["scores"][key][1]),
        )
    except ResultsError as e:
        print(f"sweep {name}: no report: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a read-only root: every score is in its artifact, only the report is not written
        print(
            f"sweep {name}: the scores are computed, but the report cannot be written ({e.strerror or e}: "
            f"{getattr(e, 'filename', '') or store.root}). Fix: make the root writable and run the sweep again "
            f"(it only reads the cached artifacts).",
            file=sys.stderr,
        )
        return 1
    if screen is not None:
        print(report.summary(results, list(info["scores"])), flush=True)
        if screen.once.repeats:
            print(f"  {screen.once.repeats} more warning(s) like those above: {screen.log_file}", flush=True)
    print(f"sweep {name}: {len(info['scores'])} experiments in {time.perf_counter() - t0:.1f}s; report in {out}")
    if (out / "index.html").exists():
        print(f"  open {out / 'index.html'}")
    if failed:
        print(f"{len(failed)} failed: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
