"""One experiment on many machines: the encoding and the BM25 index of a unit set in shards.

``shards=N`` (N > 1) splits a unit set into N contiguous ranges of its units, in the order the
units file holds them (the corpus's order): shard ``i`` of ``n`` units is units
``[i*n//N, (i+1)*n//N)``. Each shard is an artifact of its own (``embedding_shard``,
``lucene_shard``: the units artifact, the stage's parameters, ``shard`` and ``shards``), built by
its own process where ``sharding.launcher`` says, resumable on its own: a shard that was killed
is the only one rebuilt, those committed are reused. The merge is an artifact too, keyed by the
shards: the encodings concatenated in shard order (then the usual Faiss index over them), or one
Lucene index from the shards' indexes (``IndexWriter.addIndexes``: the segments are copied, so
BM25's statistics are the whole corpus's and a sharded index ranks as the unsharded one).
``shards=1`` is the unsharded path with today's keys.

Where shards run (``sharding.launcher``):

* ``inline``: in this process, one after another (what a laptop wants: resumable, no scheduler);
* ``local``: one process per missing shard on this machine, all at once (submitit's local
  executor: the same code path as Slurm's);
* ``slurm``: one Slurm array job per stage (submitit's ``map_array``), one task per missing
  shard, with ``sharding.partition``, ``gpus_per_task`` (the encoder's GPU), ``cpus_per_task``,
  ``mem_gb`` and ``timeout_min``. Every node must see the artifact root (a shared file system).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path

from . import faults, stage
from .artifact import Artifact
from .files import META, damage
from .stage import Context, Stage, register
from .store import DamagedArtifact, Store, inputs_of, lease

log = logging.getLogger(__name__)

VERSION = 1


class ShardError(RuntimeError):
    """Shard jobs that failed; the message names them, their logs and the fix."""


def count(cfg) -> int:
    """``shards``: how many shards each shardable stage of this experiment is built in (checked
    with the config: :func:`harness.config.check_sharding`)."""
    return int(cfg.get("shards", 1) or 1)


def span(i: int, n: int, units: int) -> tuple[int, int]:
    """Units ``[lo, hi)`` of shard ``i`` of ``n`` over ``units`` units: contiguous, in file order,
    sizes differing by at most one; the same rule on every machine."""
    return i * units // n, (i + 1) * units // n


def units_count(units_dir: Path) -> int:
    return int(json.loads((Path(units_dir) / "meta.json").read_text())["units"])


# ------------------------------------------------------------------ where shards run
def build_one(root: str, lock_timeout: float, art: Artifact, spec: dict, builder: Callable, describe: str) -> str:
    """One shard in a job of its own (submitit pickles this call; ``builder`` is a backend's
    module-level function, pickled by name): built or reused under the store's lock, committed
    atomically, so a killed job leaves nothing and a rerun builds that shard alone."""
    store = Store(root, lock_timeout=lock_timeout)
    store.ensure(art, functools.partial(_inline, builder, spec, None), describe)
    return art.key


def _started(spec: dict) -> None:
    """A shard's build has begun (its temporary folder exists): ``HARNESS_FAULT=shard-I`` kills
    the process building shard I here (:mod:`harness.faults`)."""
    faults.point(f"shard-{spec['shard']}")


def _executor(ctx: Context, kind: str):
    """submitit's executor for one stage's array: generic settings for both clusters, the
    ``slurm_`` ones (partition, memory, GPUs, how many at once) read by Slurm only (submitit's
    local executor starts every job at once)."""
    import submitit  # deferred: only the local and Slurm launchers submit jobs

    s = ctx.cfg.sharding
    folder = Path(ctx.store.root) / "runs" / "logs" / "shards" / "%j"
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm" if str(s.launcher) == "slurm" else "local")
    ex.update_parameters(  # None: not set
        timeout_min=int(s.timeout_min),
        cpus_per_task=int(s.cpus_per_task),
        name=f"harness-{kind}",
        slurm_partition=s.partition,
        slurm_mem_gb=s.mem_gb,
        slurm_gpus_per_node=_gpus(ctx) if kind == stage.EMBEDDING_SHARD else 0,
        slurm_array_parallelism=int(s.parallelism),
    )
    return ex


def _gpus(ctx: Context) -> int:
    """GPUs of an encoding shard's job: ``sharding.gpus_per_task``, else one when the encoder asks
    for CUDA (``encoder.device=cuda``); ``auto`` takes what the job was given."""
    given = int(ctx.cfg.sharding.gpus_per_task)
    return given if given or str(ctx.cfg.encoder.device) != "cuda" else 1


def _run_jobs(ctx: Context, kind: str, todo: list[tuple[Artifact, dict]], builder: Callable, describe: str) -> None:
    """The missing shards of one stage as one array of jobs; waits for them, and names the ones
    that failed with their logs."""
    ex = _executor(ctx, kind)
    root, timeout, k = str(ctx.store.root), float(ctx.store.lock_timeout), len(todo)
    names = [f"{describe} {s['shard']}/{s['shards']}" for _, s in todo]
    jobs = ex.map_array(
        build_one, [root] * k, [timeout] * k, [a for a, _ in todo], [s for _, s in todo], [builder] * k, names
    )
    log.info("%s: %d shard jobs submitted (%s)", kind, len(jobs), ", ".join(j.job_id for j in jobs))
    if str(ctx.cfg.sharding.launcher) == "local":
        for j in jobs:  # submitit waits 15 s for a dead job's result on a network file system; here it is local
            j._results_timeout_s = 2
    failed = []
    for (_, spec), job in zip(todo, jobs):
        try:
            job.result()
        except Exception as e:  # a job's own exception, or the scheduler's word on it
            said = str(e).strip().splitlines()
            why = said[-1] if said else type(e).__name__
            failed.append(f"shard {spec['shard']}/{spec['shards']} (job {job.job_id}, log {job.paths.stderr}): {why}")
    if failed:
        raise ShardError(
            f"{len(failed)} of {len(todo)} {describe} jobs failed: "
            + "; ".join(failed)
            + ". The shards that finished are kept. Fix: see the logs, then run again: only the missing shards are built."
        )


def merged(store: Store, parts: list[Artifact], merge: Callable[[Path, list[Path]], dict]) -> Callable[[Path], dict]:
    """The build of a merge of ``parts``: each shard's files checked against their SHA-256 first (a
    shard damaged without changing its size is never merged), and each shard's files recorded in
    the merge's ``inputs``, so that a shard rebuilt later makes the merge stale
    (:meth:`harness.store.Store.stale_inputs`) though its key is the same."""

    def build(tmp: Path) -> dict:
        dirs = [store.path(p) for p in parts]
        for p, d in zip(parts, dirs):
            problem = damage(d, json.loads((d / META).read_text())["files"], checksums=True)
            if problem is not None:
                store.discard(p, problem)
                raise DamagedArtifact(
                    p,
                    f"{p.kind} {p.key} ({d}): {problem}: it was not merged, and is removed. Fix: run again: that "
                    f"shard alone is built again, then the merge from it.",
                )
        return {**merge(tmp, dirs), "inputs": {p.key: inputs_of(d) for p, d in zip(parts, dirs)}}

    return build


def _inline(builder: Callable, spec: dict, ctx: Context | None, tmp: Path) -> dict:
    """One shard's build: in the experiment's process (``ctx``: a dense shard uses its encoder) or
    a job's (``None``: the builder loads what it needs)."""
    _started(spec)
    return builder(tmp, spec, ctx.encoder if ctx is not None else None)


def build(
    ctx: Context, kind: str, units: Artifact, params: dict, env: dict, spec: dict, builder: Callable, describe: str
) -> list[Artifact]:
    """The ``shards`` artifacts of one stage over ``units`` (``builder(tmp, spec, encoder)`` builds
    one from plain values: the units folder, ``shard``, ``shards`` and the stage's ``spec``), built
    where ``sharding.launcher`` says (the missing ones only), and recorded as the experiment's nodes."""
    n = count(ctx.cfg)
    parts = [
        Artifact(kind, {**params, "shard": i, "shards": n}, (units,), {**env, "shards": VERSION}) for i in range(n)
    ]
    specs = {p.key: {**spec, "units": str(ctx.store.path(units)), "shard": i, "shards": n} for i, p in enumerate(parts)}
    launcher = str(ctx.cfg.sharding.launcher)
    if not ctx.plan and launcher != "inline":
        todo = [(p, specs[p.key]) for p in parts if not ctx.store.exists(p)]
        held = lease(ctx.store.root)
        if held is not None:  # before the jobs commit them: gc keeps a shard this live run will read
            for p, _ in todo:  # (the ones there already are leased by ensure, through the key's lock)
                held.add(p.kind, p.key)
        if todo:
            _run_jobs(ctx, kind, todo, builder, describe)
    # inline, a dense shard uses this process's encoder (loaded once, for all of them)
    own = launcher == "inline" and kind == stage.EMBEDDING_SHARD
    for p in parts:
        sp = specs[p.key]
        ctx.ensure(p, functools.partial(_inline, builder, sp, ctx if own else None), f"{describe} {sp['shard']}/{n}")
    return parts


register(
    Stage(
        stage.LUCENE_SHARD,
        "indexes",
        "BM25 index shards",
        VERSION,
        cost="bm25_index",
        timings={"index_seconds": ("index_seconds",)},
    )
)
register(
    Stage(
        stage.EMBEDDING_SHARD,
        "indexes",
        "encoding shards",
        VERSION,
        cost="encoding",
        timings={"encode_seconds": ("encode_seconds",)},
    )
)
