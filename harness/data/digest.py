"""Content digests of input files, computed once per file version.

Every artifact built from a dataset is keyed by a digest of its files, so the digest must cover
the whole content: a corpus edited in the middle to the same size is another corpus. Hashing a
DAPFAM-sized corpus is not free, so digests are cached by ``(path, size, mtime_ns, inode)``: a
file that is rewritten (any edit changes mtime or inode) is hashed again, an untouched one is not.

The cache is a small JSON file under the artifact root (``indexes/digests.json``); a read-only
root simply hashes every time.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from filelock import FileLock

from ..files import file_checksum, read_json, write_json_atomic

log = logging.getLogger(__name__)


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"


def file_digest(path: str | Path, cache: str | Path | None = None) -> str:
    """SHA-256 (16 hex digits) of the whole file, streamed; cached in ``cache`` when given."""
    path = Path(path)
    cache = Path(cache) if cache else None
    key = _stat_key(path)
    known = read_json(cache)
    if key in known:
        return known[key]
    digest = file_checksum(path)[:16]
    if cache is not None:
        _remember(cache, key, digest)
    return digest


def _remember(cache: Path, key: str, digest: str) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cache) + ".lock", timeout=30):
            known = read_json(cache)
            known[key] = digest
            write_json_atomic(cache, known)
    except Exception as e:  # a read-only root: hash again next time, never fail for a cache
        log.debug("digest cache %s not updated: %s", cache, e)


def files_digest(paths, cache: str | Path | None = None) -> str:
    """One fingerprint over several files (order matters: queries, corpus, qrels)."""
    return hashlib.sha256("".join(file_digest(p, cache) for p in paths).encode()).hexdigest()[:16]


def default_cache(root: str | Path) -> Path:
    return Path(root) / "indexes" / "digests.json"


__all__ = ["file_digest", "files_digest", "default_cache"]
