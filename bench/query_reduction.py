"""Patent query reduction (query_reduction=tfidf|kl): what it does to effectiveness and to the cost
of a query, on the same index, topics and threads, each run through the harness as a user runs it.

* effectiveness: cacm-xdom-coded (``../shared``), document level, TA on both sides: nDCG@100
  ALL / IN / OUT and R@100 OUT of BM25 with the full query and with each reduction (CACM's queries
  are short, so this is where reduction has least to remove);
* cost at DAPFAM's scale: a synthetic DAPFAM-format corpus (``--families``, default 45,336; the
  generator of ``bench/dapfam_scale.py``) searched at document level with TAC queries of
  ``--query-chars`` characters (hundreds of distinct terms, as DAPFAM's title + abstract + claims):
  seconds per query of the reduced search (reduction included) / the full search, same threads.

    python bench/query_reduction.py                        # full size (README: how long it takes)
    python bench/query_reduction.py --families 3000        # quick
    python bench/query_reduction.py --folder DIR           # reuse a dataset folder of dapfam_scale.py
"""

import argparse
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from _util import ROOT, add_quick, compose, report

CODED = ROOT.parent / "shared" / "data" / "cacm-xdom-coded"
REDUCTIONS = [("tfidf", 10), ("tfidf", 25), ("tfidf", 50), ("kl", 10), ("kl", 25), ("kl", 50)]


def row(root: Path, folder: Path, *overrides: str) -> dict:
    from harness.run import execute

    return execute(
        compose("+experiment=doc_bm25", "dataset=local", f"dataset.path={folder}", f"root={root}", *overrides)
    )


def line(name: str, r: dict) -> str:
    return (
        f"{name:12s} nDCG@100 {r['nDCG@100/ALL']:.4f} / {r['nDCG@100/IN']:.4f} / {r['nDCG@100/OUT']:.4f}"
        f"  R@100 OUT {r['R@100/OUT']:.4f}  {1000 * r['seconds_per_query']:7.1f} ms/query"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", type=int, default=45_336)
    ap.add_argument("--chars", type=int, default=6000, help="characters per family (TAC: title, abstract, claims)")
    ap.add_argument("--queries", type=int, default=1247)
    ap.add_argument("--query-chars", type=int, default=6000)
    ap.add_argument("--n-terms", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--folder", default=None, help="reuse a DAPFAM-format folder")
    add_quick(ap)
    a = ap.parse_args()
    if a.quick:
        a.families, a.chars, a.queries, a.query_chars = 150, 2000, 10, 1500
    from harness.data import synthetic

    tmp = Path(tempfile.mkdtemp(prefix="bench-qr-"))
    threads = (f"search.threads={a.threads}", f"index.threads={a.threads}")
    if CODED.exists() and not a.quick:
        ta = ("query_fields=TA", "target_fields=TA", *threads)
        full = row(tmp / "coded", CODED, *ta)
        print("cacm-xdom-coded, document level, TA -> TA (ALL / IN / OUT):")
        print(line("full query", full))
        for method, n in REDUCTIONS:
            r = row(tmp / "coded", CODED, *ta, f"query_reduction={method}", f"query_reduction.n_terms={n}")
            print(line(f"{method}({n})", r))
    folder = Path(a.folder) if a.folder else tmp / "dapfam"
    if not a.folder:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            pool.submit(synthetic.write_dataset, folder, a.families, a.chars, a.queries, a.query_chars).result()
    tac = ("query_fields=TAC", "target_fields=TAC", *threads)
    full = row(tmp / "scale", folder, *tac)
    print(f"synthetic DAPFAM-format corpus, {a.families} families, TAC -> TAC, {a.queries} queries:")
    print(line("full query", full))
    for method in ("tfidf", "kl"):
        r = row(tmp / "scale", folder, *tac, f"query_reduction={method}", f"query_reduction.n_terms={a.n_terms}")
        print(line(f"{method}({a.n_terms})", r))
        report(
            f"query reduction {method}{a.n_terms}/full query s/query",
            r["seconds_per_query"] / full["seconds_per_query"],
            f"{a.families} families, {a.queries} TAC queries of ~{a.query_chars} chars, document-level BM25, depth "
            f"1000, {a.threads} threads each: reduced (reduction included) {1000 * r['seconds_per_query']:.1f} "
            f"ms/query, full {1000 * full['seconds_per_query']:.1f} ms/query, same index",
        )


if __name__ == "__main__":
    main()
