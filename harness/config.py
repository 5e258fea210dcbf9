"""Composing an experiment's config and checking it.

:func:`compose` runs Hydra's compose API over ``conf/`` on the typed settings
(:mod:`harness.settings`, which registers the schema), so a wrong type or an unknown choice fails
while the config is composed. What a type cannot say (ranges, combinations) is checked by
:func:`check` before the dataset is loaded or the JVM started: the spine's groups here, one function
each, and every registered stage's own ``check`` (learning to rank, re-ranking, fine-tuning,
passages), so this module imports no stage. :func:`run_config` gives each input run of an N-way
fusion its own config.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from . import stage
from .backends import available
from .errors import ConfigError, number, positive_int
from .settings import (  # noqa: F401  (NOT_IN_KEYS: re-exported; importing settings registers the schema)
    CONF,
    NOT_IN_KEYS,
    DensePRFConf,
    DensePRFMethod,
    EncoderConf,
    FusionConf,
    FusionMethod,
    PRFConf,
    PRFMethod,
    QueryReductionConf,
)

__all__ = ["ConfigError", "check", "fusion_weights", "run_config", "unselected_group_keys"]

# ----------------------------------------------------------------------- the spine's ranges, as a table
# Whole counts (each a positive integer), where their group is chosen.
WHOLE = (
    "search.depth",
    "search.k",
    "search.threads",
    "fusion.depth",
    "index.threads",  # also the number of pipes a streamed BM25 build feeds
    "bm25.max_clauses",
    "encoder.max_length",
    "encoder.batch_size",
    "prf.fb_terms",
    "prf.fb_docs",
    "dense_prf.k",
    "query_reduction.n_terms",
    "shards",
    "sharding.parallelism",
    "sharding.cpus_per_task",
    "sharding.timeout_min",
)
# Numbers within [low, high] (high None: no upper bound), with what the message adds.
NUMBERS = (
    ("bm25.k1", 0.0, None, " (Anserini default 0.9, paper 1.2)"),
    ("bm25.b", 0.0, 1.0, " (Anserini default 0.4, paper 0.75)"),
    ("prf.original_query_weight", 0.0, 1.0, ""),
    ("prf.alpha", 0.0, None, ""),
    ("prf.beta", 0.0, None, ""),
    ("dense_prf.alpha", 0.0, None, ""),
    ("dense_prf.beta", 0.0, None, ""),
)


def check_ranges(cfg) -> None:
    """The spine's counts and numbers (:data:`WHOLE`, :data:`NUMBERS`); a group not chosen is skipped."""
    for key in WHOLE:
        if (value := OmegaConf.select(cfg, key)) is not None:
            positive_int(value, key)
    for key, low, high, hint in NUMBERS:
        if (value := OmegaConf.select(cfg, key)) is not None:
            number(value, key, low, high, hint=hint)
    if cfg.search.depth < cfg.search.k:
        raise ConfigError(f"search.depth={cfg.search.depth} < search.k={cfg.search.k}: retrieve at least k units.")


def check_fusion(f, search) -> None:
    if f.runs:
        if len(f.runs) < 2:
            raise ConfigError(f"fusion.runs has {len(f.runs)} run: fusion needs at least two.")
        for i, r in enumerate(f.runs):
            if not hasattr(r, "items"):
                raise ConfigError(
                    f"fusion.runs[{i}]={r!r}: expected a mapping of overrides, e.g. "
                    f"{{backend: bm25, query_fields: KW, prf: rm3}}."
                )
    elif len(set(f.backends)) < 2:
        raise ConfigError(
            f"fusion.backends={list(f.backends)}: fusion needs at least two different backends of "
            f"{available()}, or fusion.runs."
        )
    fusion_weights(f)
    if f.k < 0:
        raise ConfigError(f"fusion.k={f.k}: expected a non-negative integer (the paper's grid: 10, 30, 60, 100).")
    if f.depth > search.k:  # (a positive count: check_ranges)
        raise ConfigError(
            f"fusion.depth={f.depth} > search.k={search.k}: the fused family runs hold only search.k "
            f"families per query. Fix: fusion.depth <= search.k, or raise search.k."
        )


