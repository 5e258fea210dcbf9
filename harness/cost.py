"""What a sweep will cost before it runs: predicted wall time of every artifact not yet cached.

The estimate multiplies the dataset's size (families, characters and tokens per view, queries) by
what this machine measured on the same code paths: passaging, passaging streamed into Anserini's
IndexCollection and IndexCollection over finished units (seconds at a corpus size, with the
experiment's thread counts), BM25 search (seconds per query term at an index size), the encoder
(seconds per sequence of L tokens, fitted as a*L + b*L^2 on two lengths, so long passages cost
what attention costs them), model loading, and Faiss. BM25 lines are interpolated between
calibration points measured on synthetic corpora of several sizes; one near the size to predict
is measured when needed (:func:`calibrate`), and the listing prints each line's calibrated range,
so an extrapolation is visible. Everything is cached per machine in
``<root>/indexes/calibration.json``. GPU figures scale the encoder by ``cost.gpu_speedup``, an
assumption until a GPU run of ``bench/encoding.py`` measures it (README).

Without the data (``dataset=dapfam`` offline), sizes come from ``dataset.published``: nothing can
be cached then, so everything is predicted, and characters per token are assumed, not measured.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import platform
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from . import data, passages, stage
from .aggregate import aggregate
from .backends import bm25, get
from .backends.dense import make_encoder, resolve_dtype, resolve_model
from .config import compose
from .data import schema as S
from .data import synthetic
from .data import views as V
from .evaluate import score
from .experiment import Experiment
from .files import read_json as _read
from .files import write_json_atomic
from .runs import read_trec, top_k, write_trec
from .store import Store

log = logging.getLogger(__name__)

# The merge of sharded BM25 indexes (IndexWriter.addIndexes copies segments) as a share of
# indexing the whole view: an assumption (bench/shards.py measures the merge).
MERGE_SHARE = 0.05

# Sizes are kept per field; a view's size is the sum over its fields (harness.data.views).
FIELD_OF = {
    S.TITLE: "title",
    S.ABSTRACT: "abstract",
    S.CLAIMS: "claims",
    S.DESCRIPTION: "description",
    S.KEYWORDS: "keywords",
}
FIELDS = {view: [FIELD_OF[c] for c in cols] for view, cols in {**V.QUERY_VIEWS, **V.TARGET_VIEWS}.items()}


# ----------------------------------------------------------------------------- sizes
def sizes(ds, root: Path) -> dict:
    """Characters per field of corpus and queries, family and query counts (cached per fingerprint)."""
    cache = Path(root) / "indexes" / "sizes.json"
    known = _read(cache)
    if "positives" in known.get(ds.fingerprint, {}):
        return known[ds.fingerprint]
    cols = {f: c for c, f in FIELD_OF.items() if c in S.CORPUS_COLUMNS}
    chars: Counter[str] = Counter()
    for batch in ds.corpus.iter_batches(list(cols.values())):
        for f, c in cols.items():
            chars[f] += int(batch[c].fillna("").astype(str).str.len().sum())
    q = ds.queries
    qcols = {**{f: c for f, c in cols.items() if c in q}, "keywords": S.KEYWORDS}
    out = {
        "families": ds.n_docs,
        "queries": len(q),
        "positives": int(len(ds.positives)),  # what fine-tuning trains on
        "chars": dict(chars),
        "query_chars": {f: int(q[c].fillna("").astype(str).str.len().sum()) for f, c in qcols.items()},
    }
    _write(cache, {**known, ds.fingerprint: out})
    return out


def chars_per_token(ds, encoder_cfg, sample: int = 200) -> float:
    """Characters per encoder token on a sample of the corpus's full text, with the encoder's own
    tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model(encoder_cfg.model, encoder_cfg.revision))
    texts = [text for _, (_, text) in zip(range(sample), V.target_texts(ds.corpus, "FULL")) if text]
    tokens = sum(len(x) for x in tok(texts, add_special_tokens=False, verbose=False)["input_ids"])
    return sum(map(len, texts)) / max(1, tokens)


def view_chars(size: dict, view: str, query: bool = False) -> float:
    table = size["query_chars"] if query else size["chars"]
    return float(sum(table.get(f, 0) for f in FIELDS[view]))


# ----------------------------------------------------------------------------- calibration
CALIBRATION = 4  # bump when a measured stage changes its speed or what a point measures (4: real experiments)
REACH = 10  # a BM25 line is trusted up to this many times the largest calibrated index
POINT_FAMILIES = (40, 160)  # the two small BM25 points, in synthetic families of FAMILY_CHARS
FAMILY_CHARS = 68_000  # full text of a DAPFAM family, about (dataset.published)
POINT_LENGTH = 512  # words per passage of the BM25 points (as bench/dapfam_scale.py)
QUERY_CHARS = 6_000  # TAC-length queries (title + abstract + claims)


def calibrate(root: Path, cfg, reach_chars: float = 0.0, encoder: bool = True, encoders: list | None = None) -> dict:
    """Throughputs of this machine, cached in ``<root>/indexes/calibration.json``.

    BM25 stages are measured as *points* (one synthetic corpus each, :mod:`harness.data.synthetic`)
    on the code paths a build takes, with the experiment's ``index.threads`` / ``search.threads``:
    passaging alone, passaging streamed into IndexCollection, IndexCollection over finished units
    (:func:`harness.lucene.index_file`), and search with TAC-length queries. Two small points
    are always measured; when ``reach_chars`` (the largest index the estimate must predict) is more
    than ``REACH`` times the largest point, two more points, at a 32nd and an eighth of it, are
    measured once and cached, so no line is extrapolated far past what was measured and the slope
    beyond the last point is measured near it. The encoder is timed per model, length and dtype,
    unless ``encoder`` is False (a plan with no dense stage: nothing to load a model for): each of
    ``encoders`` (encoder configs; default the experiment's) once, under ``encoders`` by
    :func:`encoder_id`, the first also at the top level."""
    cache = Path(root) / "indexes" / "calibration.json"
    host = f"v{CALIBRATION}|{platform.node()}|{os.cpu_count()}"
    e = cfg.encoder
    bm25_key = f"{host}|bm25|index.threads={cfg.index.threads}|search.threads={cfg.search.threads}"
    known = _read(cache)
    points = list(known.get(bm25_key, []))
    threads = (int(cfg.index.threads), int(cfg.search.threads))
    todo = [f for f in POINT_FAMILIES if not any(p["families"] == f for p in points)]
    if todo or reach_chars > REACH * max(p["chars"] for p in points):
        _bm25_point(8, *threads, queries=8)  # warm-up: the first IndexCollection and search of a JVM load classes
    for families in todo:
        points.append(_bm25_point(families, *threads))
    if reach_chars > REACH * max(p["chars"] for p in points):
        # two points near the target, 4x apart: the slope beyond them is measured where it applies
        for part in (32, 8):
            families = int(math.ceil(reach_chars / part / FAMILY_CHARS))
            log.info(
                "calibrating BM25 on %d synthetic families (1/%d of the largest index to predict; once, cached in %s)",
                families,
                part,
                cache,
            )
            points.append({**_bm25_point(families, *threads, queries=300), "near_target": True})
    points.sort(key=lambda p: p["chars"])
    runs_key = f"{host}|runs"
    runs: dict = known[runs_key] if "score_s_per_query" in known.get(runs_key, {}) else _calibrate_runs()
    timed: dict[str, dict] = {}
    for conf in (encoders or [e]) if encoder else []:
        ident = encoder_id(conf)
        enc_key = f"{host}|encoder|{ident}"
        if enc_key not in known:
            log.info("calibrating the encoder %s on this machine (cached in %s)", ident, cache)
        timed[ident] = known.get(enc_key) or _calibrate_encoder(conf)
    _write(
        cache,
        {**_read(cache), bm25_key: points, runs_key: runs, **{f"{host}|encoder|{i}": t for i, t in timed.items()}},
    )
    first = next(iter(timed.values()), {})
    return {"bm25_points": points, **first, **runs, "encoders": timed}


def encoder_id(e) -> str:
    """What an encoder's speed depends on: model, length and the dtype that runs (an encoder
    config, or an embeddings artifact's params)."""
    dtype = e["dtype"] if isinstance(e, dict) else resolve_dtype(str(e.dtype), str(e.device))[0]
    return f"{e['model']}|{int(e['max_length'])}|{dtype}"


def encoder_label(ident: str) -> str:
    model, length, dtype = ident.rsplit("|", 2)
    return f"{model.split(':', 1)[-1].rstrip('/').split('/')[-1]} {dtype} ({length} tokens)"


def _encoder_params(n) -> dict | None:
    """The encoder params of the embeddings a node reads (itself, or the nearest ancestor)."""
    todo = [n]
    while todo:
        x = todo.pop(0)
        if "model" in x.params and "dtype" in x.params:
            return x.params
        todo.extend(x.parents)
    return None


def _encoder_timing(c: dict, n) -> tuple[dict, int | None, str | None]:
    """The calibration of the encoder node ``n`` uses (the experiment's when it was not timed),
    that encoder's max length, and its :func:`encoder_id`."""
    p = _encoder_params(n)
    if p is None:
        return c, None, None
    ident = encoder_id(p)
    return c.get("encoders", {}).get(ident, c), int(p["max_length"]), ident


def _calibrate_runs(queries: int = 1000, depth: int = 1000) -> dict:
    """Seconds per input row of a run stage (read the unit run, aggregate, cut, write), on a
    synthetic passage run of ``queries`` x ``depth`` rows, and seconds per query of scoring (ALL,
    IN and OUT, nDCG@100 and R@100, over the top 100)."""

    rng = np.random.default_rng(0)
    run = pd.DataFrame(
        {
            "query_id": np.repeat([f"q{i}" for i in range(queries)], depth),
            "doc_id": [
                f"FAM{d:07d}#{p}"
                for d, p in zip(rng.integers(0, 50_000, queries * depth), rng.integers(0, 20, queries * depth))
            ],
            "score": rng.random(queries * depth),
        }
    )
    with tempfile.TemporaryDirectory(prefix="harness-calibration-") as tmp:
        write_trec(run.assign(rank=run.groupby("query_id").cumcount() + 1), Path(tmp) / "units.trec", "u")
        t0 = time.perf_counter()
        out = top_k(aggregate(read_trec(Path(tmp) / "units.trec"), "maxp"), 100)
        write_trec(out, Path(tmp) / "family.trec", "f")
        seconds = time.perf_counter() - t0

    class Judged:  # five relevant families a query, split over the subsets as DAPFAM's are
        qrels = out.groupby("query_id").head(5)[["query_id", "doc_id"]].assign(relevance=1)

        def judgments(self, name):
            return self.qrels if name == "ALL" else self.qrels.iloc[(0 if name == "IN" else 1) :: 2]

    t0 = time.perf_counter()
    score(out, Judged())
    return {"run_s_per_row": seconds / (queries * depth), "score_s_per_query": (time.perf_counter() - t0) / queries}


def _bm25_point(families: int, index_threads: int, search_threads: int, queries: int = 60) -> dict:
    """Seconds of each BM25 stage on ``families`` synthetic families, on the code paths an
    experiment takes: a DAPFAM-format folder (:mod:`harness.data.synthetic`) read as a dataset, its
    FULL view in POINT_LENGTH-word passages, built by ``passage_bm25`` (passaging streamed into
    IndexCollection), then IndexCollection over the finished units (``index_file``), passaging alone
    (what a units build for another backend costs) and search with TAC queries: seconds per distinct
    query term (Heaps' estimate, as the estimate uses)."""

    with tempfile.TemporaryDirectory(prefix="harness-calibration-") as tmp_name:
        tmp = Path(tmp_name)
        synthetic.write_dataset(tmp / "data", families, FAMILY_CHARS, queries, QUERY_CHARS, seed=families)
        cfg = compose(
            [
                "+experiment=passage_bm25",
                "dataset=local",
                f"dataset.path={tmp / 'data'}",
                "target_fields=FULL",
                "query_fields=TAC",
                f"passage.length={POINT_LENGTH}",
                f"index.threads={index_threads}",
                f"search.threads={search_threads}",
                f"root={tmp / 'store'}",
            ]
        )
        store = Store(tmp / "store")
        ds = data.load(cfg.dataset, store.root)
        exp, be = Experiment(cfg, ds, store), get("bm25")
        t0 = time.perf_counter()
        units = passages.node(exp, be, build=False)
        index = be.index(exp, units)
        streamed = time.perf_counter() - t0
        chars = view_chars(sizes(ds, store.root), "FULL")  # the estimate's own measure of an index's size
        t0 = time.perf_counter()
        bm25.index_file(store.path(units), tmp / "file", index_threads, False)
        index_file = time.perf_counter() - t0
        t0 = time.perf_counter()
        split = lambda t: passages.word_windows(t, POINT_LENGTH, POINT_LENGTH)  # noqa: E731
        passages.write_units(passages.units(V.target_texts(ds.corpus, "FULL"), split), tmp / "alone")
        passaging = time.perf_counter() - t0
        topics = {q: t for q, t in V.query_texts(ds.queries, "TAC").items() if t.strip()}
        few = dict(list(topics.items())[: queries // 4])
        path = store.path(index) / "index"
        bm25.search(path, few, 0.9, 0.4, 1000, search_threads)  # warm-up
        _, t_few, _ = bm25.search(path, few, 0.9, 0.4, 1000, search_threads)
        _, t_all, _ = bm25.search(path, topics, 0.9, 0.4, 1000, search_threads)
    q_chars = float(np.mean([len(t) for t in topics.values()]))
    terms = distinct_terms(q_chars / 6.0)
    per_term = max(t_all - t_few, 1e-9) / ((len(topics) - len(few)) * terms)
    return {
        "families": families,
        "chars": chars,
        "passaging_s": passaging,
        "streamed_s": streamed,
        "index_file_s": index_file,
        "search_s_per_term": per_term,
        "search_fixed_s": max(t_few - len(few) * terms * per_term, 0.0),
        "query_chars": q_chars,
        "index_threads": index_threads,
        "search_threads": search_threads,
    }


# Search cost per query term grows more slowly than the index (Lucene skips postings that cannot
# reach the top k), so it is extrapolated as a power law; build stages touch every token and are
# extrapolated linearly.
POWER_LAW = ("search_s_per_term",)


def at(points: list[dict], field: str, chars: float) -> float:
    """``field`` of the BM25 points at an index of ``chars`` characters: linear between the two
    points around it; past the largest, along the curve through the two points calibrated near
    the target (4x apart, many queries: the small points' noise would swamp the slope), a line
    for build stages and a power law for search (``POWER_LAW``)."""
    xs = [p["chars"] for p in points]
    ys = [p[field] for p in points]
    if len(xs) == 1:
        return ys[0] * chars / xs[0] if field.endswith("_s") else ys[0]
    if chars > xs[-1]:
        near = [(p["chars"], p[field]) for p in points if p.get("near_target")][-2:]
        (x0, y0), (x1, y1) = near if len(near) == 2 else list(zip(xs, ys))[-2:]
        if field in POWER_LAW and min(x0, y0, x1, y1) > 0:
            exponent = max(math.log(y1 / y0) / math.log(x1 / x0), 0.0)
            return ys[-1] * (chars / xs[-1]) ** exponent
        return max(ys[-1] + max((y1 - y0) / (x1 - x0), 0.0) * (chars - xs[-1]), 0.0)
    i = min(max(bisect.bisect_left(xs, chars), 1), len(xs) - 1)
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    return max(ys[i - 1] + slope * (chars - xs[i - 1]), 0.0)


def distinct_terms(words: float) -> float:
    """Distinct analysed terms of a query of ``words`` words (Heaps' law, K = 5.5, beta = 0.6). The
    calibration divides by the same function, so its error cancels for queries of the length the
    points were measured with (TAC-like)."""
    return 5.5 * max(words, 1.0) ** 0.6


def _calibrate_encoder(e) -> dict:
    make_encoder(e)  # the first load also imports torch and transformers, once per process
    t0 = time.perf_counter()
    enc = make_encoder(e)
    load = time.perf_counter() - t0
    sample = synthetic.texts(1, 4000, np.random.default_rng(7))[0]
    per_seq = {}
    for length in (64, 256):
        ids = enc.tokenizer(sample, add_special_tokens=False)["input_ids"][: length - 2]
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
    return {
        "model_load_s": load,
        "encode_a": max(a, 1e-9),
        "encode_b": max(b, 0.0),
        "flat_s_per_mac": flat,
        "encoder_lengths": [64, 256],
    }


# ----------------------------------------------------------------------------- estimate
def seq_seconds(c: dict, length: float, gpu: float = 1.0) -> float:
    return (c["encode_a"] * length + c["encode_b"] * length**2) / gpu


def unit_shape(units, size: dict, c: dict, cfg, max_length: int | None = None) -> tuple[float, float]:
    """(number of units, tokens per unit) of a units artifact, from the view's size, for an encoder
    of ``max_length`` tokens (default the experiment's)."""
    p, fam = units.params, max(1, size["families"])
    max_length = int(max_length or cfg.encoder.max_length)
    tokens = view_chars(size, p["view"]) / c["chars_per_token"]
    if p["granularity"] == "document":
        return fam, min(tokens / fam, max_length)
    if p["tokenizer"] == "encoder":
        window = min(p["length"], max_length - 2)
        return tokens / min(p["stride"], window) + fam / 2, window
    words = view_chars(size, p["view"]) / 6.0  # about 6 characters a word, its space included
    return words / p["stride"] + fam / 2, min(p["length"] * 6.0 / c["chars_per_token"], max_length)


def estimate(
    nodes,
    missing: set,
    size: dict,
    c: dict,
    cfg,
    gpu: float = 1.0,
    reach: dict | None = None,
    by_encoder: dict | None = None,
) -> defaultdict[str, float]:
    """Predicted seconds per artifact kind for the nodes whose keys are in ``missing``. ``reach``
    (optional) gets, per kind, the largest index (characters) or sequence (tokens) it predicts for;
    ``by_encoder`` (optional) the encoding seconds per :func:`encoder_id`, each priced by its own
    calibration."""
    out: defaultdict[str, float] = defaultdict(float)  # a missing kind reads as 0 s
    reach = {} if reach is None else reach
    points = c["bm25_points"]
    streamed = set()
    nq = size["queries"]

    def reached(kind, x):
        reach[kind] = max(reach.get(kind, 0.0), float(x))

    for n in nodes:
        if n.key not in missing:
            continue
        p, model = n.params, stage.get(n.kind).cost  # each stage names the model that prices it
        if model == "passaging":
            chars = view_chars(size, p["view"])
            out[n.kind] += at(points, "passaging_s", chars)
            reached(n.kind, chars)
        elif model == "bm25_index":
            chars = view_chars(size, _view(n))
            reached(n.kind, chars)
            units = n.parents[0].key
            if "shard" in p:  # one shard: its share of the finished units, indexed alone
                out[n.kind] += at(points, "index_file_s", chars / p["shards"])
            elif p.get("shards", 1) > 1:  # the merge of the shards' indexes: copying segments
                out[n.kind] += 0.1 + MERGE_SHARE * at(points, "index_file_s", chars)
            elif units in missing and units not in streamed:  # units written while they are indexed
                streamed.add(units)
                out[n.kind] += max(at(points, "streamed_s", chars) - at(points, "passaging_s", chars), 0.0)
            else:
                out[n.kind] += at(points, "index_file_s", chars)
        elif model == "encoding":
            if p.get("shards", 1) > 1 and "shard" not in p:  # the merge: the shards' vectors concatenated
                out[n.kind] += 0.1
                continue
            ce, max_length, ident = _encoder_timing(c, n)
            count, length = unit_shape(_units_node(n), size, c, cfg, max_length)
            share = 1.0 / p["shards"] if "shard" in p else 1.0  # a shard encodes its share, loading the model itself
            seconds = share * count * seq_seconds(ce, length + 2, gpu) + ce["model_load_s"]
            out[n.kind] += seconds
            if by_encoder is not None and ident is not None:
                by_encoder[ident] = by_encoder.get(ident, 0.0) + seconds
            reached(n.kind, length + 2)
        elif model == "finetune":  # a fine-tuned encoder (harness.tuned): its training steps
            seconds = finetune_seconds(n, size, c, gpu)
            out[n.kind] += seconds
            if by_encoder is not None:
                ident = encoder_id({**n.params, "dtype": _train_dtype(n)})
                by_encoder[ident] = by_encoder.get(ident, 0.0) + seconds
        elif model == "flat_index":
            out[n.kind] += 0.05
        elif model == "search":
            q_chars = view_chars(size, p["query_view"], query=True)
            if p["backend"] == "bm25":
                chars = view_chars(size, _view(n))
                reached(n.kind, chars)
                terms = max(1, nq) * distinct_terms(q_chars / max(1, nq) / 6.0)
                out[n.kind] += terms * at(points, "search_s_per_term", chars) + at(points, "search_fixed_s", chars)
            else:
                ce, max_length, _ = _encoder_timing(c, n)
                count, _ = unit_shape(_units_node(n), size, c, cfg, max_length)
                q_len = min(q_chars / max(1, nq) / c["chars_per_token"], max_length or cfg.encoder.max_length)
                out[n.kind] += (
                    nq * seq_seconds(ce, q_len + 2, gpu) + ce["model_load_s"] + nq * count * 384 * ce["flat_s_per_mac"]
                )
        elif model == "aggregation":
            out[n.kind] += 0.1 + c["run_s_per_row"] * nq * _depth(n)
        elif model == "transform":  # inputs of search.k rows per query
            out[n.kind] += 0.1 + c["run_s_per_row"] * nq * 100 * max(1, len(n.parents))
        elif model == "scoring":
            out[n.kind] += 0.15 + c["score_s_per_query"] * nq
    return out


def shard_walls(nodes, missing: set, size: dict, c: dict, cfg) -> dict[str, tuple[int, float, float]]:
    """Per shard kind: (shards to build, predicted seconds of the largest, wall time when each
    stage's shards run at once: the sum over stages of their largest shard)."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for n in nodes:
        if n.key in missing and "shard" in n.params:
            s = estimate([n], {n.key}, size, c, cfg)[n.kind]
            groups[(n.kind, n.parents[0].key, n.params["shards"])].append(s)
    out: dict[str, tuple[int, float, float]] = {}
    for (kind, _, _), secs in groups.items():
        k, each, wall = out.get(kind, (0, 0.0, 0.0))
        out[kind] = (k + len(secs), max(each, max(secs)), wall + max(secs))
    return out


# Seconds of a training step per pair over seconds of encoding its texts at inference: the backward
# pass, the optimiser and unsorted (padded) batches on top of the forward one. bench/finetune.py's
# pairs/s against this machine's encoder calibration gives about 6 (MiniLM) and 5 (mpnet), bf16:
# docs/benchmarks.md#fine-tuning.
TRAIN_FACTOR = 6.0


def _train_dtype(n) -> str:
    return str(n.params["finetune"]["dtype"])  # resolved when keyed (harness.tuned.train_dtype)


def finetune_seconds(n, size: dict, c: dict, gpu: float = 1.0) -> float:
    """A fine-tuned encoder's training: each pair's query and document (and mined negative) through
    the model and back, ``TRAIN_FACTOR`` times their encoding, for every epoch; a cross-fitted fold
    trains on the other folds' share of the positives. Priced with the encoder's own calibration
    at the training dtype where it was timed."""
    p, ft = n.params, n.params["finetune"]
    ce = c.get("encoders", {}).get(encoder_id({**p, "dtype": _train_dtype(n)}), c)
    cpt, length = c["chars_per_token"], int(p["max_length"])
    nq, fam = max(1, size["queries"]), max(1, size["families"])
    q_len = min(view_chars(size, str(ft["query_fields"]), query=True) / nq / cpt, length)
    d_len = min(view_chars(size, p["target_view"]) / fam / cpt, length)
    share = (int(ft["folds"]) - 1) / int(ft["folds"]) if p["train"] == "crossfit" else 1.0
    pairs = size.get("positives", 5 * nq) * share * int(ft["epochs"])
    if ft["max_steps"]:
        pairs = min(pairs, int(ft["max_steps"]) * int(ft["batch_size"]))
    texts = seq_seconds(ce, q_len + 2, gpu) + seq_seconds(ce, d_len + 2, gpu) * (2 if ft["negatives"] == "mined" else 1)
    return TRAIN_FACTOR * pairs * texts + ce["model_load_s"]


def _depth(family_run) -> int:
    unit_run = family_run.parents[0]
    return int(unit_run.params.get("depth", 1000))


def _units_node(n):
    while stage.get(n.kind).cost != "passaging":
        n = n.parents[0]
    return n


def _view(n) -> str:
    return _units_node(n).params["view"]


def bm25_reach(nodes, missing: set, size: dict) -> float:
    """The largest BM25 index (characters of its view) the estimate has to predict."""
    return max(
        [view_chars(size, _view(n)) for n in nodes if n.key in missing and stage.get(n.kind).cost == "bm25_index"],
        default=0.0,
    )


# The calibration line of each cost model the BM25 points calibrate (by the stage that uses it).
BM25_LINES = {"passaging": "passaging", "bm25_index": "indexing", "search": "BM25 search"}


def calibration_ranges(c: dict, reach: dict) -> list[str]:
    """One line per predicted stage: what it was calibrated on and how far the estimate reaches."""
    pts = c["bm25_points"]
    lo, hi = pts[0]["chars"], pts[-1]["chars"]
    lines = []
    for kind, what in ((s.kind, BM25_LINES[s.cost]) for s in stage.stages() if s.cost in BM25_LINES):
        if kind in reach:
            x = reach[kind] / hi
            note = (
                f"extrapolated {x:.1f}x past it"
                if x > 1.0
                else "within it"
                if reach[kind] >= lo
                else "below it (fixed costs of the smallest point dominate)"
            )
            lines.append(
                f"    {kind:12s} {what} calibrated on {_mb(lo)}-{_mb(hi)} of synthetic text in "
                f"{POINT_LENGTH}-word passages ({len(pts)} points); reaches {_mb(reach[kind])}: {note}"
            )
    for kind in (s.kind for s in stage.stages() if s.cost == "encoding" and s.kind in reach):
        lengths = c.get("encoder_lengths", [64, 256])
        lines.append(
            f"    {kind:12s} encoder timed at {lengths[0]}-{lengths[-1]} tokens; reaches {reach[kind]:.0f} tokens"
        )
    lines.append(
        f"    {'other':12s} run files and scoring: per row and per query, timed on a synthetic run of "
        f"1,000 queries x 1,000 passages"
    )
    return lines


def report(nodes, missing: set, size: dict, c: dict, cfg, gpu_speedup: float) -> str:
    reach: dict = {}
    enc_cpu: dict = {}
    enc_gpu: dict = {}
    cpu = estimate(nodes, missing, size, c, cfg, reach=reach, by_encoder=enc_cpu)
    gpu = estimate(nodes, missing, size, c, cfg, gpu_speedup, by_encoder=enc_gpu)
    lines = [
        f"  predicted time of what is not cached (this machine's throughputs; GPU: encoder x{gpu_speedup:g}, assumed):"
    ]
    for kind in sorted(cpu, key=lambda k: -cpu[k]):
        lines.append(f"    {kind:12s} CPU {_fmt(cpu[kind]):>9s}   GPU {_fmt(gpu[kind]):>9s}")
        if kind == stage.EMBEDDINGS and enc_cpu:  # each encoder x dtype the plan builds, priced by its own timing
            for ident in sorted(enc_cpu, key=lambda i: -enc_cpu[i]):
                lines.append(
                    f"      {encoder_label(ident):34s} CPU {_fmt(enc_cpu[ident]):>9s}   GPU {_fmt(enc_gpu[ident]):>9s}"
                )
    for kind, (k, each, wall) in shard_walls(nodes, missing, size, c, cfg).items():
        lines.append(
            f"    {kind}: {k} shards, {_fmt(each)} each on CPU: {_fmt(wall)} of wall time with a worker per shard "
            f"(sharding.launcher=local|slurm), {_fmt(cpu[kind])} one after another (inline)"
        )
    lines.append(f"    {'total':12s} CPU {_fmt(sum(cpu.values())):>9s}   GPU {_fmt(sum(gpu.values())):>9s}")
    lines.append(
        f"  sizes: {size.get('source', 'measured on the data')}; {c['chars_per_token']:.2f} characters per "
        f"encoder token ({size.get('chars_per_token_source', 'measured on the corpus with the tokenizer')})"
    )
    lines.append("  calibration (per line):")
    return "\n".join(lines + calibration_ranges(c, reach))


def _mb(chars: float) -> str:
    return f"{chars / 1e6:,.0f} MB" if chars >= 1e7 else f"{chars / 1e6:.1f} MB"


def _fmt(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _write(path: Path, obj: dict) -> None:
    try:
        write_json_atomic(path, obj)
    except OSError as e:  # a read-only root: measure again next time
        log.debug("not cached: %s (%s)", path, e)


__all__ = ["sizes", "calibrate", "estimate", "report"]
