"""One experiment as a chain of stages, each an artifact: the data path of the design card.

    corpus -> units -> index -> unit run -> family run -> [fused run] -> [re-ranked run] -> scores
                               topics -^                                       qrels -^

Each stage lives in its own module and owns its parameters, its artifact and its builder:
:func:`harness.passages.node` (units), the backend's ``index`` and ``search``
(:mod:`harness.backends`), :func:`harness.aggregate.node` (family run),
:func:`harness.fuse.node` (fused run), :func:`harness.rerank.node` (domain-aware re-ranking),
:func:`harness.evaluate.node` (scores). Levers are config groups: ``prf`` and ``dense_prf`` change a
backend's search, ``fusion.runs`` fuses any list of runs, ``rerank`` transforms the final run. This module only
chains them and asks the store, through :meth:`Experiment.ensure`, for each artifact. Keys include
only what determines an artifact, so experiments share prefixes: every query view, aggregation and
fusion over one target view shares its index; all four aggregations share one passage run; RRF
reads the family runs the single-backend experiments made.

Run tags and results columns are read off the artifacts' parameters (:mod:`harness.naming`), and
a tag ends in the run artifact's key: two configurations never share a name. ``plan=True`` builds nothing and returns
the same nodes: the sweep listing counts and checks them.
"""

from __future__ import annotations

import logging
from functools import cached_property

from omegaconf import DictConfig, OmegaConf

from . import aggregate, evaluate, faults, fuse, ltr, passages, rerank
from .backends import get as backend
from .config import ConfigError, check  # noqa: F401  (ConfigError: re-exported for callers)
from .data import Dataset
from .data import schema as S
from .data import views as V
from .naming import columns, tag
from .store import Artifact, DamagedArtifact, Store

log = logging.getLogger(__name__)

RUN_KINDS = ("family_run", "fused_run", "ltr_run", "reranked_run")