def fusion_weights(f) -> list[float]:
    """One weight per fused run: ``fusion.weights``, else each run's own ``weight`` in
    ``fusion.runs``, else all 1. Checked here once; the fused run's key and builder read it."""
    n = len(f.runs) or len(f.backends)
    given = [r.get("weight") for r in f.runs] if f.runs else []
    if f.weights is not None and any(w is not None for w in given):
        raise ConfigError("fusion.weights and a `weight` inside fusion.runs: give the weights one way.")
    if f.weights is not None:
        if len(f.weights) != n:
            raise ConfigError(f"fusion.weights={list(f.weights)}: expected {n} weights, one per fused run.")
        weights, key = list(f.weights), "fusion.weights[]"
    else:
        weights, key = [1.0 if w is None else w for w in given] or [1.0] * n, "fusion.runs[].weight"
    for w in weights:  # a number >= 0: not a bool, not NaN, not infinite
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
            raise ConfigError(f"{key}={w!r}: expected a number >= 0.")
    if not any(weights):
        raise ConfigError(
            f"{key}={weights}: every weight is 0, so every fused score would be 0 and the ranking "
            f"arbitrary. Fix: give at least one run a positive weight."
        )
    if f.method == FusionMethod.average and len(set(weights)) > 1:
        raise ConfigError("fusion.method=average takes no weights. Fix: fusion.method=interpolation.")
    return [float(w) for w in weights]


def _unused(group, method: str, keys: tuple, schema, name: str) -> None:
    """Refuse a setting the chosen method does not read (one left at its default is harmless)."""
    for k in keys:
        if getattr(group, k) != getattr(schema, k):
            raise ConfigError(
                f"{name}.{k}={getattr(group, k)!r}: {name}={method} does not use it, so it would change "
                f"nothing. Fix: drop it, or choose the method that reads it."
            )


def check_prf(p) -> None:
    if p.method == PRFMethod.rm3:
        _unused(p, "rm3", ("alpha", "beta"), PRFConf, "prf")
    else:
        _unused(p, "rocchio", ("original_query_weight",), PRFConf, "prf")
        if p.alpha == 0 and p.beta == 0:
            raise ConfigError(
                "prf.alpha=0 and prf.beta=0: Rocchio's expanded query would be empty. Fix: a positive "
                "alpha (original query) or beta (feedback documents)."
            )


def check_dense_prf(p, search) -> None:
    if p.k > search.depth:
        raise ConfigError(f"dense_prf.k={p.k} > search.depth={search.depth}: feedback comes from the first search.")
    if p.method == DensePRFMethod.average:
        _unused(p, "average", ("alpha", "beta"), DensePRFConf, "dense_prf")
    elif p.alpha == 0 and p.beta == 0:
        raise ConfigError(
            "dense_prf.alpha=0 and dense_prf.beta=0: the query vector would be zero and every score 0. "
            "Fix: a positive alpha (original query) or beta (feedback documents)."
        )


# A lever reads one backend's search; an experiment that has no such backend would drop it silently.
LEVER_BACKEND = {"prf": "bm25", "dense_prf": "dense", "query_reduction": "bm25"}


def check_levers(cfg) -> None:
    """Refuse a BM25 lever on a dense-only experiment and the reverse. A fusion over both backends
    passes its levers to the runs of the backend they belong to (:func:`harness.fuse.run_config`)."""
    if cfg.fusion is not None and not cfg.fusion.runs:
        backends = set(map(str, cfg.fusion.backends))
    elif cfg.fusion is not None:
        backends = {str(r.get("backend", cfg.backend)) for r in cfg.fusion.runs}
    else:
        backends = {str(cfg.backend)}
    for lever, backend in LEVER_BACKEND.items():
        if cfg[lever] is not None and backend not in backends:
            raise ConfigError(
                f"{lever}={cfg[lever].method}: a {backend} lever, and this experiment searches with "
                f"{sorted(backends)} only, so it would change nothing. Fix: drop {lever}=, or use "
                f"backend={backend}."
            )


def check_store(cfg) -> None:
    if cfg.store.lock_timeout < 0:
        raise ConfigError(
            f"store.lock_timeout={cfg.store.lock_timeout}: expected seconds >= 0 (0: fail at once if "
            f"another process holds the lock)."
        )
    if not cfg.cost.gpu_speedup > 0:
        raise ConfigError(
            f"cost.gpu_speedup={cfg.cost.gpu_speedup}: expected a positive factor (GPU / CPU encoder throughput)."
        )


def check(cfg) -> None:
    """Every range and combination the types cannot express: the spine's here, each stage's own
    through the registry (the measures: :func:`harness.evaluate.canonical`)."""
    check_store(cfg)
    check_ranges(cfg)
    if cfg.fusion is not None:
        check_fusion(cfg.fusion, cfg.search)
    if cfg.prf is not None:
        check_prf(cfg.prf)
    if cfg.dense_prf is not None:
        check_dense_prf(cfg.dense_prf, cfg.search)
    for s in stage.stages():  # each stage's own settings (learning to rank, re-ranking, fine-tuning ...)
        if s.check is not None:
            s.check(cfg)
    check_levers(cfg)
    check_sharding(cfg)


