"""Dense retrieval: encode units and queries, build Faiss indexes, search them.

Encoding uses pyserini's ``AutoDocumentEncoder`` (mean or CLS pooling, optional L2 norm, a text
prefix), so vectors are exactly pyserini's. Around it we add what makes it usable on a CPU:

* ``torch.inference_mode()`` (pyserini's ``encode`` builds an autograd graph it never uses) and
  batches sorted by token length, so each batch pads to its own longest text, not to a random
  long one. Measured on 2,000 CACM abstracts with all-MiniLM-L6-v2: bare AutoDocumentEncoder 28
  docs/s; sentence-transformers' ``encode`` 148 docs/s; the same vectors to 2e-7. ``bench/`` prints
  the ratio of this module against sentence-transformers on the same texts;
* a progress bar, a GPU when one is present (``encoder.device=auto``), and bfloat16 where the
  device computes it natively (``encoder.dtype=auto``, :func:`resolve_dtype`): on such a CPU it
  encodes two to three times as fast as float32 with the same rankings to the third decimal
  (docs/benchmarks.md, ``bench/encoding.py``); elsewhere emulated bfloat16 is slower, so auto
  stays on float32. The resolved dtype keys the embeddings, so the two never mix;
* a warning with the numbers when texts are longer than ``encoder.max_length`` (they are truncated).

Indexes are Faiss flat inner-product (exact search; with L2-normalised vectors, cosine), in
pyserini's ``FaissSearcher`` layout (``index`` + ``docid``), optionally int8 scalar-quantised as in
the paper; search is ``FaissSearcher.batch_search`` on pre-encoded queries.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from .. import env, fast_tier_guard, shards, stage
from ..artifact import Artifact
from ..console import inner_bars
from ..data.digest import default_cache
from ..errors import ConfigError
from ..faults import point
from ..models import PACKAGED, resolve_model
from ..passages import read_units
from ..runs import from_hits
from ..stage import Context, Stage, register
from ..store import MissingFiles

log = logging.getLogger(__name__)

# Versions of this module's builders (harness.env): bump when a change alters what they write.
# The fine-tuned encoders' index and search (harness.tuned installs itself here when the registry
# loads the built-in stages: dense never imports it, so the two cannot form a circle).
TUNED: Any = None


def tuned():
    stage.get(stage.ENCODER_MODEL)  # loads the built-in stages, harness.tuned among them
    return TUNED


EMBED_VERSION = 1
FAISS_VERSION = 1
SEARCH_VERSION = 1


def resolve_device(device: str = "auto") -> str:
    """``auto``: the first GPU where torch sees one, else the CPU."""
    device = str(device)
    if device != "auto":
        return device
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def usable_device(device: str) -> str:
    """:func:`resolve_device`, refusing a CUDA device torch cannot see, in one line, where the
    model would load (a sweep may plan on a machine without the GPU its Slurm jobs get)."""
    device = resolve_device(device)
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"encoder.device={device}: torch sees no CUDA device here (torch {torch.__version__}, "
            f"{'a CPU build' if torch.version.cuda is None else 'CUDA ' + str(torch.version.cuda)}). "
            "Fix: encoder.device=auto (the GPU where there is one) or encoder.device=cpu."
        )
    return device


def native_bf16(device: str) -> tuple[bool, str]:
    """Whether ``device`` computes bfloat16 natively, and what says so: CUDA's own check on a GPU;
    on a CPU, torch's report of AVX512_BF16 or AMX (its oneDNN kernels use them)."""
    import torch

    if device.startswith("cuda"):
        ok = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        return ok, f"{device} {'supports' if ok else 'lacks'} bfloat16"
    cpu = getattr(torch, "cpu", None)
    for flag, check in (("AMX", "_is_amx_tile_supported"), ("AVX512_BF16", "_is_avx512_bf16_supported")):
        if cpu is not None and hasattr(cpu, check) and getattr(cpu, check)():
            return True, f"the CPU has {flag}"
    return False, "the CPU has neither AVX512_BF16 nor AMX (bfloat16 would be emulated, and slower)"


