"""Files of artifacts: atomic writes, checksums and the size/checksum table kept in ``meta.json``.

A reader sees an old file or a new one, never half of one (write to a temporary name, fsync,
rename). Every finished artifact lists the size and SHA-256 of its files, so that reuse can tell
a damaged artifact (truncated, a file missing, bytes changed) from a finished one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

META = "meta.json"


def file_checksum(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_table(folder: Path) -> dict:
    """``{relative path: {"size", "sha256"}}`` of every file under ``folder`` except meta.json."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != META:
            out[p.relative_to(folder).as_posix()] = {"size": p.stat().st_size, "sha256": file_checksum(p)}
    return out


def damage(folder: Path, files: dict, checksums: bool = False) -> str | None:
    """Why ``folder`` does not hold the files its meta.json lists, or None when it does."""
    for rel, want in files.items():
        p = folder / rel
        if not p.is_file():
            return f"{rel} is missing"
        size = p.stat().st_size
        if size != want["size"]:
            return f"{rel} has {size} bytes, {want['size']} when it was built"
        if checksums and file_checksum(p) != want["sha256"]:
            return f"{rel} has another SHA-256 than when it was built"
    return None


def read_json(path: str | Path | None) -> dict:
    """A small JSON cache file as a dict; a missing or unreadable file is an empty cache."""
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write to ``path.tmp``, fsync, rename: a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