def check_sharding(cfg) -> None:
    s = cfg.get("sharding")
    if s is None:
        return
    if str(s.launcher) not in ("inline", "local", "slurm"):
        raise ConfigError(f"sharding.launcher={s.launcher}: expected inline, local or slurm.")
    if str(s.launcher) == "slurm" and int(cfg.get("shards", 1)) > 1 and shutil.which("sbatch") is None:
        raise ConfigError(
            "sharding.launcher=slurm: there is no sbatch on this machine's PATH, so no shard job could be "
            "submitted. Fix: sharding.launcher=local (a process per shard here), or run where Slurm is."
        )


# ----------------------------------------------------------------------- overrides of unselected groups
OPTIONAL_GROUPS = ("prf", "dense_prf", "rerank", "fusion", "query_reduction", "ltr", "finetune")


def unselected_group_keys(overrides: list[str]) -> str | None:
    """The first ``GROUP.key=value`` override whose optional group (``prf``, ``dense_prf``,
    ``rerank``, ``fusion``) the rest of the command line leaves unselected, as an error message, or
    None. Hydra cannot set a key inside a group that is ``null`` and fails with an assertion."""
    dotted = [
        o
        for o in overrides
        if "=" in o
        and o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] in OPTIONAL_GROUPS
        and "." in o.split("=", 1)[0]
    ]
    if not dotted:
        return None

    def first_choice(o: str) -> str:  # a -m sweep value "a,b" composes as its first choice
        key, _, value = o.partition("=")
        return o if not value or any(c in value for c in "[]{}()'\"") else f"{key}={value.split(',')[0]}"

    rest = [first_choice(o) for o in overrides if o not in dotted and not o.startswith(("hydra.", "hydra/", "-"))]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = hydra_compose("config", overrides=rest)
    except Exception:  # noqa: BLE001  (another problem: Hydra reports it as usual)
        return None
    for o in dotted:
        key = o.split("=", 1)[0].lstrip("+~")
        group = key.split(".", 1)[0]
        if cfg.get(group) is None:
            example = {
                "prf": "rm3",
                "dense_prf": "rocchio",
                "rerank": "ipc3_disjoint",
                "fusion": "rrf",
                "query_reduction": "tfidf",
                "ltr": "lambdamart",
            }[group]
            return (
                f"{o}: {group} is not selected (it is null), so {key} would set nothing. Fix: choose it first, "
                f"e.g. {group}={example} {o}"
            )
    return None


# ----------------------------------------------------------------------------- inputs of an N-way fusion
def _groups() -> dict:
    """Optional config groups a fused run may name by file, and their schema."""
    return {
        "encoder": EncoderConf,  # an encoder ensemble: each dense run names its encoder (conf/encoder/)
        "prf": PRFConf,
        "dense_prf": DensePRFConf,
        "query_reduction": QueryReductionConf,
        "fusion": FusionConf,
        **{s.group: s.schema for s in stage.stages() if s.group and s.schema},  # the stages' own (ltr, rerank ...)
    }


def run_config(cfg, overrides):
    """The config of one input run of an N-way fusion: this experiment's, without fusion,
    learning to rank and re-ranking, with the run's overrides (``{backend: bm25, query_fields: KW, prf: rm3}``).

    Entries compose like a command line: a group chosen by name (``prf: rm3`` loads
    ``conf/prf/rm3.yaml``) first, then dotted keys into it, whatever their order in the entry.
    ``weight`` is fusion's. A run cannot be a fusion itself, be learned or be re-ranked (they apply
    to the fused run: set them outside ``fusion.runs``). Levers inherited from the fused experiment
    go only to runs of their backend (``prf`` and ``query_reduction`` to BM25 runs, ``dense_prf``
    to dense ones)."""
    sub = cfg.copy()
    final = {s.group: s.in_fused_input for s in stage.stages() if s.group and s.in_fused_input}
    for group in final:
        sub[group] = None
    conf = Path(__file__).resolve().parent.parent / "conf"
    GROUPS = _groups()
    items = [(str(k), v) for k, v in dict(overrides).items() if str(k) != "weight"]
    for key, _ in items:
        if key.split(".", 1)[0] in final:
            what = final[key.split(".", 1)[0]]
            raise ConfigError(
                f"fusion.runs: {key!r} inside a run entry: an input run cannot be {what}. Fix: set "
                f"{key.split('.', 1)[0]} outside fusion.runs (it applies to the fused run), or list "
                f"the inner fusion's runs in this one."
            )
    items.sort(key=lambda kv: "." in kv[0])  # group choices before their keys (a stable sort keeps the rest)
    chosen = {key.split(".", 1)[0] for key, _ in items}
    for key, value in items:
        group = key.split(".", 1)[0]
        try:
            if key in GROUPS and isinstance(value, str) and value not in ("none", "null"):
                path = conf / key / f"{value}.yaml"
                if not path.exists():
                    raise ConfigError(
                        f"fusion.runs: {key}={value!r} names no {path}. Fix: one of "
                        f"{sorted(p.stem for p in path.parent.glob('*.yaml'))}."
                    )
                value = OmegaConf.merge(OmegaConf.structured(GROUPS[key]), OmegaConf.load(path))
            elif key in GROUPS and value in ("none", "null"):
                value = None
            elif group in GROUPS and "." in key and OmegaConf.select(sub, group) is None:
                sub[group] = OmegaConf.structured(GROUPS[group])  # the schema's defaults, then the dotted value
            OmegaConf.update(sub, key, value, merge=False)
        except ConfigError:
            raise
        except Exception as e:  # omegaconf's validation errors: say which run and key
            raise ConfigError(
                f"fusion.runs: {key}={value!r}: {str(e).splitlines()[0]}. Fix: a key of the experiment "
                f"config (python -m harness.run --cfg job shows them), spelled as on the command "
                f"line."
            ) from e
    for lever, backend in LEVER_BACKEND.items():
        if lever not in chosen and str(sub.backend) != backend:
            sub[lever] = None  # the fused experiment's lever, for the runs of its backend
    check(sub)
    return sub


# ----------------------------------------------------------------------------- composing an experiment's config
def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def compose(overrides: list[str]):
    """The experiment's config. Overrides of Hydra itself (``hydra.launcher.cpus_per_task=1``,
    ``hydra/launcher=...``) configure the launchers, not experiments: they are left to them.

    Hydra composes a config in two steps: the defaults list (every group chosen: ``+experiment=``,
    ``dataset=``, ...) merged in order, then each plain ``key=value`` applied to the result in
    struct mode (``ConfigLoaderImpl._apply_overrides_to_config``). A sweep's jobs differ mostly in
    plain values and a composition costs about 80 ms, so the first step is done once per distinct
    set of group choices in a process (and the conf/ files as they are) and the second on a copy:
    the same config Hydra composes whole (``tests/test_sweep.py`` checks every job of every sweep
    file). Anything the fast path cannot apply goes through Hydra whole, for its error message."""
    overrides = [o for o in overrides if not _key(o).startswith(("hydra.", "hydra/"))]
    groups = [o for o in overrides if _is_group(o)]
    plain = [o for o in overrides if not _is_group(o)]
    signature = (tuple(groups), _conf_signature())
    base = _BASES.get(signature)
    if base is None:
        base = _BASES[signature] = _compose_whole(groups)
    try:
        cfg = copy.deepcopy(base)
        ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(plain), cfg)
        return cfg
    except Exception:  # noqa: BLE001  (whatever Hydra would say, it says on the whole composition)
        return _compose_whole(overrides)


_BASES: dict[tuple, Any] = {}  # (group choices, conf/ signature) -> the composed config, this process


def _is_group(override: str) -> bool:
    """A group choice (``+experiment=x``, ``dataset=local``, ``prf=null``), not a plain value."""
    key = override.split("=", 1)[0]
    name = key.lstrip("+~")
    return "@" in key or "/" in name or ("." not in name and (CONF / name).is_dir())


def _conf_signature() -> tuple:
    """What the conf/ files are now (names, sizes, modification times): a change composes anew."""
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in CONF.rglob("*.yaml")))


def _compose_whole(overrides: list[str]):
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=overrides)
    except (HydraException, OmegaConfBaseException, AssertionError) as e:
        problem = unselected_group_keys(overrides)  # Hydra's assertion for a key of a null group, explained
        if problem:
            raise ConfigError(problem) from None
        lines = [x.strip() for x in str(e).strip().splitlines() if x.strip() and not x.strip().startswith("To append")]
        lines = lines or [type(e).__name__]
        what = " ".join(lines[:3]).rstrip(".")
        raise ConfigError(
            f"overrides {' '.join(overrides)}: {what}. Fix: check the key and value against "
            f"`python -m harness.run --help` and conf/ (experiments: "
            f"{sorted(p.stem for p in (CONF / 'experiment').glob('*.yaml'))})."
        ) from None
