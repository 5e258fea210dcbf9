"""Export a dataset's topics and qrels for trec_eval and Anserini.

    python -m harness.export dataset=local dataset.path=../shared/data/cacm-xdom out=exports/cacm [query_fields=TA]

Writes ``topics.<view>.tsv`` (Anserini's TsvString topics) for every query view and
``qrels.all.txt``, ``qrels.in.txt``, ``qrels.out.txt`` (TREC qrels as scored: each subset's positives and,
with relevance 0, the other documents judged for the same queries):

    trec_eval -m ndcg_cut.100 exports/cacm/qrels.out.txt runs/family_run/<key>/run.trec
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from . import (
    config,  # noqa: F401  (registers the config schema Hydra composes on)
    data,
)
from .data import views as V
from .data.qrels import SUBSETS, write_trec_qrels, write_trec_topics


def export(ds, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [write_trec_qrels(ds.judgments(s), out / f"qrels.{s.lower()}.txt") for s in SUBSETS]
    for view in V.QUERY_VIEWS:
        texts = V.render(ds.queries, V.fields(view, "query"))
        written.append(write_trec_topics(dict(zip(ds.query_ids, texts)), out / f"topics.{view}.tsv"))
    return written


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out = Path(cfg.get("out") or "exports")
    for p in export(data.load(cfg.dataset, cfg.root), out):
        print(p)


if __name__ == "__main__":
    sys.argv = [a if not a.startswith("out=") else "+" + a for a in sys.argv]
    main()
