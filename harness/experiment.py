"""One experiment as a chain of stages, each an artifact: the data path of the design card.

    corpus -> units -> index -> unit run -> family run -> [fused run] -> [learned run] -> [re-ranked run] -> scores
                               topics -^                                                           qrels -^

Each stage lives in its own module, declares itself in the registry (:mod:`harness.stage`) and owns
its parameters, its artifact and its builder: :mod:`harness.passages` (units), the backend's index
(:mod:`harness.backends`), :mod:`harness.search` (unit run), :mod:`harness.aggregate` (family run),
:mod:`harness.fuse` (fused run), :mod:`harness.ltr` (learned run), :mod:`harness.rerank`
(domain-aware re-ranking), :mod:`harness.evaluate` (scores). This module chains them: it reads the
config, hands each stage the values, files and tables it uses, and asks the store, through
:meth:`Experiment.ensure`, for each artifact. The stages that build others on the way (a backend's
index and embeddings, learning to rank's features and checks) receive the experiment as a
:class:`harness.stage.Context`, never import it. Keys include only what determines an artifact,
so experiments share prefixes: every query view, aggregation and fusion over one target view
shares its index; all four aggregations share one passage run; RRF reads the family runs the
single-backend experiments made.

Run tags and results columns are read off the artifacts' parameters (:mod:`harness.naming`, as
each run stage names itself), and a tag ends in the run artifact's key: two configurations never
share a name. ``plan=True`` builds nothing and returns the same nodes: the sweep listing counts and
checks them.
"""

from __future__ import annotations

import logging
from functools import cached_property

from omegaconf import DictConfig, OmegaConf

from . import aggregate, evaluate, fast_tier_guard, faults, fuse, ltr, manifest, rerank, search, stage, tuned  # noqa: F401  (ltr, rerank: registered transforms)
from .artifact import Artifact
from .backends import get as backend
from .backends.dense import make_encoder, resolve_dtype
from .config import ConfigError, check, fusion_weights, run_config  # noqa: F401  (ConfigError: re-exported)
from .data import Dataset
from .data import views as V
from .models import resolve_model
from .naming import columns, tag
from .search import is_damaged  # noqa: F401  (re-exported for callers)
from .store import Store

log = logging.getLogger(__name__)

# The dense encoders loaded in this process, one per encoder config: a sweep's experiments share
# them (loading a model and warming it up costs seconds each; its vectors do not depend on who
# asked, and its weights are read-only).
ENCODERS: dict[str, object] = {}


class Experiment:
    def __init__(self, cfg: DictConfig, dataset: Dataset, store: Store | None = None, plan: bool = False):
        check(cfg)
        self.metrics = evaluate.canonical(cfg.metrics)
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
            for s in stage.stages():  # what a chosen stage reads of the data (re-ranking: IPC3 codes)
                if s.requires is not None and s.group and cfg.get(s.group) is not None:
                    for part, fields, what in s.requires(cfg.get(s.group)):
                        dataset.require(part, fields, what)
        self.store = store or Store.from_config(cfg)
        self.nodes: list[Artifact] = []
        self.later: dict[str, tuple] = {}
        self.encoders = ENCODERS  # one loaded encoder per encoder config in this process
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
            return [run_config(cfg, r) for r in f.runs]
        return [run_config(cfg, {"backend": str(b)}) for b in f.backends]

    def on(self, cfg: DictConfig, dataset: Dataset) -> Experiment:
        """The same chain under another config and dataset, in the same store (``ltr.train``)."""
        return Experiment(cfg, dataset, self.store, plan=self.plan)

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
        return search.node(self, name)

    def family_run(self, name: str) -> Artifact:
        cfg = self.cfg
        unit_run = self.unit_run(name)
        method = "identity" if str(cfg.granularity) == "document" else str(cfg.aggregation)
        art = aggregate.artifact(unit_run, method, int(cfg.search.k), bool(self.ds.self_ids))
        run_file, depth = self.store.path(unit_run) / "run.trec", int(cfg.search.depth)
        return self.ensure(
            art, lambda tmp: aggregate.build(tmp, art, run_file, self.ds.self_ids, depth), f"{method} family run"
        )

    def fused_run(self, parts: list[Artifact]) -> Artifact:
        f = self.cfg.fusion
        art = fuse.artifact(parts, fuse.params_of(f, int(self.cfg.search.k), fusion_weights(f)))
        files = [self.store.path(p) / "run.trec" for p in parts]
        return self.ensure(art, lambda tmp: fuse.build(tmp, art, files), fuse.describe(art))

    def candidate_runs(self) -> list[Artifact]:
        """The family run, or the fusion of the input runs followed by those runs: what learning to
        rank takes its candidates and run features from (the first is the run it improves on)."""
        if self.cfg.fusion is not None:
            parts = [self.part(sub).family_run(str(sub.backend)) for sub in self.inputs]
            return [self.fused_run(parts), *parts]
        return [self.family_run(str(self.cfg.backend))]

    def final_run(self) -> Artifact:
        """The candidate runs' first, then each transform stage whose conf group is chosen, in the
        registry's order (learning to rank over the candidates, then the domain-aware re-ranking):
        each receives the current run first, then the candidate runs it may read."""
        runs = self.candidate_runs()
        for s in stage.stages():
            if s.inner is not None and s.node is not None and s.group and self.cfg.get(s.group) is not None:
                runs = [s.node(self, runs), *runs[1:]]
        return runs[0]

    def scores(self) -> Artifact:
        run = self.final_run()
        art = evaluate.artifact(run, self.qrels_node, self.metrics)

        def build(tmp):
            run_dir = self.store.path(run)
            about = manifest.build(
                self.cfg,
                self.ds.source,
                self.nodes + [art],
                self.store.meta(run)["tag"],
                run_dir / "run.trec",
                self.timings(),
            )
            return evaluate.build(tmp, run_dir, self.ds, self.metrics, about)

        return self.ensure(art, build, "scores")

    # ------------------------------------------------------------------ what stages ask of the context
    @property
    def encoder(self):
        """The dense encoder of this config, loaded once per process (:data:`ENCODERS`)."""
        key = repr(OmegaConf.to_container(self.cfg.encoder, resolve=True, enum_to_str=True))
        if key not in self.encoders:
            self.encoders[key] = make_encoder(self.cfg.encoder)
        return self.encoders[key]

    def hf_tokenizer(self):
        from transformers import AutoTokenizer  # heavy: only where windows are cut by the encoder's tokenizer

        fast_tier_guard("encoder tokenizer")
        return AutoTokenizer.from_pretrained(resolve_model(self.cfg.encoder.model, self.cfg.encoder.revision))

    def timings(self) -> dict:
        """Index, encoding and query time of this experiment, read from its artifacts' meta.json
        (each stage says which of its fields feed which column)."""
        out = {"index_seconds": 0.0, "encode_seconds": 0.0, "search_seconds": 0.0, "seconds_per_query": 0.0}
        for n in self.nodes:
            fields = stage.get(n.kind).timings
            if not fields or n.key in self.elsewhere or not self.store.exists(n):
                continue
            m = self.store.meta(n)
            for column, keys in fields.items():
                out[column] += next((m[k] for k in keys if k in m), 0.0)
        return {k: round(v, 5) for k, v in out.items()}


def encoder_dtype(cfg: DictConfig, nodes) -> dict:
    """The dtype the encoders ran in, as their embeddings are keyed (every one of an ensemble's,
    once each), and why the experiment's resolved as it did (``encoder.dtype=auto`` resolves per
    device), for a row whose experiment encodes anything; empty otherwise."""
    dtypes = dict.fromkeys(str(n.params["dtype"]) for n in nodes if n.kind == stage.EMBEDDINGS)
    if not dtypes:
        return {}
    why = resolve_dtype(str(cfg.encoder.dtype), str(cfg.encoder.device))[1]
    return {"encoder_dtype": "+".join(dtypes), "encoder_dtype_reason": why}


def run_experiment(cfg: DictConfig, dataset: Dataset, store: Store | None = None) -> dict:
    """Build (or reuse) everything one experiment needs and return its results-table row."""
    exp = Experiment(cfg, dataset, store)
    scores = exp.scores()
    run = scores.parents[0]
    meta = exp.store.meta(scores)
    name = tag(run)
    identifying = [f for n in stage.chain(run) for f in exp.store.meta(n).get("identifying", [])]
    # what a model trained on other judgments shares with these (harness.leakage), where one was
    audit: dict = next((m["leakage"] for m in map(exp.store.meta, stage.chain(run)) if "leakage" in m), {})
    return {
        "experiment": cfg.get("name") or name,
        "dataset": dataset.name,
        **columns(run),
        # families the identity check flagged and ltr.allow_identifying let through (harness.ltr)
        "ltr_identifying": ",".join(identifying) or None,
        **audit,
        "tag": name,
        "metrics": exp.metrics,
        **meta["means"],
        **exp.timings(),
        **{f"queries_{s}": meta["queries"].get(s) for s in ("ALL", "IN", "OUT")},
        **encoder_dtype(cfg, exp.nodes),
        # a fine-tuned encoder's identity check and the never-shown view (harness.tuned), where one ran
        **tuned.row_columns(exp.store, exp.nodes, exp.store.path(run) / "run.trec", dataset),
        "run_file": str(exp.store.path(run) / "run.trec"),
        "scores_key": scores.key,
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
    }