class Experiment:
    def __init__(self, cfg: DictConfig, dataset: Dataset, store: Store | None = None, plan: bool = False):
        self.metrics = check(cfg)
        self.inputs = self._inputs(cfg)
        for sub in self.inputs:
            backend(str(sub.backend))
        self.cfg, self.ds, self.plan = cfg, dataset, plan
        if getattr(dataset, "positives", None) is not None:  # measures the grades allow, before anything runs
            evaluate.check_grade_scaling(evaluate.parse_measures(self.metrics), dataset.positives)
        if hasattr(dataset, "require"):  # features whose columns the files lack are refused by name
            for sub in self.inputs:
                dataset.require("queries", V.fields(str(sub.query_fields), "query"), f"query_fields={sub.query_fields}")
                dataset.require(
                    "corpus", V.fields(str(sub.target_fields), "target"), f"target_fields={sub.target_fields}"
                )
            if cfg.rerank is not None:
                for part in ("queries", "corpus"):
                    dataset.require(part, [S.IPC3], f"rerank={cfg.rerank.method}")
            if cfg.get("ltr") is not None and "ipc" in cfg.ltr.features:
                for part in ("queries", "corpus"):
                    dataset.require(part, [S.IPC3], "ltr.features=[..., ipc]")
        self.store = store or Store.from_config(cfg)
        self.nodes: list[Artifact] = []
        self.later: dict[str, tuple] = {}
        self.encoders: dict[str, object] = {}  # one loaded encoder per encoder config, shared with parts
        self.elsewhere: set[str] = set()  # keys of nodes built for another dataset (ltr.train): not timed here

    def ensure(self, art: Artifact, build, describe: str) -> Artifact:
        """Record ``art`` as a node of this experiment and, unless planning, build or reuse it."""
        if art in self.nodes:  # already planned or built by this experiment
            return art
        if not self.plan:
            self.store.ensure(art, build, describe)
            faults.hold(f"after-{art.kind}")
        self.nodes.append(art)
        return art

    def build_later(self, art: Artifact, build, describe: str) -> Artifact:
        """Record ``art`` as a node whose build (``build(tmp, sink)``) a later stage starts."""
        if art not in self.nodes:
            self.nodes.append(art)
        self.later[art.key] = (build, describe)
        return art

    def build_now(self, art: Artifact, sink=None) -> Artifact:
        """Build (or reuse) an artifact recorded by :meth:`build_later`."""
        build, describe = self.later[art.key]
        if not self.plan:
            self.store.ensure(art, lambda tmp: build(tmp, sink), describe)
        return art

    @staticmethod
    def _inputs(cfg) -> list[DictConfig]:
        """The configs of the runs this experiment fuses (itself when it fuses nothing)."""
        f = cfg.fusion
        if f is None:
            return [cfg]
        if f.runs:
            return [fuse.run_config(cfg, r) for r in f.runs]
        return [fuse.run_config(cfg, {"backend": str(b)}) for b in f.backends]

    def part(self, cfg: DictConfig) -> Experiment:
        """The same experiment (store, dataset, nodes) under one input run's config."""
        if cfg is self.cfg:
            return self
        child = Experiment.__new__(Experiment)
        child.cfg, child.ds, child.plan, child.store, child.nodes = cfg, self.ds, self.plan, self.store, self.nodes
        child.metrics, child.inputs, child.later, child.encoders = self.metrics, [cfg], self.later, self.encoders
        child.elsewhere = self.elsewhere
        for part in ("corpus_node", "topics_node", "qrels_node"):
            child.__dict__[part] = getattr(self, part)
        return child

    # One node per part of the dataset, so that an edit rebuilds only what reads that part: the
    # corpus keys units (and so indexes, embeddings and everything after), the topics key runs, the
    # qrels (as scored: positives, grades, IN/OUT, judged non-relevant) key scores.
    @cached_property
    def corpus_node(self) -> Artifact:
        return Artifact("dataset", {"part": "corpus", "fingerprint": self.ds.corpus_fingerprint})

    @cached_property
    def topics_node(self) -> Artifact:
        return Artifact("dataset", {"part": "topics", "fingerprint": self.ds.topics_fingerprint})

    @cached_property
    def qrels_node(self) -> Artifact:
        return Artifact("dataset", {"part": "qrels", "fingerprint": self.ds.qrels_digest})

    # ------------------------------------------------------------------ the chain
    def unit_run(self, name: str) -> Artifact:
        be = backend(name)
        index = be.index(self, self.units(be))
        params = {
            "query_view": str(self.cfg.query_fields),
            "depth": int(self.cfg.search.depth),
            "backend": name,
            **be.run_params(self),
        }
        art = Artifact("unit_run", params, (index, self.topics_node), be.search_env(self))

        def build(tmp):
            from .runs import write_trec

            topics = V.query_texts(self.ds.queries, params["query_view"])
            try:
                run, seconds, empty = be.search(self, index, topics, params)
            except Exception as e:  # noqa: BLE001  (pyjnius raises JavaException for Lucene's errors)
                if is_damaged(e):
                    raise DamagedArtifact(
                        index, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                    ) from e
                raise
            if empty:
                log.warning(
                    "%d queries have an empty %s text and retrieve nothing (score 0), e.g. %s",
                    len(empty),
                    params["query_view"],
                    empty[:3],
                )
            write_trec(run, tmp / "run.trec", f"units-{art.key}")
            return {
                "search_seconds": round(seconds, 3),
                "queries": len(topics),
                "empty_queries": empty,
                "seconds_per_query": round(seconds / max(1, len(topics) - len(empty)), 5),
            }

        try:
            return self.ensure(art, build, f"{name} search")
        except DamagedArtifact as e:  # e.g. Lucene's CorruptIndexException: rebuild the index once
            self.store.discard(e.artifact, str(e))
            self.nodes.remove(e.artifact)
            be.index(self, self.units(be))
            return self.ensure(art, build, f"{name} search")

    def family_run(self, name: str) -> Artifact:
        return aggregate.node(self, self.unit_run(name))

    def candidate_runs(self) -> list[Artifact]:
        """The family run, or the fusion of the input runs followed by those runs: what learning to
        rank takes its candidates and run features from (the first is the run it improves on)."""
        if self.cfg.fusion is not None:
            parts = [self.part(sub).family_run(str(sub.backend)) for sub in self.inputs]
            return [fuse.node(self, parts), *parts]
        return [self.family_run(str(self.cfg.backend))]

    def final_run(self) -> Artifact:
        """The candidate runs' first; then learning to rank over them, and the domain-aware
        re-ranking, where chosen."""
        runs = self.candidate_runs()
        run = ltr.node(self, runs) if self.cfg.get("ltr") is not None else runs[0]
        return rerank.node(self, run) if self.cfg.rerank is not None else run

    def scores(self) -> Artifact:
        return evaluate.node(self, self.final_run())

    # ------------------------------------------------------------------ helpers for stages
    @property
    def encoder(self):
        """The dense encoder of this config, loaded once per experiment and its fused parts."""
        from .backends.dense import make_encoder

        key = repr(OmegaConf.to_container(self.cfg.encoder, resolve=True, enum_to_str=True))
        if key not in self.encoders:
            self.encoders[key] = make_encoder(self.cfg.encoder)
        return self.encoders[key]

    def units(self, be) -> Artifact:
        """The units of a backend: built now, or (``streams_units``) by the backend while it indexes."""
        return passages.node(self, be, build=not getattr(be, "streams_units", False))

    def hf_tokenizer(self):
        from transformers import AutoTokenizer

        from . import fast_tier_guard

        fast_tier_guard("encoder tokenizer")

        from .backends.dense import resolve_model

        return AutoTokenizer.from_pretrained(resolve_model(self.cfg.encoder.model, self.cfg.encoder.revision))

    def tag(self, run: Artifact) -> str:
        return tag(run)

    def timings(self) -> dict:
        """Index, encoding and query time of this experiment, read from its artifacts' meta.json."""
        out = {"index_seconds": 0.0, "encode_seconds": 0.0, "search_seconds": 0.0, "seconds_per_query": 0.0}
        for n in self.nodes:
            if n.kind == "dataset" or n.key in self.elsewhere or not self.store.exists(n):
                continue
            m = self.store.meta(n)
            if n.kind in ("lucene", "faiss"):
                out["index_seconds"] += m.get("index_seconds", m.get("build_seconds", 0.0))
            elif n.kind == "embeddings":
                out["encode_seconds"] += m.get("encode_seconds", 0.0)
            elif n.kind == "unit_run":
                out["search_seconds"] += m.get("search_seconds", 0.0)
                out["seconds_per_query"] += m.get("seconds_per_query", 0.0)
        return {k: round(v, 5) for k, v in out.items()}