def resolve_dtype(dtype: str, device: str = "auto") -> tuple[str, str]:
    """``(dtype that runs, why)``: ``auto`` is bfloat16 where :func:`native_bf16`, else float32;
    any other value runs as set."""
    dtype = str(dtype)
    if dtype != "auto":
        return dtype, "encoder.dtype"
    device = resolve_device(device)
    if device.startswith("cuda") and device not in _NATIVE and not _cuda_visible():
        raise ConfigError(
            f"encoder.dtype=auto with encoder.device={device}, planned where no GPU is visible: whether the GPU "
            "computes bfloat16 cannot be known here, and the dtype keys the embeddings. Fix: set encoder.dtype "
            "(bfloat16 for a recent GPU, float32 otherwise)."
        )
    ok, why = _native(device)
    return ("bfloat16" if ok else "float32"), f"encoder.dtype=auto: {why}"


_NATIVE: dict[str, tuple[bool, str]] = {}


def _cuda_visible() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _native(device: str) -> tuple[bool, str]:
    if device not in _NATIVE:
        _NATIVE[device] = native_bf16(device)
    return _NATIVE[device]


class Encoder:
    """pyserini's AutoDocumentEncoder with length-sorted batches, no autograd and a progress bar."""

    def __init__(
        self,
        model: str,
        revision: str | None = None,
        pooling: str = "mean",
        normalize: bool = True,
        max_length: int = 256,
        batch_size: int = 64,
        device: str = "auto",
        dtype: str = "float32",
        trust_remote_code: bool = False,
    ):
        from ..jvm import start  # starts the JVM on import: deferred (harness.jvm)

        fast_tier_guard("encoder model")
        import torch

        start()  # Java 21 and the JVM before pyserini (harness.jvm)
        from pyserini.encode import AutoDocumentEncoder

        if pooling not in ("mean", "cls"):
            raise ValueError(f"encoder.pooling={pooling!r}: expected 'mean' or 'cls'.")
        self.path = resolve_model(model, revision)
        self.warm = False  # a query search has run through it: the next one is timed warm (search())
        self.truncated = 0  # texts over max_length in the last encode() call
        self.device = usable_device(device)
        dtype, self.dtype_reason = resolve_dtype(dtype, self.device)
        self.dtype = dtype
        try:
            if trust_remote_code:
                self.impl = _remote_code_encoder(self.path, self.device, pooling, normalize)
            else:
                self.impl = AutoDocumentEncoder(self.path, device=self.device, pooling=pooling, l2_norm=normalize)
        except OSError as e:
            raise OSError(
                f"encoder.model={model}: cannot load ({e}). Fix: a local folder, an HF id where the hub is "
                f"reachable, or the packaged default {PACKAGED}."
            ) from e
        if dtype == "int8":
            self.impl.model = quantize_int8(self.impl.model, self.device)
        elif dtype != "float32":
            self.impl.model = HalfPrecision(self.impl.model, getattr(torch, dtype))
        self.impl.model.eval()
        self.tokenizer = self.impl.tokenizer
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)

    def lengths(self, texts: list[str]) -> np.ndarray:
        ids = self.tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(texts))

    def encode(self, texts: list[str], prefix: str = "", desc: str = "encode", truncates: bool = False) -> np.ndarray:
        """Vectors of ``texts`` (each with ``prefix``), in their order. A text over
        ``encoder.max_length`` tokens is truncated: a warning for units cut to fit (windows that
        overflow are a fault), the log only where truncation is the method (``truncates``: whole
        documents and queries, which a fixed-length encoder reads up to its length, as the paper's
        document-level runs do); :attr:`truncated` keeps the last call's count either way."""
        import torch

        texts = [f"{prefix}{t}" if prefix else t for t in texts]
        if not texts:
            return np.zeros((0, self.impl.model.config.hidden_size), dtype=np.float32)
        lengths = self.lengths(texts)
        over = lengths > self.max_length
        self.truncated = int(over.sum())
        if over.any():
            (log.info if truncates else log.warning)(
                "%s: %d of %d texts exceed encoder.max_length=%d tokens (longest %d, mean excess %.0f): "
                "they are truncated",
                desc,
                int(over.sum()),
                len(texts),
                self.max_length,
                int(lengths.max()),
                float((lengths[over] - self.max_length).mean()),
            )

        order = np.argsort(-lengths, kind="stable")
        out = None
        with torch.inference_mode():
            batches = range(0, len(texts), self.batch_size)
            for i in tqdm(batches, desc=desc, unit=" batch", disable=inner_bars(), mininterval=2):
                idx = order[i : i + self.batch_size]
                emb = self.impl.encode([texts[j] for j in idx], max_length=self.max_length)
                if out is None:
                    out = np.zeros((len(texts), emb.shape[1]), dtype=np.float32)
                out[idx] = emb.astype(np.float32)
                point("encoding")
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def quantize_int8(model, device: str):
    """The model with its Linear layers in dynamic int8 (weights int8, activations quantised per
    batch), by torch's own ``quantize_dynamic``: a kept library, no kernels of ours. Its quality
    cost is measured, not assumed (docs/benchmarks.md, regressions/cacm-xdom-coded-dtypes.yaml);
    torch marks these quantised tensors deprecated, and the lock holds torch, so a torch upgrade
    that drops them fails that file loudly."""
    import torch

    if not device.startswith("cpu"):
        raise ConfigError(
            f"encoder.dtype=int8: dynamic int8 runs on the CPU only, not {device}. Fix: encoder.device=cpu, "
            "or encoder.dtype=auto on a GPU."
        )
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's deprecation notice, once per load
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


