"""Fine-tuning a dense encoder on training judgments, and the checks that keep it honest.

A fine-tuned encoder is the easiest way to fool oneself on citation data (issue 50,
docs/rechoice.md): on CACM a model trained on one split's pairs met them read backwards in the
other, and on the disjoint data most of the apparent gain sat on documents that are cited in both
splits. So this module holds, next to the training itself, the two checks every fine-tuned row
carries:

* :func:`moved_positives` -- the identity check for encoders: the training positives moved to other
  documents of the same domain relation to their query (IN stays IN, OUT stays OUT). A model trained
  on those can learn the domain relation and the popularity of nothing; when it gains as much as the
  real model, the gain was not about which documents answer which queries.
* :func:`never_shown` -- the view of a run on the scored positives whose document was never a
  training positive, the other positives taken out of the ranking, so that lifting them (what a
  model that learned *which documents get cited* does) is neither rewarded nor punished.

Training is sentence-transformers' MultipleNegativesRankingLoss (in-batch negatives, optionally one
mined hard negative per pair) in a plain deterministic loop: fixed seed, fixed batch order, no
duplicate query or document in a batch (a duplicate would be its own in-batch negative). Everything
here is a pure function of tables and texts; :mod:`harness.backends.dense` keys the model as an
artifact and decides what it is trained on.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from . import ipc
from .console import inner_bars

log = logging.getLogger("harness.finetune")

VERSION = 1


def examples(
    positives: pd.DataFrame,
    query_texts: dict[str, str],
    doc_texts: dict[str, str],
    out_weight: int = 1,
    negatives: dict[tuple[str, str], str] | None = None,
) -> pd.DataFrame:
    """Training rows ``(query_id, doc_id, query, doc[, negative])``, one per positive pair with both
    texts, an OUT pair repeated ``out_weight`` times (how much an OUT pair counts in the loss).
    ``negatives``: a mined negative document per pair (:func:`mine`)."""
    rows = []
    for q, d, dom in zip(positives["query_id"].astype(str), positives["doc_id"].astype(str), positives["domain"]):
        qt, dt = query_texts.get(q, ""), doc_texts.get(d, "")
        if not qt.strip() or not dt.strip():
            continue
        row = {"query_id": q, "doc_id": d, "query": qt, "doc": dt}
        if negatives is not None:
            n = negatives.get((q, d))
            if n is None:
                continue
            row["negative"] = doc_texts[n]
        rows += [row] * (int(out_weight) if dom == "OUT" else 1)
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "query", "doc"] + (["negative"] if negatives else []))


def batches(ex: pd.DataFrame, batch_size: int, seed: int) -> list[list[int]]:
    """Row indexes of ``ex`` in batches, shuffled with ``seed``, no query and no document twice in a
    batch (greedy: a row goes to the first open batch that holds neither; sentence-transformers'
    NO_DUPLICATES sampler does the same)."""
    order = np.random.default_rng(seed).permutation(len(ex))
    out: list[list[int]] = []
    seen: list[set] = []
    for i in order:
        keys = {("q", ex["query"].iat[i]), ("d", ex["doc"].iat[i])}
        for b, s in zip(out, seen):
            if len(b) < batch_size and not (keys & s):
                b.append(int(i))
                s |= keys
                break
        else:
            out.append([int(i)])
            seen.append(set(keys))
    return out


def mine(
    q_emb: np.ndarray,
    qids: list[str],
    d_emb: np.ndarray,
    dids: list[str],
    positives: pd.DataFrame,
    depth: int,
    seed: int,
) -> dict[tuple[str, str], str]:
    """One hard negative per positive pair: a random document among the query's top ``depth`` by
    the base encoder that is not one of its positives."""
    rng = np.random.default_rng(seed)
    pos = positives.groupby(positives["query_id"].astype(str))["doc_id"].apply(lambda s: set(s.astype(str))).to_dict()
    top = np.argsort(-(q_emb @ d_emb.T), axis=1)[:, : depth + 50]
    out = {}
    for row, q in enumerate(qids):
        mine_from = [dids[j] for j in top[row] if dids[j] not in pos.get(q, ())][:depth]
        for d in sorted(pos.get(q, ())):
            if mine_from:
                out[(q, d)] = mine_from[int(rng.integers(len(mine_from)))]
    return out


def moved_positives(
    positives: pd.DataFrame, query_codes: dict, doc_codes: dict, seed: int, relation=ipc.domain
) -> pd.DataFrame:
    """The identity check's training pairs: each positive moved to a random other document whose
    domain relation to the query (IN or OUT, :func:`harness.ipc.domain`) is the positive's, never
    one of the query's positives. A pair with no such document is left out."""
    rng = np.random.default_rng(seed)
    docs = sorted(doc_codes)
    pos = positives.groupby(positives["query_id"].astype(str))["doc_id"].apply(lambda s: set(s.astype(str))).to_dict()
    rows = []
    for q, grp in positives.groupby(positives["query_id"].astype(str), sort=True):
        qc = query_codes.get(q)
        by_rel: dict[str, list[str]] = {}
        for d in docs:
            if d not in pos[q]:
                by_rel.setdefault(relation(qc, doc_codes[d]), []).append(d)
        for _, r in grp.iterrows():
            rel = relation(qc, doc_codes.get(str(r["doc_id"])))
            pool = by_rel.get(rel)
            if pool:
                rows.append({**r.to_dict(), "doc_id": pool[int(rng.integers(len(pool)))]})
    return pd.DataFrame(rows, columns=positives.columns)


