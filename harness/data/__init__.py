"""Datasets: DAPFAM from the hub, a local DAPFAM-format folder, a BEIR folder, or ``mini``.

Every source is rendered into one :class:`Dataset`: queries and qrels in memory (small), the
corpus as a stream of record batches (DAPFAM's full text is ~3 GB), document IPC3 codes, and a
``fingerprint`` of the content that keys every artifact built from it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import schema as S
from .qrels import DomainCheck, positives, subset
from .schema import DataError

log = logging.getLogger(__name__)

__all__ = ["Dataset", "DataError", "DomainCheck", "load", "load_local", "load_beir", "load_mini", "load_hub"]


@dataclass
class Dataset:
    name: str
    fingerprint: str
    queries: pd.DataFrame
    qrels_raw: pd.DataFrame
    doc_ipc3: dict
    corpus: Any  # has iter_batches(columns, batch_size)
    domain_source: str = "file"
    source: dict = field(default_factory=dict)

    def __post_init__(self):
        self.positives, self.domain_check = positives(self.qrels_raw, self.queries, self.doc_ipc3, self.domain_source)

    @property
    def n_docs(self) -> int:
        return len(self.doc_ipc3)

    @property
    def query_ids(self) -> list[str]:
        return self.queries[S.QUERY_ID].tolist()

    def qrels(self, name: str = "ALL") -> pd.DataFrame:
        """Positive judgments of one subset: ALL, IN or OUT."""
        return subset(self.positives, name)

    def summary(self) -> dict:
        pos = self.positives
        return {"dataset": self.name, "queries": len(self.queries), "documents": self.n_docs,
                "positive_pairs": len(pos), "in_pairs": int((pos["domain"] == "IN").sum()),
                "out_pairs": int((pos["domain"] == "OUT").sum()),
                "domain_disagreements": self.domain_check.disagreements}


def _make(name: str, parts: dict, domain_source: str, source: dict) -> Dataset:
    return Dataset(name=name, fingerprint=parts["fingerprint"], queries=parts["queries"], qrels_raw=parts["qrels"],
                   doc_ipc3=parts["doc_ipc3"], corpus=parts["corpus"], domain_source=domain_source,
                   source={**source, "files": parts["files"], "fingerprint": parts["fingerprint"]})


def load_local(path: str | Path, files: dict | None = None, domain_source: str = "file", name: str = "local") -> Dataset:
    from .dapfam import read_local

    return _make(name, read_local(path, files), domain_source, {"type": "local", "path": str(Path(path).resolve())})


def load_beir(path: str | Path, split: str = "test", domain_source: str = "file") -> Dataset:
    from .beir import read_beir

    return _make("beir", read_beir(path, split), domain_source, {"type": "beir", "path": str(Path(path).resolve())})


def load_hub(repo_id: str, revision: str, files: dict | None = None, cache_dir: str | None = None,
             domain_source: str = "file") -> Dataset:
    from .dapfam import DEFAULT_FILES, download_hub, read_local

    files = {**DEFAULT_FILES, **(files or {})}
    root, commit = download_hub(repo_id, revision, files, cache_dir)
    return _make("dapfam", read_local(root, files), domain_source, {"type": "hub", "repo_id": repo_id, "revision": commit})


def load_mini(folder: str | Path, params: dict, domain_source: str = "file") -> Dataset:
    """Generate the synthetic set once into ``folder`` (an artifact keyed by its parameters), then
    read it through the local loader, so ``mini`` takes the same path as real data."""
    from ..store import Artifact, Store
    from . import mini

    art = Artifact("dataset", {"generator": "mini", "version": mini.GENERATOR_VERSION, **params})
    path = Store(folder).ensure(art, lambda tmp: mini.write(tmp, **params) and None, describe="mini dataset")
    return load_local(path, domain_source=domain_source, name="mini")


def load(cfg, artifacts_root: str | Path = ".") -> Dataset:
    """Load the dataset a Hydra ``dataset`` config group describes."""
    kind = cfg.get("type")
    ds_src = cfg.get("domain_source", "file")
    if kind == "mini":
        from omegaconf import OmegaConf

        params = OmegaConf.to_container(cfg.get("params") or {}, resolve=True)
        if "description_words" in params:  # a (min, max) range
            params["description_words"] = tuple(params["description_words"])
        ds = load_mini(artifacts_root, params, ds_src)
    elif kind == "local":
        if not cfg.get("path"):
            raise DataError("dataset=local needs dataset.path=DIR (a folder with queries.parquet, corpus.parquet, qrels_all.parquet).")
        ds = load_local(cfg.path, dict(cfg.get("files") or {}), ds_src)
    elif kind == "beir":
        if not cfg.get("path"):
            raise DataError("dataset=beir needs dataset.path=DIR (a folder with corpus.jsonl, queries.jsonl, qrels/test.tsv).")
        ds = load_beir(cfg.path, cfg.get("split", "test"), ds_src)
    elif kind == "hub":
        ds = load_hub(cfg.repo_id, cfg.revision, dict(cfg.get("files") or {}), cfg.get("cache_dir"), ds_src)
    else:
        raise DataError(f"dataset.type={kind!r}: expected one of mini, local, beir, hub. Fix: choose dataset=mini|local|beir|dapfam.")
    log.info("dataset %s: %s", ds.name, ds.summary())
    return ds