class HalfPrecision:
    """A model cast whole to ``dtype`` (bfloat16, float16), its first output (the token states
    pyserini pools) returned in float32: pyserini calls ``.numpy()`` on it, which numpy refuses
    for bfloat16. Why a whole cast, not torch's autocast (matrix products in half precision, layer
    norms and softmax in float32): measured on this project's CPU, autocast kept vectors a little
    closer to float32 (smallest cosine 0.99995 against 0.99984 for mpnet at 512 tokens) but ran
    30% slower for mpnet (2.7 against 3.8 passages/s), and it did not keep rankings closer
    (cacm-xdom-coded nDCG@100 within 0.0012 of float32 with autocast, 0.0005 with the cast)."""

    def __init__(self, model, dtype):
        self.model, self.config = model.to(dtype), model.config

    def __call__(self, **inputs):
        return (self.model(**inputs)[0].float(),)

    def eval(self):
        self.model.eval()
        return self


def _remote_code_encoder(path: str, device: str, pooling: str, normalize: bool):
    """pyserini's AutoDocumentEncoder for models with custom code (e.g. arctic-embed-m-v2.0, a GTE
    architecture): its constructor cannot pass ``trust_remote_code``, so we set the attributes its
    ``encode`` reads ourselves."""
    from ..jvm import start  # starts the JVM on import: deferred (harness.jvm)

    start()  # Java 21 and the JVM before pyserini (harness.jvm)
    from pyserini.encode import AutoDocumentEncoder
    from transformers import AutoModel, AutoTokenizer

    enc = AutoDocumentEncoder.__new__(AutoDocumentEncoder)
    enc.device, enc.pooling, enc.l2_norm, enc.prefix, enc.has_model = device, pooling, normalize, None, True
    enc.model = AutoModel.from_pretrained(path, trust_remote_code=True).to(device)
    enc.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    return enc


def encode_units(
    units_dir: Path, out: Path, encoder: Encoder, prefix: str = "", whole: bool = False, span: tuple | None = None
) -> dict:
    """Encode every unit (or units ``span[0]`` to ``span[1]`` of the file: a shard,
    :mod:`harness.shards`); write ``embeddings.npy`` and ``docid`` (one id a line). ``whole``: the
    units are whole documents, read up to ``encoder.max_length`` by design (counted in
    ``meta.json``'s ``truncated``, logged, not warned)."""

    ids, texts = [], []
    units = read_units(units_dir)
    for rec in itertools.islice(units, *span) if span else units:
        ids.append(rec["id"])
        texts.append(rec["contents"])
    t0 = time.perf_counter()
    emb = encoder.encode(texts, prefix=prefix, desc="encode units", truncates=whole)
    seconds = time.perf_counter() - t0
    np.save(out / "embeddings.npy", emb)
    (out / "docid").write_text("".join(f"{i}\n" for i in ids))
    return {
        "encode_seconds": round(seconds, 3),
        "units": len(ids),
        "dim": int(emb.shape[1]),
        "units_per_second": round(len(ids) / max(seconds, 1e-9), 1),
        "device": encoder.device,
        "truncated": encoder.truncated,
    }


def encode_shard(tmp: Path, spec: dict, encoder=None) -> dict:
    """Encode the units of one shard (``spec``: plain values, so a job on another machine builds
    it from its own encoder)."""
    units_dir = Path(spec["units"])
    lo, hi = shards.span(spec["shard"], spec["shards"], shards.units_count(units_dir))
    if encoder is None:  # a job of its own: its own encoder, on the cores its job was given
        import torch  # deferred: heavy, and a job loads it anyway with the encoder

        torch.set_num_threads(int(spec["threads"]))
    enc = encoder if encoder is not None else make_encoder(OmegaConf.create(spec["encoder"]))
    meta = encode_units(units_dir, tmp, enc, spec["prefix"], spec["whole"], (lo, hi))
    return {**meta, "shard": spec["shard"], "shards": spec["shards"], "first_unit": lo}


def merge_embeddings(tmp: Path, shard_dirs: list[Path]) -> dict:
    """The shards' vectors and ids concatenated in shard order: the unsharded layout."""
    t0 = time.perf_counter()
    metas = [json.loads((d / "meta.json").read_text()) for d in shard_dirs]
    emb = np.concatenate([np.load(d / "embeddings.npy") for d in shard_dirs])
    np.save(tmp / "embeddings.npy", emb)
    (tmp / "docid").write_text("".join((d / "docid").read_text() for d in shard_dirs))
    return {
        "units": int(emb.shape[0]),
        "dim": int(emb.shape[1]),
        "shards": len(shard_dirs),
        "shard_encode_seconds": [m["encode_seconds"] for m in metas],  # (the rows count the shards' own)
        "merge_seconds": round(time.perf_counter() - t0, 3),
        "device": metas[0].get("device"),
        "truncated": sum(m.get("truncated", 0) for m in metas),
    }


def build_faiss(emb_dir: Path, out: Path, quantization: str = "none") -> dict:
    """A flat inner-product index over the embeddings, in pyserini's FaissSearcher layout."""
    import faiss

    emb = np.load(emb_dir / "embeddings.npy")
    d = emb.shape[1]
    index: faiss.Index
    if quantization == "none":
        index = faiss.IndexFlatIP(d)
    elif quantization == "int8":
        index = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
        index.train(emb)
    else:
        raise ValueError(f"dense.quantization={quantization!r}: expected 'none' or 'int8'.")
    t0 = time.perf_counter()
    index.add(emb)
    faiss.write_index(index, str(out / "index"))
    (out / "docid").write_text((emb_dir / "docid").read_text())
    return {
        "index_seconds": round(time.perf_counter() - t0, 3),
        "vectors": int(index.ntotal),
        "quantization": quantization,
    }


def search(
    index_dir: Path,
    topics: dict[str, str],
    encoder: Encoder,
    prefix: str,
    depth: int,
    threads: int = 2,
    prf: dict | None = None,
):
    """Encode the queries and search the Faiss index. Returns (run, seconds, queries with no text).
    ``prf`` (:func:`prf_params`): a first search of the top ``k`` with their vectors, pyserini's
    dense PRF (``DenseVectorAveragePrf`` / ``DenseVectorRocchioPrf``) moves each query vector, and
    the new vectors are searched to ``depth``."""

    from ..jvm import start  # starts the JVM on import: deferred (harness.jvm)

    start()  # Java 21 and the JVM before pyserini (harness.jvm)
    from pyserini.search.faiss import FaissSearcher

    qids = [q for q, t in topics.items() if t.strip()]
    empty = [q for q, t in topics.items() if not t.strip()]
    for f in ("index", "docid"):
        if not (Path(index_dir) / f).exists():
            raise MissingFiles(
                f"Faiss index {index_dir} lacks '{f}'. Fix: delete {index_dir} and run again to rebuild it."
            )
    searcher = FaissSearcher(str(index_dir), query_encoder=None)
    if qids and not encoder.warm:  # query time is search time: not the first batch's start-up
        first = encoder.encode([topics[q] for q in qids[:8]], prefix=prefix, desc="warm-up", truncates=True)
        searcher.batch_search(first[:1], qids[:1], k=1, threads=int(threads))
        encoder.warm = True
    t0 = time.perf_counter()
    q_emb = encoder.encode([topics[q] for q in qids], prefix=prefix, desc="encode queries", truncates=True)
    if prf and qids:
        q_emb = prf_queries(searcher, q_emb, qids, prf, threads)
    hits = (
        searcher.batch_search(q_emb, qids, k=min(int(depth), searcher.num_docs), threads=int(threads)) if qids else {}
    )
    seconds = time.perf_counter() - t0
    run = from_hits(hits) if hits else pd.DataFrame(columns=["query_id", "doc_id", "score"])
    return run, seconds, empty


def prf_params(p) -> dict | None:
    """The dense PRF settings that change a run (config group ``dense_prf``), or None."""
    if p is None:
        return None
    out = {"method": str(p.method), "k": int(p.k)}
    if out["method"] == "rocchio":
        out.update(alpha=float(p.alpha), beta=float(p.beta))
    return out


def prf_queries(searcher, q_emb: np.ndarray, qids: list[str], prf: dict, threads: int) -> np.ndarray:
    """New query vectors from the top ``prf['k']`` document vectors of a first search."""
    from ..jvm import start  # starts the JVM on import: deferred (harness.jvm)

    start()  # Java 21 and the JVM before pyserini (harness.jvm)
    from pyserini.search.faiss import DenseVectorAveragePrf, DenseVectorRocchioPrf

    k = min(int(prf["k"]), searcher.num_docs)
    q_emb, first = searcher.batch_search(q_emb, qids, k=k, threads=int(threads), return_vector=True)
    if prf["method"] == "average":
        method = DenseVectorAveragePrf()
    else:
        method = DenseVectorRocchioPrf(alpha=prf["alpha"], beta=prf["beta"], gamma=0.0, topk=k, bottomk=0)
    return method.get_batch_prf_q_emb(qids, np.asarray(q_emb, dtype=np.float32), first)


