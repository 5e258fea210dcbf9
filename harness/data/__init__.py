"""Datasets: DAPFAM from the hub, a local DAPFAM-format folder, a BEIR folder, or ``mini``.

Every source is rendered into one :class:`Dataset`: queries and qrels in memory (small), the
corpus as a stream of record batches (DAPFAM's full text is ~3 GB), document IPC3 codes, and a
``fingerprint`` of the content that keys every artifact built from it.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from .. import stage
from ..artifact import Artifact
from ..stage import Stage, register
from ..store import Store
from . import mini
from . import schema as S
from .beir import read_beir
from .dapfam import DEFAULT_FILES, download_hub, read_local
from .digest import default_cache
from .qrels import DomainCheck, judged_pairs, judgments, positives, subset
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
    drop_self_hits: bool = True
    corpus_fingerprint: str = ""  # a digest of the corpus file (the loader's); defaults to ``fingerprint``
    missing: dict = field(default_factory=dict)  # {"queries"|"corpus"|"qrels": optional columns the files lack}

    def __post_init__(self):
        no_codes = S.IPC3 in self.missing.get("queries", []) or S.IPC3 in self.missing.get("corpus", [])
        if no_codes and (self.domain_source == "ipc3" or S.DOMAIN in self.missing.get("qrels", [])):
            why = "dataset.domain_source=ipc3" if self.domain_source == "ipc3" else "the qrels have no domain_rel"
            raise DataError(
                f"{why}, and the {' and '.join(k for k in ('queries', 'corpus') if S.IPC3 in self.missing.get(k, []))} "
                f"file lacks {S.IPC3!r}: IN and OUT cannot be told apart. Fix: use files with the IPC3 "
                f"lists (the hub's DAPFAM files have them), or domain_source=file with domain_rel labels."
            )
        self.positives, self.domain_check = positives(self.qrels_raw, self.queries, self.doc_ipc3, self.domain_source)
        self.judged = judged_pairs(self.qrels_raw)
        self.corpus_fingerprint = self.corpus_fingerprint or self.fingerprint
        both = set(self.queries[S.QUERY_ID]) & set(self.doc_ipc3)
        self.self_ids = both if self.drop_self_hits else set()
        if both:
            log.warning(
                "%d query id(s) are also corpus ids (e.g. %s): %s",
                len(both),
                sorted(both)[:3],
                "each query's own family is dropped from its ranking (dataset.drop_self_hits=true)"
                if self.drop_self_hits
                else "they may retrieve themselves (dataset.drop_self_hits=false)",
            )

    def require(self, part: str, columns, what: str) -> None:
        """Refuse a feature whose column the ``part`` file (queries, corpus, qrels) lacks."""
        lacking = [c for c in columns if c in self.missing.get(part, [])]
        if lacking:
            where = self.source.get("files", {}).get(part, f"the {part} file")
            raise DataError(
                f"{what} needs column(s) {lacking}, which {where} lacks. Fix: choose a setting that "
                f"reads the columns it has, or use files with them (the hub's DAPFAM files have all)."
            )

    @cached_property
    def doc_ipc_codes(self) -> dict:
        """``{doc id: full IPC codes}`` (``ipcr_codes_str``), read on first use, for levers that want
        IPC4 or section features; a clear error where the corpus lacks the column."""
        if not hasattr(self.corpus, "column"):
            raise DataError(
                f"dataset {self.name}: its corpus format has no {S.IPC_FULL!r} column. Fix: use "
                f"DAPFAM-format parquet files."
            )
        return self.corpus.column(S.IPC_FULL)

    @cached_property
    def topics_fingerprint(self) -> str:
        """A digest of the queries as searched (ids, text fields, codes): runs are keyed by it, so a
        query edit makes new runs and reuses the corpus's units, indexes and embeddings."""

        table = self.queries.sort_values(S.QUERY_ID).astype(str).to_csv(index=False)
        return hashlib.sha256(table.encode()).hexdigest()[:16]

    @cached_property
    def qrels_digest(self) -> str:
        """A digest of the judgments as scored (positives, grades, IN/OUT, judged non-relevant
        documents): scores are keyed by it, so any option that changes them (unknown_ids,
        domain_source) makes other scores."""

        table = self.positives.sort_values(["query_id", "doc_id"]).to_csv(index=False) + self.judged.sort_values(
            ["query_id", "doc_id"]
        ).to_csv(index=False)
        return hashlib.sha256(table.encode()).hexdigest()[:16]

    @property
    def n_docs(self) -> int:
        return len(self.doc_ipc3)

    @property
    def query_ids(self) -> list[str]:
        return self.queries[S.QUERY_ID].tolist()

    def qrels(self, name: str = "ALL") -> pd.DataFrame:
        """Positive judgments of one subset: ALL, IN or OUT."""
        return subset(self.positives, name)

    def judgments(self, name: str = "ALL") -> pd.DataFrame:
        """One subset's qrels as scored: its positives and, with relevance 0, the other documents
        judged for the same queries (:func:`harness.data.qrels.judgments`)."""
        return judgments(self.positives, self.judged, name)

    def summary(self) -> dict:
        pos = self.positives
        return {
            "dataset": self.name,
            "queries": len(self.queries),
            "documents": self.n_docs,
            "positive_pairs": len(pos),
            "in_pairs": int((pos["domain"] == "IN").sum()),
            "out_pairs": int((pos["domain"] == "OUT").sum()),
            "domain_disagreements": self.domain_check.disagreements,
        }


def _make(name: str, parts: dict, opts: dict, source: dict) -> Dataset:
    return Dataset(
        name=name,
        fingerprint=parts["fingerprint"],
        queries=parts["queries"],
        qrels_raw=parts["qrels"],
        doc_ipc3=parts["doc_ipc3"],
        corpus=parts["corpus"],
        domain_source=opts.get("domain_source", "file"),
        drop_self_hits=bool(opts.get("drop_self_hits", True)),
        corpus_fingerprint=parts["corpus_fingerprint"],
        missing=parts.get("missing", {}),
        source={**source, "files": parts["files"], "fingerprint": parts["fingerprint"]},
    )


def _opts(domain_source: str = "file", unknown_ids: str = "keep", drop_self_hits: bool = True) -> dict:
    return {"domain_source": domain_source, "unknown_ids": unknown_ids, "drop_self_hits": drop_self_hits}


def load_local(
    path: str | Path, files: dict | None = None, name: str = "local", digest_cache: Path | None = None, **opts
) -> Dataset:
    opts = _opts(**opts)
    parts = read_local(path, files, opts["unknown_ids"], digest_cache)
    return _make(name, parts, opts, {"type": "local", "path": str(Path(path).resolve())})


def load_beir(path: str | Path, split: str = "test", digest_cache: Path | None = None, **opts) -> Dataset:
    opts = _opts(**opts)
    parts = read_beir(path, split, opts["unknown_ids"], digest_cache)
    return _make("beir", parts, opts, {"type": "beir", "path": str(Path(path).resolve())})


def load_hub(
    repo_id: str,
    revision: str,
    files: dict | None = None,
    cache_dir: str | None = None,
    digest_cache: Path | None = None,
    local_files_only: bool = False,
    **opts,
) -> Dataset:
    opts = _opts(**opts)
    files = {**DEFAULT_FILES, **(files or {})}
    root, commit = download_hub(repo_id, revision, files, cache_dir, local_files_only)
    parts = read_local(root, files, opts["unknown_ids"], digest_cache)
    return _make("dapfam", parts, opts, {"type": "hub", "repo_id": repo_id, "revision": commit})


def load_mini(folder: str | Path, params: dict, **opts) -> Dataset:
    """Generate the synthetic set once into ``folder`` (an artifact keyed by its parameters), then
    read it through the local loader, so ``mini`` takes the same path as real data."""

    art = Artifact(stage.DATASET, {"generator": "mini", "version": mini.GENERATOR_VERSION, **params})

    def write(tmp: Path) -> None:
        mini.write(tmp, **params)

    path = Store(folder).ensure(art, write, describe="mini dataset")
    return load_local(path, name="mini", digest_cache=default_cache(folder), **opts)


