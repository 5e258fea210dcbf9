"""One experiment as a chain of artifacts: the data path of the design card, made concrete.

    dataset -> units -> index -> unit run -> family run -> [fused run] -> scores

Each method below names its artifact (:class:`harness.store.Artifact`: kind, parameters, parents)
and, unless planning only, asks the store for it, building it if no finished copy exists. Keys
include only what determines the artifact, so experiments share prefixes: every query view,
aggregation and fusion over one target view shares its index; all four aggregations share one
passage run; RRF reads the family runs the single-backend experiments made.

``plan=True`` builds nothing and returns the same nodes: the sweep listing counts and checks them.
"""
from __future__ import annotations

import logging
import time
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from . import passages as P
from .aggregate import AGGREGATIONS
from .data import Dataset
from .data import views as V
from .store import Artifact, DamagedArtifact, Store

log = logging.getLogger(__name__)

BACKENDS = ("bm25", "dense")
GRANULARITIES = ("document", "passage")


class ConfigError(ValueError):
    """A config value the harness cannot run with; the message names the key and the fix."""


def _choice(value, allowed, key):
    if value not in allowed:
        raise ConfigError(f"{key}={value!r}: expected one of {list(allowed)}.")
    return value


def _number(value, key: str, low: float, high: float | None = None, hint: str = "") -> float:
    """A real number in [low, high], checked here rather than by Java after the JVM has started."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{key}={value!r}: expected a number{hint}.")
    if value < low or (high is not None and value > high) or value == float("inf"):
        span = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{key}={value!r}: expected a number {span}{hint}.")
    return float(value)


def check_metrics(metrics) -> list[str]:
    """Canonical ir-measures names of ``metrics``; a ConfigError before any artifact is built."""
    from .evaluate import parse_measures

    try:
        return [str(m) for m in parse_measures(metrics)]
    except ValueError as e:
        raise ConfigError(str(e)) from e


def check_config(cfg: DictConfig) -> list[str]:
    """Every config value the experiment depends on, checked before anything is loaded or built.
    Returns the canonical metric names."""
    granularity = _choice(cfg.granularity.level, GRANULARITIES, "granularity")
    V.fields(cfg.query_fields.name, "query")
    V.fields(cfg.target_fields.name, "target")
    if granularity == "passage":
        P.check(cfg.passage.length, cfg.passage.stride)
    for key in ("depth", "k"):
        if not isinstance(cfg.search[key], int) or cfg.search[key] < 1:
            raise ConfigError(f"search.{key}={cfg.search[key]!r}: expected a positive integer.")
    if cfg.search.depth < cfg.search.k:
        raise ConfigError(f"search.depth={cfg.search.depth} < search.k={cfg.search.k}: retrieve at least k units.")
    if cfg.fusion.get("enabled"):
        backends = list(cfg.fusion.backends)
        if len(set(backends)) < 2 or any(b not in BACKENDS for b in backends):
            raise ConfigError(f"fusion.backends={backends}: RRF fuses at least two different backends of {list(BACKENDS)}.")
        if not isinstance(cfg.fusion.k, int) or cfg.fusion.k < 0:
            raise ConfigError(f"fusion.k={cfg.fusion.k!r}: expected a non-negative integer (paper: 10, 30, 60, 100).")
        _choice(cfg.fusion.method, ("rrf",), "fusion.method")
    if granularity == "passage" or cfg.fusion.get("enabled"):
        _choice(cfg.aggregation.name, AGGREGATIONS, "aggregation")
    _choice(cfg.backend.name, BACKENDS, "backend")
    _number(cfg.bm25.k1, "bm25.k1", 0.0, hint=" (Anserini default 0.9, paper 1.2)")
    _number(cfg.bm25.b, "bm25.b", 0.0, 1.0, hint=" (Anserini default 0.4, paper 0.75)")
    _choice(cfg.encoder.pooling, ("mean", "cls"), "encoder.pooling")
    _choice(cfg.dense.get("quantization", "none"), ("none", "int8"), "dense.quantization")
    return check_metrics(cfg.metrics)


class Experiment:
    def __init__(self, cfg: DictConfig, dataset: Dataset, store: Store | None = None, plan: bool = False):
        self.cfg = cfg
        self.ds = dataset
        self.store = store or Store.from_config(cfg)
        self.plan = plan
        self.nodes: list[Artifact] = []
        self.granularity = cfg.granularity.level
        self.metrics = check_config(cfg)

    # ------------------------------------------------------------------ nodes
    def _ensure(self, art: Artifact, build, describe: str) -> Artifact:
        if art in self.nodes:  # already planned or built by this experiment
            return art
        if not self.plan:
            self.store.ensure(art, build, describe)
        self.nodes.append(art)
        return art

    @cached_property
    def dataset_node(self) -> Artifact:
        return Artifact("dataset", {"fingerprint": self.ds.fingerprint})

    def tokenizer(self, backend: str) -> str:
        t = self.cfg.passage.get("tokenizer", "auto")
        if t == "auto":
            return "encoder" if backend == "dense" else "words"
        return _choice(t, ("words", "encoder"), "passage.tokenizer")

    def encoder_params(self) -> dict:
        e = self.cfg.encoder
        return {"model": e.model, "revision": e.get("revision"), "pooling": e.pooling, "normalize": bool(e.normalize),
                "max_length": int(e.max_length)}

    def units(self, backend: str) -> Artifact:
        params = {"view": self.cfg.target_fields.name, "granularity": self.granularity}
        if self.granularity == "passage":
            tok = self.tokenizer(backend)
            params |= {"length": int(self.cfg.passage.length),
                       "stride": P.check(self.cfg.passage.length, self.cfg.passage.stride), "tokenizer": tok}
            if tok == "encoder":
                params["encoder_tokenizer"] = self.cfg.encoder.model
        art = Artifact("units", params, (self.dataset_node,))

        def build(tmp: Path):
            splitter = None
            if self.granularity == "passage":
                hf = self._hf_tokenizer() if params["tokenizer"] == "encoder" else None
                splitter = P.make_splitter(params["tokenizer"], params["length"], params["stride"], hf)
            docs = V.target_texts(self.ds.corpus, params["view"])
            return P.write_units(P.units(docs, splitter), tmp, total=self.ds.n_docs)

        return self._ensure(art, build, f"{self.granularity} units ({params['view']})")

    def index(self, backend: str) -> Artifact:
        units = self.units(backend)
        if backend == "bm25":
            from . import lucene

            art = Artifact("lucene", {"generator": "DefaultLuceneDocumentGenerator", "analyzer": "default"}, (units,))
            return self._ensure(art, lambda tmp: lucene.build_index(self.store.path(units), tmp / "index",
                                                                    self.cfg.index.threads), "BM25 index")
        e = self.cfg.encoder
        emb = Artifact("embeddings", {**self.encoder_params(), "doc_prefix": e.doc_prefix or ""}, (units,))
        from . import dense

        self._ensure(emb, lambda tmp: dense.encode_units(self.store.path(units), tmp, self.encoder, e.doc_prefix or ""),
                     "embeddings")
        q = self.cfg.dense.get("quantization", "none")
        art = Artifact("faiss", {"type": "flat_ip", "quantization": q}, (emb,))
        return self._ensure(art, lambda tmp: dense.build_faiss(self.store.path(emb), tmp, q), "Faiss index")

    def topics(self) -> dict[str, str]:
        return V.query_texts(self.ds.queries, self.cfg.query_fields.name)

    def unit_run(self, backend: str) -> Artifact:
        index = self.index(backend)
        params = {"query_view": self.cfg.query_fields.name, "depth": int(self.cfg.search.depth), "backend": backend}
        if backend == "bm25":
            params |= {"k1": float(self.cfg.bm25.k1), "b": float(self.cfg.bm25.b)}
        else:
            params |= {"query_prefix": self.cfg.encoder.query_prefix or ""}
        art = Artifact("unit_run", params, (index, self.dataset_node))

        def build(tmp: Path):
            from .runs import write_trec

            topics = self.topics()
            if backend == "bm25":
                from . import lucene

                search = lambda: lucene.search(self.store.path(index) / "index", topics, params["k1"], params["b"],  # noqa: E731
                                               params["depth"], self.cfg.search.threads,
                                               self.cfg.bm25.get("max_clauses", 65536))
            else:
                from . import dense

                search = lambda: dense.search(self.store.path(index), topics, self.encoder, params["query_prefix"],  # noqa: E731
                                              params["depth"], self.cfg.search.threads)
            try:
                run, seconds, empty = search()
            except Exception as e:  # noqa: BLE001  (pyjnius raises JavaException for Lucene's errors)
                if is_damaged(e):
                    raise DamagedArtifact(index, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
                raise
            if empty:
                log.warning("%d queries have an empty %s text and retrieve nothing (score 0), e.g. %s",
                            len(empty), params["query_view"], empty[:3])
            write_trec(run, tmp / "run.trec", f"units-{art.key}")
            return {"search_seconds": round(seconds, 3), "queries": len(topics), "empty_queries": empty,
                    "seconds_per_query": round(seconds / max(1, len(topics) - len(empty)), 5)}

        try:
            return self._ensure(art, build, f"{backend} search")
        except DamagedArtifact as e:  # e.g. Lucene's CorruptIndexException: rebuild the index once
            self.store.discard(e.artifact, str(e))
            self.nodes.remove(e.artifact)
            self.index(backend)
            return self._ensure(art, build, f"{backend} search")

    def family_run(self, backend: str) -> Artifact:
        unit_run = self.unit_run(backend)
        method = "identity" if self.granularity == "document" else self.cfg.aggregation.name
        k = int(self.cfg.search.k)
        params = {"aggregation": method, "k": k}
        if self.ds.self_ids:  # only datasets whose queries are also documents carry the flag
            params["drop_self_hits"] = True
        art = Artifact("family_run", params, (unit_run,))

        def build(tmp: Path):
            from .aggregate import aggregate
            from .runs import drop_self_hits, read_trec, top_k, write_trec

            run = aggregate(read_trec(self.store.path(unit_run) / "run.trec"), method)
            dropped = 0
            if self.ds.self_ids:
                run, dropped = drop_self_hits(run, self.ds.self_ids)
                log.info("dropped %d self-hit(s): queries whose own id is retrieved (dataset.drop_self_hits)", dropped)
            run = top_k(run, k)
            short = run.groupby("query_id").size()
            if (short < k).any() and self.granularity == "passage":
                log.warning("%d queries have fewer than %d families after aggregation: raise search.depth (now %d)",
                            int((short < k).sum()), k, self.cfg.search.depth)
            t0 = time.perf_counter()
            write_trec(run, tmp / "run.trec", self.tag(backend, art.key))
            return {"aggregate_seconds": round(time.perf_counter() - t0, 3), "tag": self.tag(backend, art.key),
                    "self_hits_dropped": dropped}

        return self._ensure(art, build, f"{method} family run")

    def fused_run(self) -> Artifact:
        f = self.cfg.fusion
        parts = [self.family_run(b) for b in f.backends]
        params = {"method": f.method, "k": int(f.k), "depth": int(f.depth),
                  "out_k": int(self.cfg.search.k)}
        art = Artifact("fused_run", params, tuple(parts))

        def build(tmp: Path):
            from .fuse import rrf
            from .runs import read_trec, write_trec

            runs = [read_trec(self.store.path(p) / "run.trec") for p in parts]
            write_trec(rrf(runs, params["k"], params["depth"], params["out_k"]), tmp / "run.trec", self.tag(None, art.key))
            return {"tag": self.tag(None, art.key)}

        return self._ensure(art, build, "RRF fused run")

    def final_run(self) -> Artifact:
        if self.cfg.fusion.get("enabled"):
            return self.fused_run()
        return self.family_run(self.cfg.backend.name)

    def scores(self) -> Artifact:
        run = self.final_run()
        metrics = self.metrics
        # format 2: the folder holds manifest.json too
        art = Artifact("scores", {"metrics": metrics, "qrels": self.ds.qrels_digest, "format": 3},
                       (run, self.dataset_node))

        def build(tmp: Path):
            from .evaluate import means, score
            from .runs import read_trec

            from . import manifest
            from .store import write_json_atomic

            run_file = self.store.path(run) / "run.trec"
            table = score(read_trec(run_file), self.ds, metrics)
            table.to_csv(tmp / "per_query.csv", index=False)
            write_json_atomic(tmp / "manifest.json", manifest.build(self, run_file, self.store.meta(run)["tag"]))
            m = means(table)
            m.to_csv(tmp / "means.csv", index=False)
            return {"means": {f"{r.measure}/{r.subset}": r.mean for r in m.itertuples()},
                    "queries": {r.subset: int(r.queries) for r in m.itertuples()}}

        return self._ensure(art, build, "scores")

    # ------------------------------------------------------------------ helpers
    def tag(self, backend: str | None = None, key: str | None = None) -> str:
        """A readable run tag (backend, views, granularity, aggregation), suffixed with the run
        artifact's key when given, so two configurations never share a tag."""
        suffix = f".{key[:8]}" if key else ""
        return self._readable_tag(backend) + suffix

    def _readable_tag(self, backend: str | None = None) -> str:
        c = self.cfg
        gran = "doc" if self.granularity == "document" else f"p{c.passage.length}"
        if self.granularity == "passage" and c.passage.stride not in (None, 0, c.passage.length):
            gran += f"s{c.passage.stride}"
        agg = "" if self.granularity == "document" else f".{c.aggregation.name}"
        if backend is None and c.fusion.get("enabled"):
            return f"rrf{c.fusion.k}-{'+'.join(c.fusion.backends)}.{c.query_fields.name}-{c.target_fields.name}.{gran}{agg}"
        return f"{backend or c.backend.name}.{c.query_fields.name}-{c.target_fields.name}.{gran}{agg}"

    @cached_property
    def encoder(self):
        from .dense import Encoder

        e = self.cfg.encoder
        return Encoder(e.model, e.get("revision"), e.pooling, bool(e.normalize), int(e.max_length), int(e.batch_size),
                       e.get("device", "auto"), e.get("dtype", "float32"), bool(e.get("trust_remote_code", False)))

    def _hf_tokenizer(self):
        from transformers import AutoTokenizer

        from .dense import resolve_model

        return AutoTokenizer.from_pretrained(resolve_model(self.cfg.encoder.model, self.cfg.encoder.get("revision")))

    def timings(self) -> dict:
        """Index, encoding and query time of this experiment, read from its artifacts' meta.json."""
        out = {"index_seconds": 0.0, "encode_seconds": 0.0, "search_seconds": 0.0, "seconds_per_query": 0.0}
        for n in self.nodes:
            if n.kind == "dataset" or not self.store.exists(n):
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

    def config_columns(self) -> dict:
        c = self.cfg
        fused = bool(c.fusion.get("enabled"))
        return {
            "experiment": c.get("name") or self.tag(), "dataset": self.ds.name, "query_fields": c.query_fields.name,
            "target_fields": c.target_fields.name, "granularity": self.granularity,
            "passage_length": int(c.passage.length) if self.granularity == "passage" else None,
            "passage_stride": P.check(c.passage.length, c.passage.stride) if self.granularity == "passage" else None,
            "aggregation": c.aggregation.name if self.granularity == "passage" else None,
            "backend": "+".join(c.fusion.backends) if fused else c.backend.name,
            "fusion": c.fusion.method if fused else None, "fusion_k": int(c.fusion.k) if fused else None,
            "bm25_k1": float(c.bm25.k1), "bm25_b": float(c.bm25.b), "encoder": c.encoder.model,
        }


def is_damaged(error: Exception) -> bool:
    """Whether a search error means the index files are damaged (Lucene or Faiss), not the query."""
    from .store import MissingFiles

    if isinstance(error, MissingFiles):
        return True
    text = f"{type(error).__name__} {error}"
    return any(k in text for k in ("CorruptIndexException", "IndexFormatTooOld", "IndexFormatTooNew", "EOFException",
                                   "NoSuchFileException", "FileNotFoundException", "Error in faiss::", "read error"))


def run_experiment(cfg: DictConfig, dataset: Dataset, store: Store | None = None) -> dict:
    """Build (or reuse) everything one experiment needs and return its results-table row."""
    exp = Experiment(cfg, dataset, store)
    scores = exp.scores()
    meta = exp.store.meta(scores)
    final = exp.final_run()
    row = {**exp.config_columns(), "tag": exp.store.meta(final)["tag"], **meta["means"], **exp.timings(),
           "queries_ALL": meta["queries"].get("ALL"), "queries_IN": meta["queries"].get("IN"),
           "queries_OUT": meta["queries"].get("OUT"),
           "run_file": str(exp.store.path(final) / "run.trec"), "scores_key": scores.key,
           "config": OmegaConf.to_container(cfg, resolve=True)}
    return row
