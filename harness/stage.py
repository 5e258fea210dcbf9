"""The registry of stages: what each kind of artifact is, said once, by the module that builds it.

A stage module declares itself with :func:`register` at import time (``STAGE = register(Stage(...))``):
its artifact kind, where the store keeps it, its conf group and version, and how it names itself
(the sweep listing's label, its TREC-tag fragment and results columns for the run stages, the cost
model :mod:`harness.cost` prices it with, the timing columns its ``meta.json`` feeds). Everything
that used to special-case kinds by name (the store's folders, run tags and results columns, the
report's kinds of system, the sweep listing, the cost estimate, the timing columns, fusion's
refusal list, select's baseline, the experiment's chain of transforms) reads these declarations
instead, so a new stage (a cross-encoder re-ranker, say) is one module that registers itself and
one conf group; ``tests/test_architecture.py`` registers a toy stage and runs it end to end.

This module is the bottom of the house: it imports only :mod:`harness.artifact`. The built-in
stage modules are imported on the first look-up (:data:`BUILTIN`, the way a plugin registry finds
its providers), so the store, naming and cost can ask about any kind without importing the stages
that build them: the stages import those modules, not the other way round.

:class:`Context` is what a stage's node function may use of the experiment that runs it (a
protocol: the stage modules never import :mod:`harness.experiment`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .artifact import Artifact

# The built-in kinds, named once. Code elsewhere says ``stage.UNIT_RUN``, never the string.
DATASET = "dataset"
UNITS = "units"
LUCENE = "lucene"
LUCENE_SHARD = "lucene_shard"
EMBEDDINGS = "embeddings"
EMBEDDING_SHARD = "embedding_shard"
FAISS = "faiss"
ENCODER_MODEL = "encoder_model"
ENCODER_IDENTITY = "encoder_identity"
UNIT_RUN = "unit_run"
FAMILY_RUN = "family_run"
FUSED_RUN = "fused_run"
LTR_FEATURES = "ltr_features"
LTR_IDENTITY = "ltr_identity"
LTR_MODEL = "ltr_model"
LTR_RUN = "ltr_run"
RERANKED_RUN = "reranked_run"
SCORES = "scores"

# The modules that declare the built-in stages, in data-path order (the order of the sweep listing,
# of results columns and of the cost lines). A plugin stage calls :func:`register` itself.
BUILTIN = (
    "harness.data",
    "harness.passages",
    "harness.backends.bm25",
    "harness.backends.dense",
    "harness.tuned",
    "harness.shards",
    "harness.search",
    "harness.aggregate",
    "harness.fuse",
    "harness.ltr",
    "harness.rerank",
    "harness.evaluate",
)


@dataclass(frozen=True)
class Stage:
    """One kind of artifact, as its module declares it.

    ``inner`` marks a stage that transforms a run (learning to rank, re-ranking): it returns the
    run the stage improves on, so naming and the results columns walk through it; ``node(ctx,
    runs)`` builds (or plans) the transform of ``runs[0]`` (the other runs: the candidates it may
    read), and the experiment applies it wherever the config chooses its ``group``. ``tag`` names a
    run of this kind (run stages only); ``columns(params)`` gives its results columns from its
    params, or their empty values from ``None``. ``cost`` names the model :mod:`harness.cost`
    prices it with (``free``, ``passaging``, ``bm25_index``, ``encoding``, ``flat_index``,
    ``search``, ``aggregation``, ``transform``: rows of its parents' runs, ``finetune``: training
    steps, ``scoring``); ``timings`` maps a results column (``index_seconds`` ...) to the ``meta.json``
    fields that feed it, the first present counting. ``schema`` and ``check``: the stage's own
    settings, declared here so that :mod:`harness.settings` and :func:`harness.config.check` need not
    import the stage: the dataclass of its group, and the refusals a type cannot express
    (:func:`harness.config.check` calls every stage's; each returns where its settings are not
    chosen)."""

    kind: str
    root: str  # "indexes" (shared inputs of runs) or "runs": the store's top-level folder
    label: str  # the sweep listing's line
    version: int | None = None  # of the builder (also in the artifact's env, where it keys)
    group: str | None = None  # the conf group whose values are its params (None: always on)
    run: bool = False  # writes a ranking (``run.trec``) a results row can end on
    index: bool = False  # a search index (the listing's "indexes" line)
    combines: bool = False  # a run whose parents are the runs it combines (fusion)
    node: Callable[[Context, list[Artifact]], Artifact] | None = None
    inner: Callable[[Artifact], Artifact] | None = None
    tag: Callable[[Artifact], str] | None = None
    columns: Callable[[dict | None], dict] | None = None
    system: str | None = None  # what a row this stage made adds to its kind of system (plots, page)
    in_fused_input: str | None = None  # why a fusion.runs entry may not set its group ("learned on its own")
    requires: Callable[[Any], list[tuple[str, list[str], str]]] | None = None  # (part, columns, why) its group reads
    cost: str = "transform"
    timings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    schema: type | None = None  # the dataclass of its group's settings (harness.settings adds it to Config)
    check: Callable[[Any], None] | None = None  # check(cfg): ranges and combinations (it returns where unused)


_REGISTRY: dict[str, Stage] = {}
_loaded = False


def register(stage: Stage) -> Stage:
    """Declare a stage (once per kind; re-registering the same declaration is a no-op)."""
    if stage.root not in ("indexes", "runs"):
        raise ValueError(f"stage {stage.kind!r}: root={stage.root!r}; expected 'indexes' or 'runs'")
    old = _REGISTRY.get(stage.kind)
    if old is not None and old != stage:
        raise ValueError(f"stage {stage.kind!r} is declared twice, differently")
    _REGISTRY[stage.kind] = stage
    return stage


def unregister(kind: str) -> None:
    """Forget a stage (tests that register a toy one)."""
    _REGISTRY.pop(kind, None)


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)


# The built-in kinds in data-path order: the order of the sweep listing, of the transforms in a
# chain (learning to rank before re-ranking) and of their results columns. A plugin stage comes
# after the built-in ones and before the scores, in the order it registered.
ORDER = (
    DATASET,
    UNITS,
    LUCENE_SHARD,
    LUCENE,
    EMBEDDING_SHARD,
    ENCODER_MODEL,
    EMBEDDINGS,
    FAISS,
    ENCODER_IDENTITY,
    UNIT_RUN,
    FAMILY_RUN,
    FUSED_RUN,
    LTR_FEATURES,
    LTR_IDENTITY,
    LTR_MODEL,
    LTR_RUN,
    RERANKED_RUN,
    SCORES,
)


def stages() -> list[Stage]:
    """Every registered stage in data-path order (:data:`ORDER`), whatever order they registered in."""
    _load()
    plugin = ORDER.index(SCORES) - 0.5
    ranked = sorted(
        enumerate(_REGISTRY.values()), key=lambda x: (ORDER.index(x[1].kind) if x[1].kind in ORDER else plugin, x[0])
    )
    return [s for _, s in ranked]


def get(kind: str) -> Stage:
    _load()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"Unknown artifact kind {kind!r}; known: {sorted(_REGISTRY)}") from None


def roots() -> dict[str, str]:
    """``{kind: top-level folder}`` of every stage (the store's layout)."""
    return {s.kind: s.root for s in stages()}


def chain(run: Artifact) -> list[Artifact]:
    """A run and the runs its transforms (learning to rank, re-ranking) improve on, the last the
    single or fused run the chain started from."""
    out = [run]
    while (s := get(out[-1].kind)).inner is not None:
        out.append(s.inner(out[-1]))
    return out


class Context(Protocol):
    """What a stage's node function may use of the experiment that runs it: the config, the
    dataset, the store, the dataset's part nodes and :meth:`ensure` (build or reuse, recording
    the node). :class:`harness.experiment.Experiment` is one."""

    cfg: Any
    ds: Any
    store: Any
    plan: bool
    nodes: list[Artifact]
    elsewhere: set[str]

    @property
    def corpus_node(self) -> Artifact: ...

    @property
    def topics_node(self) -> Artifact: ...

    @property
    def qrels_node(self) -> Artifact: ...

    @property
    def encoder(self) -> Any: ...

    def ensure(self, art: Artifact, build: Callable[[Path], dict | None], describe: str) -> Artifact: ...

    def build_later(self, art: Artifact, build: Callable, describe: str) -> Artifact: ...

    def build_now(self, art: Artifact, sink: Any = None) -> Artifact: ...

    def hf_tokenizer(self) -> Any: ...

    def candidate_runs(self) -> list[Artifact]: ...

    def on(self, cfg: Any, dataset: Any) -> Context:
        """The same chain under another config and dataset, in the same store (``ltr.train``)."""
        ...
