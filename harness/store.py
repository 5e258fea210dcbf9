"""Artifacts: keys, paths, atomic writes, locks and ``meta.json``.

An artifact's key is a short hash of its kind, its own parameters, its parents' keys and its
``env`` (the stage's code version and the software versions that change its bytes,
:mod:`harness.env`), so two experiments that share a prefix of the data path share those
artifacts: one index serves every query view, aggregation and fusion built on it; one passage run
serves all four aggregations. An upgrade makes new keys; ``python -m harness.collect gc`` lists and
removes what the old ones left (:mod:`harness.collect`).

Only this module decides where things live under ``indexes/`` and ``runs/``. A builder writes
into a private temporary folder next to the final one and the folder is renamed into place only
when the build returned and ``meta.json`` was written, so an interrupted build is never taken for
a finished one. A file lock per key makes concurrent builders (joblib or Slurm jobs asking for the
same index) build once: the others wait, then reuse.

A finished artifact is checked every time it is reused: ``meta.json`` lists the size and SHA-256
of every file the build wrote, and a file that is missing or has another size (a truncated run, a
Lucene index that lost a segment) is a damaged artifact: the store says so in a warning, removes
it and builds it again. ``verify=True`` (``verify=true`` on the command line) also compares the
checksums, for damage that keeps the size.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from . import stage
from .artifact import Artifact, stable_hash  # noqa: F401  (re-exported: the store's nodes)
from .files import META, damage, file_checksum, file_table, fsync_dir, write_json_atomic, write_text_atomic  # noqa: F401

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT = 6 * 3600  # seconds; a DAPFAM-scale index build takes well under an hour


def default_root() -> Path:
    """The artifact root every entry point uses: ``$HARNESS_ROOT``, else the current directory
    (the Hydra config's ``root: ${oc.env:HARNESS_ROOT,.}`` says the same)."""
    return Path(os.environ.get("HARNESS_ROOT") or ".")


def default_results() -> Path:
    """The results table under the artifact root (the config's ``results`` key)."""
    return default_root() / "runs" / "results.jsonl"


class StoreError(RuntimeError):
    """The artifact root cannot be used as asked; the message names the path and the fix."""


class MissingFiles(FileNotFoundError):
    """An index folder lacks a file it must hold: the artifact is damaged."""


class DamagedArtifact(RuntimeError):
    """A finished artifact turned out to be unreadable while it was used (e.g. Lucene's
    CorruptIndexException). :meth:`Store.discard` removes it so that the next ask rebuilds it."""

    def __init__(self, artifact: Artifact, message: str):
        super().__init__(message)
        self.artifact = artifact


_swept: set[Path] = set()  # roots whose stale temporary folders this process has removed

LEASES = Path("runs") / ".leases"  # under the root: one file per process that uses artifacts


class Lease:
    """What one process uses in one root, for gc: ``runs/.leases/<host>-<pid>``, one ``kind key``
    line per artifact it built or reused, held under an exclusive flock for the process's life.

    gc keeps every key of a lease whose lock is held (a live process) and removes the leases of
    dead ones (the lock dies with its process, as the builders' locks do). One file per process,
    not a lock per artifact: a sweep reuses thousands of artifacts and would run out of file
    descriptors."""

    def __init__(self, root: Path):
        self.pid = os.getpid()
        folder = root / LEASES
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{socket.gethostname()}-{self.pid}"
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (held for the process's life)
        fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.keys: set[str] = set()

    def add(self, kind: str, key: str) -> bool:
        """Lease ``key``; False where this process leased it before (gc has kept it since)."""
        if key in self.keys:
            return False
        self.file.write(f"{kind} {key}\n")
        self.file.flush()
        os.fsync(self.file.fileno())  # on disk before the artifact is looked at: gc reads it under the key's lock
        self.keys.add(key)
        return True


_leases: dict[Path, Lease] = {}


def inputs_of(folder: Path) -> str:
    """A digest of the files an artifact's meta.json lists (names, sizes, SHA-256): what a merge
    of it recorded, and what it must still be for the merge to stand."""
    files = json.loads((Path(folder) / META).read_text())["files"]
    return stable_hash({k: [v.get("size"), v.get("sha256")] for k, v in sorted(files.items())}, 16)


def lease(root: Path) -> Lease | None:
    """This process's lease in ``root`` (None where the root is not writable: nothing is built
    there, and a gc there could not delete either)."""
    held = _leases.get(root)
    if held is None or held.pid != os.getpid():  # a forked child holds its own
        try:
            held = _leases[root] = Lease(root)
        except OSError:
            return None
    return held


def live_leases(root: Path) -> dict[str, str]:
    """``{key: lease file}`` of every process alive that uses artifacts in ``root``; the leases of
    dead processes are removed."""
    keys: dict[str, str] = {}
    folder = root / LEASES
    if not folder.is_dir():
        return keys
    mine = _leases.get(root)
    for p in sorted(folder.iterdir()):
        if mine is not None and p == mine.path and mine.pid == os.getpid():
            text = p.read_text(encoding="utf-8", errors="replace")
        else:
            try:
                with open(p, "r+", encoding="utf-8", errors="replace") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        text = f.read()  # held: a live process
                    else:
                        p.unlink(missing_ok=True)  # its process is gone
                        continue
            except OSError:
                continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                keys[parts[1]] = p.name
    return keys


class Store:
    """Owns the on-disk layout: ``<root>/indexes/<kind>/<key>/`` and ``<root>/runs/<kind>/<key>/``."""

    def __init__(self, root: str | Path = ".", verify: bool = False, lock_timeout: float = DEFAULT_LOCK_TIMEOUT):
        self.root = Path(root).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(
                f"root={self.root} (HARNESS_ROOT) is not a directory. Fix: set HARNESS_ROOT (or root=) to "
                f"a folder for indexes/ and runs/."
            )
        self.verify = verify
        self.lock_timeout = lock_timeout
        self._checked: set[str] = set()
        if self.root not in _swept:
            _swept.add(self.root)
            self.sweep()

    def sweep(self) -> list[Path]:
        """Remove the temporary folders of builds that were killed (SIGKILL, a lost node), of any
        key, with the named pipes they may hold: a build's folder is stale when no live process
        holds its key's lock (the lock dies with its process). Run once per root and process, at
        start-up; a read-only root is left as it is."""
        removed: list[Path] = []
        for tmp in sorted(self.root.glob("*/*/.*.tmp")):
            if tmp.parent.name not in stage.roots() or not tmp.is_dir():
                continue
            lock = self.key_lock(tmp.parent.name, tmp.name.split(".")[1], timeout=0)
            try:
                lock.acquire()
            except Timeout:  # a live builder's folder
                continue
            except OSError:
                return removed
            try:
                if tmp.exists():
                    log.warning("removing the temporary folder of an interrupted build: %s", tmp)
                    shutil.rmtree(tmp, ignore_errors=True)
                    removed.append(tmp)
            finally:
                lock.release()
        return removed

    @classmethod
    def from_config(cls, cfg) -> Store:
        """The store a composed Hydra config names: ``root``, ``verify``, ``store.lock_timeout``."""
        return cls(
            cfg.get("root", "."),
            verify=bool(cfg.get("verify", False)),
            lock_timeout=float((cfg.get("store") or {}).get("lock_timeout", DEFAULT_LOCK_TIMEOUT)),
        )

    def path(self, art: Artifact) -> Path:
        return self.folder(art.kind, art.key)

    def folder(self, kind: str, key: str) -> Path:
        """Where the artifact of ``kind`` with ``key`` lives (for callers that hold no Artifact)."""
        return self.root / stage.get(kind).root / kind / key

    def exists(self, art: Artifact) -> bool:
        return (self.path(art) / META).exists()

    def meta(self, art: Artifact) -> dict:
        return json.loads((self.path(art) / META).read_text())

    def check(self, art: Artifact) -> str | None:
        """Why a finished artifact cannot be reused (unreadable meta.json, a file missing or of
        another size; with ``verify``, another checksum), or None. Checked once per process."""
        if art.key in self._checked:
            return None
        try:
            meta = self.meta(art)
        except (OSError, ValueError) as e:
            return f"{META} is unreadable ({e})"
        if "files" not in meta:
            return f"{META} lists no files (built by an older harness)"
        problem = damage(self.path(art), meta["files"], self.verify)
        if problem is None:
            problem = self.stale_inputs(meta)
        if problem is None:
            self._checked.add(art.key)
        return problem

    def stale_inputs(self, meta: dict) -> str | None:
        """Why an artifact built from its parents' exact files (a merge of shards records their
        checksums in ``inputs``: :func:`inputs_of`) is stale: a parent rebuilt since (damaged and
        built again, or deleted and rebuilt by a job) has other files, so the merge must be made
        again from them, though its key (the parents' keys) is the same."""
        for p in meta.get("parents", []):
            want = (meta.get("inputs") or {}).get(p["key"])
            if want is None:
                continue
            try:
                got = inputs_of(self.folder(p["kind"], p["key"]))
            except (OSError, ValueError):
                return f"its input {p['kind']} {p['key']} is unreadable"
            if got != want:
                return f"its input {p['kind']} {p['key']} was rebuilt since (other files)"
        return None

    def discard(self, art: Artifact, reason: str) -> None:
        """Remove a damaged finished artifact so that it is built again."""
        final = self.path(art)
        log.warning("%s %s is damaged (%s): removing it to build it again (%s)", art.kind, art.key, reason, final)
        self._checked.discard(art.key)
        trash = final.with_name(f".{art.key}.{os.getpid()}.damaged.tmp")
        try:
            os.rename(final, trash)  # atomic: no reader sees half a folder
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(
                f"{final} is damaged ({reason}) and cannot be removed ({e.strerror}). Fix: make "
                f"{self.root} writable, or delete {final} by hand, then run again."
            ) from e
        shutil.rmtree(trash, ignore_errors=True)

    def lock(self, art: Artifact) -> FileLock:
        return self.key_lock(art.kind, art.key)

    def key_lock(self, kind: str, key: str, timeout: float | None = None) -> FileLock:
        """The file lock of one key: builders, the start-up sweep and gc all take this one."""
        p = self.folder(kind, key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"cannot create {p.parent} ({e.strerror}): the artifact root {self.root} is not writable "
                f"and {kind} {key} is not built yet. Fix: set HARNESS_ROOT (or root=) to a "
                f"writable folder."
            ) from e
        return FileLock(str(p) + ".lock", timeout=self.lock_timeout if timeout is None else timeout)

    def _acquire(self, lock: FileLock, art: Artifact) -> None:
        owner = Path(lock.lock_file + ".owner")
        try:
            lock.acquire()
        except Timeout:
            try:
                holder = owner.read_text().strip()
            except OSError:
                holder = "an unknown process"
            raise StoreError(
                f"timed out after {self.lock_timeout:.0f}s waiting for {lock.lock_file}, held by {holder}, "
                f"which is building {art.kind} {art.key}. Fix: if that process is hung, kill it "
                f"(its lock is released when it exits), or raise store.lock_timeout."
            ) from None
        except OSError as e:
            raise StoreError(
                f"cannot lock {lock.lock_file} ({e.strerror}): the artifact root {self.root} is not "
                f"writable and {art.kind} {art.key} is not built yet. Fix: set HARNESS_ROOT (or root=) to "
                f"a writable folder."
            ) from e
        write_text_atomic(
            owner, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
        )

    def ensure(self, art: Artifact, build: Callable[[Path], dict | None], describe: str = "") -> Path:
        """Return the artifact's folder, building it first if no finished copy exists.

        ``build(tmpdir)`` writes the artifact's files into ``tmpdir`` and may return extra fields
        for ``meta.json`` (counts, timings). The folder appears under its final name only once the
        build returned, so readers never see half an artifact.
        """
        final = self.path(art)
        label = describe or art.kind
        held = lease(self.root)
        leased_now = held is not None and held.add(
            art.kind, art.key
        )  # before looking: gc keeps what a live lease names
        if self.exists(art):
            if leased_now:  # once per key: a gc that read the leases before this one may be deleting it
                self._wait_for_gc(art)
            if self.exists(art):
                problem = self.check(art)
                if problem is None:
                    log.info("reused %s %s (%s)", label, art.key, final)
                    return final
                self.discard(art, problem)
        lock = self.lock(art)
        self._acquire(lock, art)
        try:
            if self.exists(art):  # another process built it while we waited
                problem = self.check(art)
                if problem is None:
                    log.info("reused %s %s after waiting for another builder (%s)", label, art.key, final)
                    return final
                self.discard(art, problem)
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
                    "env": art.env,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "build_seconds": round(time.perf_counter() - t0, 3),
                    **extra,
                    "files": file_table(tmp),
                }
                write_json_atomic(tmp / META, meta)
                fsync_dir(tmp)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            except BaseException as e:
                full = _disk_full(e)
                written = _tree_bytes(tmp) if full else 0  # walked only to say how much space is needed
                shutil.rmtree(tmp, ignore_errors=True)
                if full:
                    free = shutil.disk_usage(final.parent).free
                    raise StoreError(
                        f"{final.parent}: no space left on the device while building {label} {art.key} "
                        f"({_size(written)} written before it filled, removed again; {_size(free)} "
                        f"free now). Nothing was committed. Fix: free more than {_size(written)} there "
                        f"(the finished artifact is larger), or set HARNESS_ROOT to a roomier disk, "
                        f"and run again."
                    ) from None
                raise
            self._checked.add(art.key)
            log.info("built %s %s in %.1fs", label, art.key, time.perf_counter() - t0)
        finally:
            lock.release()
        return final

    def _wait_for_gc(self, art: Artifact) -> None:
        """Pass through the key's lock once: gc deletes under it after reading the leases, so
        once through, either the deletion is over (the artifact is built again) or gc read this
        process's lease and keeps the artifact."""
        lock = self.lock(art)
        try:
            lock.acquire(timeout=self.lock_timeout)
        except (Timeout, OSError):
            return  # a builder holds it (it will find the artifact finished) or the root is read-only
        lock.release()

    def report_dir(self, name: str) -> Path:
        """Where a sweep's table and plots go (``runs/report/<name>/``): rewritten on every run."""
        p = self.root / "runs" / "report" / name
        p.mkdir(parents=True, exist_ok=True)
        return p


def _disk_full(e: BaseException) -> bool:
    """A full disk, from Python (ENOSPC) or from Java (Lucene's IOException, through pyjnius)."""

    return getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in str(e)


def _tree_bytes(folder: Path) -> int:
    total = 0
    for p in Path(folder).rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"
