"""``mini``: a deterministic synthetic dataset in DAPFAM's columns, the embedded default and test data.

What it imitates, and why each part is there:

* several IPC3 domains, each with its own vocabulary, plus generic patent words shared by all;
* topics inside a domain (citations IN-domain mostly link families of one topic) and cross-domain
  concepts (citations OUT-domain link families of different domains sharing a concept), so that
  IN pairs share much vocabulary and OUT pairs little, as in DAPFAM;
* claims and long descriptions whose topical signal sits in one stretch of the description, so
  that passages beat whole documents as they do on real patents;
* some families carry a second IPC3 code, so IN/OUT is decided by overlap, not by primary domain;
* ``NC`` rows (relevance 0), as many as the positives per query, sampled at random;
* OUT pairs about 25% of positives (DAPFAM: 21-26%).

Everything comes from one ``numpy`` generator seeded by ``seed``: the same parameters always give
byte-identical files, so artifacts keyed by them stay valid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import schema as S

DOMAIN_CODES = ["A61", "B65", "C07", "F16", "G06", "H01", "H04", "B60"]
GENERATOR_VERSION = 1  # bump when the generator changes: it is part of every mini artifact key

_CONS = list("bdfgklmnprstvz")
_VOWS = list("aeiou")


def _words(rng: np.random.Generator, n: int, taken: set) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_CONS) + rng.choice(_VOWS) for _ in range(int(rng.integers(2, 4))))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def _text(rng, n: int, pools: list[tuple[list[str], float]]) -> str:
    weights = np.array([w for _, w in pools], dtype=float)
    which = rng.choice(len(pools), size=n, p=weights / weights.sum())
    return " ".join(pools[k][0][int(rng.integers(len(pools[k][0])))] for k in which)


def generate(
    n_docs: int = 300,
    n_queries: int = 30,
    n_domains: int = 4,
    topics_per_domain: int = 4,
    n_concepts: int = 6,
    in_per_query: int = 6,
    out_per_query: int = 2,
    description_words: tuple[int, int] = (250, 500),
    second_code_rate: float = 0.1,
    seed: int = 13,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Return ``(queries, corpus, qrels)`` frames with DAPFAM's column names."""
    if not 2 <= n_domains <= len(DOMAIN_CODES):
        raise ValueError(f"dataset.n_domains must be 2..{len(DOMAIN_CODES)}, got {n_domains}")
    rng = np.random.default_rng(seed)
    taken: set = set()
    generic = _words(rng, 120, taken)
    domains = DOMAIN_CODES[:n_domains]
    dom_vocab = {d: _words(rng, 80, taken) for d in domains}
    topic_vocab = {(d, t): _words(rng, 12, taken) for d in domains for t in range(topics_per_domain)}
    concept_vocab = {c: _words(rng, 10, taken) for c in range(n_concepts)}

    def family(fid: str, d: str, t: int, c: int) -> dict:
        tw, cw, dv = topic_vocab[(d, t)], concept_vocab[c], dom_vocab[d]
        signal = [(tw, 0.45), (cw, 0.25), (dv, 0.15), (generic, 0.15)]
        noise = [(generic, 0.6), (dv, 0.4)]
        n_desc = int(rng.integers(*description_words))
        # Signal in one stretch of the description, generic text around it: passages matter.
        start = int(rng.integers(0, max(1, n_desc - 80)))
        desc = " ".join(
            filter(
                None, [_text(rng, start, noise), _text(rng, 80, signal), _text(rng, max(0, n_desc - start - 80), noise)]
            )
        )
        codes = [d]
        if rng.random() < second_code_rate:
            codes.append(domains[int(rng.integers(n_domains))])
        return {
            "id": fid,
            "domain": d,
            "topic": t,
            "concept": c,
            S.TITLE: _text(rng, int(rng.integers(5, 10)), [(tw, 0.4), (cw, 0.2), (generic, 0.4)]),
            S.ABSTRACT: _text(rng, int(rng.integers(40, 80)), [(tw, 0.25), (cw, 0.15), (dv, 0.25), (generic, 0.35)]),
            S.CLAIMS: _text(rng, int(rng.integers(60, 120)), [(tw, 0.2), (cw, 0.1), (dv, 0.3), (generic, 0.4)]),
            S.DESCRIPTION: desc,
            S.KEYWORDS: "; ".join(
                rng.choice(tw, 3, replace=False).tolist() + rng.choice(cw, 2, replace=False).tolist()
            ),
            S.IPC3: sorted(set(codes)),
        }

    def draw() -> tuple[str, int, int]:
        return (
            domains[int(rng.integers(n_domains))],
            int(rng.integers(topics_per_domain)),
            int(rng.integers(n_concepts)),
        )

    docs = [family(f"MINI-D{i:05d}", *draw()) for i in range(n_docs)]
    queries = [family(f"MINI-Q{i:04d}", *draw()) for i in range(n_queries)]

    by_topic: dict = {}
    by_concept: dict = {}
    for doc in docs:
        by_topic.setdefault((doc["domain"], doc["topic"]), []).append(doc)
        by_concept.setdefault(doc["concept"], []).append(doc)
    rows = []
    for q in queries:
        same = by_topic.get((q["domain"], q["topic"]), [])
        other = [d for d in by_concept.get(q["concept"], []) if q["domain"] not in d[S.IPC3]]
        picked = [same[i] for i in rng.permutation(len(same))[:in_per_query]]
        picked += [other[i] for i in rng.permutation(len(other))[:out_per_query]]
        pos_ids = {d["id"] for d in picked}
        for d in picked:
            dom = "IN" if set(q[S.IPC3]) & set(d[S.IPC3]) else "OUT"
            rows.append({S.QUERY_ID: q["id"], S.DOC_ID: d["id"], S.RELEVANCE: 1, S.DOMAIN: dom})
        negatives = [d for d in docs if d["id"] not in pos_ids]
        for i in rng.permutation(len(negatives))[: len(picked)]:
            rows.append({S.QUERY_ID: q["id"], S.DOC_ID: negatives[i]["id"], S.RELEVANCE: 0, S.DOMAIN: "NC"})

    qf = pd.DataFrame(queries).rename(columns={"id": S.QUERY_ID})
    cf = pd.DataFrame(docs).rename(columns={"id": S.DOC_ID})
    qf = qf[[S.QUERY_ID, S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION, S.KEYWORDS, S.IPC3]]
    cf = cf[[S.DOC_ID, S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION, S.IPC3]]
    return qf, cf, pd.DataFrame(rows, columns=S.QRELS_COLUMNS)


def write(folder: str | Path, **params) -> Path:
    """Write the generated frames as a DAPFAM-format folder (the hub's three parquet files)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    q, c, r = generate(**params)
    q.to_parquet(folder / "queries.parquet", index=False)
    c.to_parquet(folder / "corpus.parquet", index=False)
    r.to_parquet(folder / "qrels_all.parquet", index=False)
    return folder
