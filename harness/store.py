"""Artifacts: keys, paths, atomic writes, locks and ``meta.json``.

An artifact's key is a short hash of its kind, its own parameters and its parents' keys, so two
experiments that share a prefix of the data path share those artifacts: one index serves every
query view, aggregation and fusion built on it; one passage run serves all four aggregations.

Only this module decides where things live under ``indexes/`` and ``runs/``. A builder writes
into a private temporary folder next to the final one and the folder is renamed into place only
when the build returned and ``meta.json`` was written, so an interrupted build is never taken for
a finished one. A file lock per key makes concurrent builders (joblib or Slurm jobs asking for the
same index) build once: the others wait, then reuse.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock

log = logging.getLogger(__name__)

META = "meta.json"

# Which top-level folder each kind of artifact lives in.
ROOTS = {
    "dataset": "indexes",
    "units": "indexes",
    "lucene": "indexes",
    "embeddings": "indexes",
    "faiss": "indexes",
    "unit_run": "runs",
    "family_run": "runs",
    "fused_run": "runs",
    "scores": "runs",
}


def stable_hash(obj: Any, n: int = 12) -> str:
    """Short, order-independent hash of a JSON-able object."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def file_checksum(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Artifact:
    """A node of the data path: what made it (kind, params) and what it was made from (parents)."""

    kind: str
    params: dict
    parents: tuple["Artifact", ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        return stable_hash({"kind": self.kind, "params": self.params, "parents": [p.key for p in self.parents]})

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.key}"


class Store:
    """Owns the on-disk layout: ``<root>/indexes/<kind>/<key>/`` and ``<root>/runs/<kind>/<key>/``."""

    def __init__(self, root: str | Path = "."):
        self.root = Path(root).resolve()

    def path(self, art: Artifact) -> Path:
        top = ROOTS.get(art.kind)
        if top is None:
            raise ValueError(f"Unknown artifact kind {art.kind!r}; known: {sorted(ROOTS)}")
        return self.root / top / art.kind / art.key

    def exists(self, art: Artifact) -> bool:
        return (self.path(art) / META).exists()

    def meta(self, art: Artifact) -> dict:
        return json.loads((self.path(art) / META).read_text())

    def lock(self, art: Artifact) -> FileLock:
        p = self.path(art)
        p.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(p) + ".lock")

    def ensure(self, art: Artifact, build: Callable[[Path], dict | None], describe: str = "") -> Path:
        """Return the artifact's folder, building it first if no finished copy exists.

        ``build(tmpdir)`` writes the artifact's files into ``tmpdir`` and may return extra fields
        for ``meta.json`` (counts, timings). The folder appears under its final name only once the
        build returned, so readers never see half an artifact.
        """
        final = self.path(art)
        label = describe or art.kind
        if self.exists(art):
            log.info("reused %s %s (%s)", label, art.key, final)
            return final
        with self.lock(art):
            if self.exists(art):  # another process built it while we waited
                log.info("reused %s %s after waiting for another builder (%s)", label, art.key, final)
                return final
            if final.exists():  # a crashed build that left no meta.json: not an artifact
                log.warning("removing unfinished %s at %s", label, final)
                shutil.rmtree(final)
            for stale in final.parent.glob(f".{art.key}.*.tmp"):  # killed builders' leftovers; we hold the lock
                log.warning("removing the temporary folder of an interrupted build: %s", stale)
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{art.key}.", suffix=".tmp", dir=final.parent))
            try:
                log.info("building %s %s", label, art.key)
                t0 = time.perf_counter()
                extra = build(tmp) or {}
                meta = {
                    "kind": art.kind,
                    "key": art.key,
                    "params": art.params,
                    "parents": [{"kind": p.kind, "key": p.key} for p in art.parents],
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "build_seconds": round(time.perf_counter() - t0, 3),
                    **extra,
                }
                write_json_atomic(tmp / META, meta)
                _fsync_dir(tmp)
                os.rename(tmp, final)
                _fsync_dir(final.parent)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            log.info("built %s %s in %.1fs", label, art.key, time.perf_counter() - t0)
        return final

    def report_dir(self, name: str) -> Path:
        """Where a sweep's table and plots go (``runs/report/<name>/``): rewritten on every run."""
        p = self.root / "runs" / "report" / name
        p.mkdir(parents=True, exist_ok=True)
        return p


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write to ``path.tmp``, fsync, rename: a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