def never_shown(run: pd.DataFrame, qrels: pd.DataFrame, shown: dict[str, set]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run and qrels of the never-shown view: per query, the positives whose document is not in
    ``shown[query]`` (the training positives that query's model saw) stay; the other positives
    leave the qrels *and* the run. Queries left without a positive leave both."""
    rel = qrels[qrels["relevance"].astype(float) > 0]
    hidden = {(q, d) for q, d in zip(rel["query_id"], rel["doc_id"]) if d in shown.get(q, ())}

    def kept(table: pd.DataFrame) -> pd.DataFrame:
        return table.loc[
            [(q, d) not in hidden for q, d in zip(table["query_id"], table["doc_id"])]
        ]  # (an empty table stays whole)

    q2 = kept(qrels)
    left = set(q2.loc[q2["relevance"].astype(float) > 0, "query_id"])
    return kept(run[run["query_id"].isin(left)]), q2[q2["query_id"].isin(left)]


def train(
    base: str,
    ex: pd.DataFrame,
    out: Path,
    max_length: int,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 2e-5,
    warmup: float = 0.1,
    seed: int = 0,
    max_steps: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
) -> dict:
    """Fine-tune the sentence-transformers model at ``base`` on ``ex`` (:func:`examples`) and save
    it to ``out`` (a sentence-transformers folder pyserini's encoders read: the transformer at its
    root). ``dtype=bfloat16`` runs forward and loss under autocast (the master weights stay
    float32). Deterministic for a seed on a CPU."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import get_linear_schedule_with_warmup

    if ex.empty:
        raise ValueError("fine-tuning: no training pair has both texts. Fix: train on judgments whose texts exist.")
    torch.manual_seed(seed)
    model = SentenceTransformer(base, device=device)
    model.max_seq_length = int(max_length)
    loss = MultipleNegativesRankingLoss(model)
    plan = [b for e in range(int(epochs)) for b in batches(ex, int(batch_size), seed + e) if len(b) > 1]
    if max_steps:
        plan = plan[: int(max_steps)]
    opt = torch.optim.AdamW(model.parameters(), lr=float(learning_rate))
    sched = get_linear_schedule_with_warmup(opt, int(warmup * len(plan)), max(1, len(plan)))
    cols = ["query", "doc"] + (["negative"] if "negative" in ex.columns else [])
    model.train()
    losses, t0 = [], time.perf_counter()
    for idx in tqdm(plan, desc="fine-tune", unit=" step", disable=inner_bars(), mininterval=2):
        feats = []
        for c in cols:
            f = model.preprocess(ex[c].iloc[idx].tolist())
            feats.append({k: v.to(device) if hasattr(v, "to") else v for k, v in f.items()})
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            value = loss(feats, None)
        value.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(value.detach()))
    seconds = time.perf_counter() - t0
    model.eval()
    model.save(str(out))
    return {
        "train_seconds": round(seconds, 3),
        "steps": len(plan),
        "pairs": int(len(ex)),
        "loss_first": round(losses[0], 4) if losses else None,
        "loss_last": round(float(np.mean(losses[-10:])), 4) if losses else None,
        "train_dtype": dtype,
    }