def is_damaged(error: Exception) -> bool:
    """Whether a search error means the index files are damaged (Lucene or Faiss), not the query."""
    from .store import MissingFiles

    if isinstance(error, MissingFiles):
        return True
    text = f"{type(error).__name__} {error}"
    return any(
        k in text
        for k in (
            "CorruptIndexException",
            "IndexFormatTooOld",
            "IndexFormatTooNew",
            "EOFException",
            "NoSuchFileException",
            "FileNotFoundException",
            "Error in faiss::",
            "read error",
        )
    )


def run_experiment(cfg: DictConfig, dataset: Dataset, store: Store | None = None) -> dict:
    """Build (or reuse) everything one experiment needs and return its results-table row."""
    exp = Experiment(cfg, dataset, store)
    scores = exp.scores()
    run = scores.parents[0]
    meta = exp.store.meta(scores)
    name = tag(run)
    learned = next((n for n in exp.nodes if n.kind == "ltr_run" and n in (run, *run.parents)), None)
    return {
        "experiment": cfg.get("name") or name,
        "dataset": dataset.name,
        **columns(run),
        # families the identity check flagged and ltr.allow_identifying let through (harness.ltr)
        "ltr_identifying": ",".join(exp.store.meta(learned).get("identifying", [])) or None if learned else None,
        "tag": name,
        "metrics": exp.metrics,
        **meta["means"],
        **exp.timings(),
        **{f"queries_{s}": meta["queries"].get(s) for s in ("ALL", "IN", "OUT")},
        "run_file": str(exp.store.path(run) / "run.trec"),
        "scores_key": scores.key,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }
