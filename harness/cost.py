"""What a sweep will cost before it runs: predicted wall time of every artifact not yet cached.

The estimate multiplies the dataset's size (families, characters and tokens per view, queries) by
throughputs measured on this machine: passaging and Anserini indexing (characters/s), BM25 search
(seconds per query term and corpus character), the encoder (seconds per sequence of L tokens,
fitted as a*L + b*L^2 on two lengths, so long passages cost what attention costs them), model
loading, and Faiss. The calibration takes some seconds and is cached per machine and encoder in
``<root>/indexes/calibration.json``. GPU figures scale the encoder by ``cost.gpu_speedup``, an
assumption until a GPU run of ``bench/encoding.py`` measures it (README).

Without the data (``dataset=dapfam`` offline), sizes come from ``dataset.published``: nothing can
be cached then, so everything is predicted.
"""
from __future__ import annotations

import logging
import os
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path

from .data import schema as S
from .data import views as V
from .files import read_json as _read

log = logging.getLogger(__name__)

# Sizes are kept per field; a view's size is the sum over its fields (harness.data.views).
FIELD_OF = {S.TITLE: "title", S.ABSTRACT: "abstract", S.CLAIMS: "claims", S.DESCRIPTION: "description",
            S.KEYWORDS: "keywords"}
FIELDS = {view: [FIELD_OF[c] for c in cols] for view, cols in {**V.QUERY_VIEWS, **V.TARGET_VIEWS}.items()}


# ----------------------------------------------------------------------------- sizes
def sizes(ds, root: Path) -> dict:
    """Characters per field of corpus and queries, family and query counts (cached per fingerprint)."""
    cache = Path(root) / "indexes" / "sizes.json"
    known = _read(cache)
    if ds.fingerprint in known:
        return known[ds.fingerprint]
    cols = {f: c for c, f in FIELD_OF.items() if c in S.CORPUS_COLUMNS}
    chars = Counter()
    for batch in ds.corpus.iter_batches(list(cols.values())):
        for f, c in cols.items():
            chars[f] += int(batch[c].fillna("").astype(str).str.len().sum())
    q = ds.queries
    qcols = {**{f: c for f, c in cols.items() if c in q}, "keywords": S.KEYWORDS}
    out = {"families": ds.n_docs, "queries": len(q), "chars": dict(chars),
           "query_chars": {f: int(q[c].fillna("").astype(str).str.len().sum()) for f, c in qcols.items()}}
    _write(cache, {**known, ds.fingerprint: out})
    return out


def chars_per_token(ds, encoder_cfg, sample: int = 200) -> float:
    """Characters per encoder token on a sample of the corpus's full text (patents: about 4)."""
    from transformers import AutoTokenizer

    from .backends.dense import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(encoder_cfg.model, encoder_cfg.revision))
    texts = [t for _, t in zip(range(sample), V.target_texts(ds.corpus, "FULL")) for t in [t[1]] if t]
    tokens = sum(len(x) for x in tok(texts, add_special_tokens=False, verbose=False)["input_ids"])
    return sum(map(len, texts)) / max(1, tokens)


def view_chars(size: dict, view: str, query: bool = False) -> float:
    table = size["query_chars"] if query else size["chars"]
    return float(sum(table.get(f, 0) for f in FIELDS[view]))


# ----------------------------------------------------------------------------- calibration
CALIBRATION = 2  # bump when a measured stage gets faster or slower (2: BM25 search on all threads)


def calibrate(root: Path, encoder_cfg) -> dict:
    """Throughputs of this machine (cached per host, cores and encoder)."""
    cache = Path(root) / "indexes" / "calibration.json"
    key = (f"v{CALIBRATION}|{platform.node()}|{os.cpu_count()}|{encoder_cfg.model}|{encoder_cfg.max_length}|"
           f"{encoder_cfg.dtype}")
    known = _read(cache)
    if key in known:
        return known[key]
    log.info("calibrating throughputs on this machine (cached in %s)", cache)
    out = {**_calibrate_bm25(), **_calibrate_encoder(encoder_cfg)}
    _write(cache, {**known, key: out})
    return out