class Dense:
    """Embeddings of the units (cached), a Faiss index over them, queries encoded at search time."""

    name = "dense"
    tokenizer = "encoder"

    def index(self, ctx: Context, units: Artifact) -> Artifact:
        e = ctx.cfg.encoder
        if e.get("train"):  # a fine-tuned encoder (encoder.train): one model per fold, each keyed
            return tuned().index(ctx, units)
        params = {**encoder_params(e), "doc_prefix": e.doc_prefix or ""}
        whole = units.params["granularity"] == "document"
        if shards.count(ctx.cfg) > 1:  # encoded in shards, then concatenated (harness.shards)
            spec = {
                "encoder": OmegaConf.to_container(e, resolve=True),
                "prefix": e.doc_prefix or "",
                "whole": whole,
                "threads": int(ctx.cfg.sharding.cpus_per_task),  # a job's math threads: its share of the machine
            }
            parts = shards.build(
                ctx,
                stage.EMBEDDING_SHARD,
                units,
                params,
                encoder_env(ctx, EMBED_VERSION),
                spec,
                encode_shard,
                "encoding shard",
            )
            emb = Artifact(
                stage.EMBEDDINGS, {**params, "shards": len(parts)}, tuple(parts), encoder_env(ctx, EMBED_VERSION)
            )
            ctx.ensure(emb, shards.merged(ctx.store, parts, merge_embeddings), "embeddings (merged shards)")
        else:
            emb = Artifact(stage.EMBEDDINGS, params, (units,), encoder_env(ctx, EMBED_VERSION))
            ctx.ensure(
                emb,
                lambda tmp: encode_units(ctx.store.path(units), tmp, ctx.encoder, e.doc_prefix or "", whole),
                "embeddings",
            )
        q = str(ctx.cfg.dense.quantization)
        art = Artifact(
            stage.FAISS,
            {"type": "flat_ip", "quantization": q},
            (emb,),
            {"stage": FAISS_VERSION, "faiss": env.version("faiss-cpu") or env.version("faiss-gpu")},
        )
        return ctx.ensure(art, lambda tmp: build_faiss(ctx.store.path(emb), tmp, q), "Faiss index")

    def search_env(self, ctx: Context) -> dict:
        """Queries are encoded at search time: the same weights and compatibility level as the
        embeddings (the index's env already keys the run through its parents)."""
        return encoder_env(ctx, SEARCH_VERSION)

    def run_params(self, ctx: Context) -> dict:
        out = {"query_prefix": ctx.cfg.encoder.query_prefix or ""}
        prf = prf_params(ctx.cfg.dense_prf)
        if prf:
            out["prf"] = prf
        return out

    def search(self, ctx: Context, index: Artifact, topics: dict[str, str], params: dict):
        if "folds" in index.params:  # each fine-tuned model's queries in its own sub-index
            return tuned().search(ctx, index, topics, params["query_prefix"], params["depth"], params.get("prf"))
        return search(
            ctx.store.path(index),
            topics,
            ctx.encoder,
            params["query_prefix"],
            params["depth"],
            ctx.cfg.search.threads,
            params.get("prf"),
        )


def encoder_params(e) -> dict:
    """What makes an encoder's vectors: model, revision, pooling, norm, length and dtype (the one
    that runs: auto never keys). A fine-tuned encoder's model is a parent artifact
    (:mod:`harness.tuned`)."""
    return {
        "model": e.model,
        "revision": e.revision,
        "pooling": str(e.pooling),
        "normalize": bool(e.normalize),
        "max_length": int(e.max_length),
        "dtype": resolve_dtype(str(e.dtype), str(e.device))[0],
    }


def encoder_env(ctx: Context, version: int) -> dict:
    """:func:`harness.env.encoder` for the experiment's encoder; weight digests cached under its root."""

    e = ctx.cfg.encoder
    return env.encoder(version, str(e.model), e.revision, default_cache(ctx.store.root))


def make_encoder(e) -> Encoder:
    return Encoder(
        e.model,
        e.revision,
        str(e.pooling),
        bool(e.normalize),
        int(e.max_length),
        int(e.batch_size),
        e.device,
        str(e.dtype),
        bool(e.trust_remote_code),
    )


BACKEND = Dense()


EMBEDDINGS = register(
    Stage(
        stage.EMBEDDINGS,
        "indexes",
        "encodings",
        EMBED_VERSION,
        cost="encoding",
        timings={"encode_seconds": ("encode_seconds",)},
    )
)
FAISS = register(
    Stage(
        stage.FAISS,
        "indexes",
        "Faiss indexes",
        FAISS_VERSION,
        index=True,
        cost="flat_index",
        timings={"index_seconds": ("index_seconds", "build_seconds")},
    )
)