def load(cfg, artifacts_root: str | Path = ".") -> Dataset:
    """Load the dataset a Hydra ``dataset`` config group describes."""
    kind = cfg.get("type")
    opts = {
        "domain_source": cfg.get("domain_source", "file"),
        "unknown_ids": cfg.get("unknown_ids", "keep"),
        "drop_self_hits": cfg.get("drop_self_hits", True),
    }
    if not isinstance(opts["drop_self_hits"], bool):
        raise DataError(f"dataset.drop_self_hits={opts['drop_self_hits']!r}: expected true or false.")
    cache = default_cache(artifacts_root)
    if kind == "mini":
        params = OmegaConf.to_container(cfg.get("params") or {}, resolve=True)
        assert isinstance(params, dict)
        if "description_words" in params:  # a (min, max) range
            params["description_words"] = tuple(params["description_words"])
        ds = load_mini(artifacts_root, params, **opts)
    elif kind == "local":
        if not cfg.get("path"):
            raise DataError(
                "dataset=local needs dataset.path=DIR (a folder with queries.parquet, corpus.parquet, qrels_all.parquet)."
            )
        ds = load_local(cfg.path, dict(cfg.get("files") or {}), digest_cache=cache, **opts)
    elif kind == "beir":
        if not cfg.get("path"):
            raise DataError(
                "dataset=beir needs dataset.path=DIR (a folder with corpus.jsonl, queries.jsonl, qrels/test.tsv)."
            )
        ds = load_beir(cfg.path, cfg.get("split", "test"), digest_cache=cache, **opts)
    elif kind == "hub":
        ds = load_hub(
            cfg.repo_id,
            cfg.revision,
            dict(cfg.get("files") or {}),
            cfg.get("cache_dir"),
            digest_cache=cache,
            local_files_only=bool(cfg.get("local_files_only", False)),
            **opts,
        )
    else:
        raise DataError(
            f"dataset.type={kind!r}: expected one of mini, local, beir, hub. Fix: choose dataset=mini|local|beir|dapfam."
        )
    log.info("dataset %s: %s", ds.name, ds.summary())
    return ds


# A dataset's parts (corpus, topics, qrels) and a generated set are nodes of the data path too: an
# edit of one part re-keys exactly what reads it. Not listed by the sweep.
STAGE = register(Stage(stage.DATASET, "indexes", "", cost="free"))


def training_config(train: str, like) -> DictConfig:
    """The dataset config of a training dataset (``ltr.train``, ``ltr.prior``, ``encoder.train``):
    ``mini``, or a DAPFAM-format folder, read with the same options (domain source, unknown ids,
    self hits) as the dataset ``like`` it is applied to."""
    opts = {k: like.get(k) for k in ("domain_source", "unknown_ids", "drop_self_hits") if like.get(k) is not None}
    if train == "mini":
        mini_cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "dataset" / "mini.yaml")
        merged = OmegaConf.merge(mini_cfg, opts)
        assert isinstance(merged, DictConfig)
        return merged
    return OmegaConf.create({"type": "local", "path": str(train), **opts})


def load_training(key: str, train: str, like, root: str | Path = ".") -> tuple[DictConfig, Dataset]:
    """A training dataset (``ltr.train``, ``ltr.prior``, ``encoder.train``) and its config, read
    as :func:`training_config` says; a missing or unreadable folder is named by its key."""
    if train != "mini" and not Path(train).expanduser().is_dir():
        raise DataError(
            f"{key}={train}: no such folder. Fix: a DAPFAM-format folder (queries.parquet, corpus.parquet, "
            f"qrels_all.parquet), or mini."
        )
    cfg = training_config(train, like)
    try:
        return cfg, load(cfg, root)
    except DataError as e:
        raise DataError(f"{key}={train}: {e}") from e