def _words(n: int, seed: int = 0, vocab: int = 50_000) -> str:
    """``n`` words drawn from a Zipf law over ``vocab`` words, as in real text: search cost per
    term depends on posting lengths, which a uniform vocabulary would make far too long."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks
    return " ".join(f"w{i}x" for i in rng.choice(vocab, size=n, p=p / p.sum()))


def distinct_terms(words: float) -> float:
    """Distinct analysed terms of a query of ``words`` words (Heaps' law; 5,000 characters of
    patent text are about 316 distinct terms after stemming and stopwords)."""
    return 5.5 * max(words, 1.0) ** 0.6


def _calibrate_bm25() -> dict:
    """Passaging and indexing rates, and BM25 search as seconds per distinct query term =
    fixed + per_char * corpus characters, fitted on two index sizes."""
    from . import passages
    from .backends import bm25

    topics = {f"q{i}": _words(200, 10_000 + i) for i in range(60)}
    terms = sum(len(set(t.split())) for t in topics.values())
    rates, per_term = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (400, 1600):
            tmp_n = Path(tmp) / str(n)
            docs = [(f"D{i}", _words(600, i)) for i in range(n)]
            chars = sum(len(t) for _, t in docs)
            t0 = time.perf_counter()
            passages.write_units(passages.units(docs, lambda t: passages.word_windows(t, 128, 128)), tmp_n / "units")
            t1 = time.perf_counter()
            bm25.build_index(tmp_n / "units", tmp_n / "index", 2)
            t2 = time.perf_counter()
            bm25.search(tmp_n / "index", topics, 0.9, 0.4, 1000, 2)  # warm-up
            t3 = time.perf_counter()
            bm25.search(tmp_n / "index", topics, 0.9, 0.4, 1000, 2)
            per_term[chars] = (time.perf_counter() - t3) / terms
            rates = {"passaging_chars_s": chars / (t1 - t0), "indexing_chars_s": chars / (t2 - t1)}
    (c1, s1), (c2, s2) = sorted(per_term.items())
    slope = max((s2 - s1) / (c2 - c1), 0.0)
    return {**rates, "bm25_s_per_term": max(s1 - slope * c1, 0.0), "bm25_s_per_term_char": slope}


def _calibrate_encoder(e) -> dict:
    import numpy as np

    from .backends.dense import make_encoder

    make_encoder(e)  # the first load also imports torch and transformers, once per process
    t0 = time.perf_counter()
    enc = make_encoder(e)
    load = time.perf_counter() - t0
    sample = _words(4000, 7)
    per_seq = {}
    for length in (64, 256):
        ids = enc.tokenizer(sample, add_special_tokens=False)["input_ids"][:length - 2]
        text = enc.tokenizer.decode(ids)
        enc.encode([text] * 8)  # warm-up
        t0 = time.perf_counter()
        enc.encode([text] * 64)
        per_seq[length] = (time.perf_counter() - t0) / 64
    # seconds per sequence of L tokens = a*L + b*L^2
    b = (per_seq[256] / 256 - per_seq[64] / 64) / (256 - 64)
    a = per_seq[64] / 64 - b * 64
    import faiss

    x = np.random.rand(20000, 384).astype("float32")
    index = faiss.IndexFlatIP(384)
    index.add(x)
    t0 = time.perf_counter()
    index.search(x[:200], 100)
    flat = (time.perf_counter() - t0) / (200 * 20000 * 384)
    return {"model_load_s": load, "encode_a": max(a, 1e-9), "encode_b": max(b, 0.0),
            "flat_s_per_mac": flat}


# ----------------------------------------------------------------------------- estimate
def seq_seconds(c: dict, length: float, gpu: float = 1.0) -> float:
    return (c["encode_a"] * length + c["encode_b"] * length ** 2) / gpu


def unit_shape(units, size: dict, c: dict, cfg) -> tuple[float, float]:
    """(number of units, tokens per unit) of a units artifact, from the view's size."""
    p, fam = units.params, max(1, size["families"])
    tokens = view_chars(size, p["view"]) / c["chars_per_token"]
    if p["granularity"] == "document":
        return fam, min(tokens / fam, cfg.encoder.max_length)
    if p["tokenizer"] == "encoder":
        window = min(p["length"], cfg.encoder.max_length - 2)
        return tokens / min(p["stride"], window) + fam / 2, window
    words = view_chars(size, p["view"]) / 6.0  # about 6 characters a word, its space included
    return words / p["stride"] + fam / 2, min(p["length"] * 6.0 / c["chars_per_token"], cfg.encoder.max_length)


def estimate(nodes, missing: set, size: dict, c: dict, cfg, gpu: float = 1.0) -> Counter:
    """Predicted seconds per artifact kind for the nodes whose keys are in ``missing``."""
    out = Counter()
    overlapped = set()
    nq = size["queries"]
    for n in nodes:
        if n.key not in missing:
            continue
        p = n.params
        if n.kind == "units":
            out["units"] += view_chars(size, p["view"]) / c["passaging_chars_s"]
        elif n.kind == "lucene":
            indexing = view_chars(size, _view(n)) / c["indexing_chars_s"]
            out["lucene"] += indexing
            if n.parents[0].key in missing and n.parents[0].key not in overlapped:  # units written while indexed
                overlapped.add(n.parents[0].key)
                out["units"] -= min(indexing, view_chars(size, _view(n)) / c["passaging_chars_s"])
        elif n.kind == "embeddings":
            count, length = unit_shape(n.parents[0], size, c, cfg)
            out["embeddings"] += count * seq_seconds(c, length + 2, gpu) + c["model_load_s"]
        elif n.kind == "faiss":
            out["faiss"] += 0.05
        elif n.kind == "unit_run":
            q_chars = view_chars(size, p["query_view"], query=True)
            if p["backend"] == "bm25":
                terms = max(1, nq) * distinct_terms(q_chars / max(1, nq) / 6.0)
                out["unit_run"] += terms * (c["bm25_s_per_term"] + view_chars(size, _view(n)) * c["bm25_s_per_term_char"]) + 0.5
            else:
                count, _ = unit_shape(_units_node(n), size, c, cfg)
                q_len = min(q_chars / max(1, nq) / c["chars_per_token"], cfg.encoder.max_length)
                out["unit_run"] += (nq * seq_seconds(c, q_len + 2, gpu) + c["model_load_s"]
                                    + nq * count * 384 * c["flat_s_per_mac"])
        elif n.kind in ("family_run", "fused_run", "reranked_run"):
            out[n.kind] += 0.1 + 2e-6 * nq * 1000
        elif n.kind == "scores":
            out["scores"] += 0.15 + 1e-3 * nq
    return out


def _units_node(n):
    while n.kind != "units":
        n = n.parents[0]
    return n


def _view(n) -> str:
    return _units_node(n).params["view"]


def report(nodes, missing: set, size: dict, c: dict, cfg, gpu_speedup: float) -> str:
    cpu, gpu = estimate(nodes, missing, size, c, cfg), estimate(nodes, missing, size, c, cfg, gpu_speedup)
    lines = ["  predicted time of what is not cached (this machine's throughputs; GPU: encoder x"
             f"{gpu_speedup:g}, assumed):"]
    for kind in sorted(cpu, key=lambda k: -cpu[k]):
        lines.append(f"    {kind:12s} CPU {_fmt(cpu[kind]):>9s}   GPU {_fmt(gpu[kind]):>9s}")
    lines.append(f"    {'total':12s} CPU {_fmt(sum(cpu.values())):>9s}   GPU {_fmt(sum(gpu.values())):>9s}")
    return "\n".join(lines)


def _fmt(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _write(path: Path, obj: dict) -> None:
    from .files import write_json_atomic

    try:
        write_json_atomic(path, obj)
    except OSError as e:  # a read-only root: measure again next time
        log.debug("not cached: %s (%s)", path, e)


__all__ = ["sizes", "calibrate", "estimate", "report"]
