"""Lucene indexes built by Anserini's ``IndexCollection``, in-process, from a units file or streamed.

``index_file`` indexes a finished units file. ``index_streaming`` indexes units while they are
written: the writer feeds one named pipe per indexing thread (``_Pipes``), so passaging and indexing
overlap and no units file has to exist first; a reader that dies or a writer that stalls ends the
build with an error, never a short index (``check_count`` compares what was written with what
Lucene holds, naming missing ids). Anserini's console output is kept to the lines that say why a
build failed (``_tee_output``). :mod:`harness.backends.bm25` is the backend that uses them.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import select
import shutil
import struct
import sys
import termios
import threading
import time
from pathlib import Path

from .faults import point

log = logging.getLogger(__name__)


class IndexBuildError(RuntimeError):
    """The BM25 index cannot be committed: Anserini stopped early or lost units. The message names
    the counts, the first missing ids and Anserini's logged reason."""


def index_args(input_dir: Path, out: Path, threads: int, docvectors: bool) -> list[str]:
    return [
        "-collection",
        "JsonCollection",
        "-generator",
        "DefaultLuceneDocumentGenerator",
        "-input",
        str(input_dir),
        "-index",
        str(out),
        "-threads",
        str(int(threads)),
        "-storeRaw",
        "-quiet",
    ] + (["-storeDocvectors"] if docvectors else [])


def build_index(units_dir: Path, out: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Index ``units_dir/docs/*.jsonl`` into ``out`` with Anserini's IndexCollection. ``docvectors``
    stores each unit's term vector (``-storeDocvectors``), which RM3 and Rocchio read.

    IndexCollection does not raise when it fails: it prints a rejected argument and returns, and a
    document that breaks an indexing thread is logged ("Unexpected Exception") while the others
    carry on. Its output is therefore teed (:func:`_tee_output`) and the caller compares the index
    with what was written (:func:`check_count`)."""
    from .jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    index_collection = autoclass("io.anserini.index.IndexCollection")
    args = index_args(Path(units_dir) / "docs", out, threads, docvectors)
    t0 = time.perf_counter()
    with _tee_output() as logged:
        index_collection.main(args)
    seconds = time.perf_counter() - t0
    if not list(Path(out).glob("segments_*")):
        raise IndexBuildError(
            f"Anserini's IndexCollection returned without writing an index at {out}"
            + _reason(logged)
            + ". Nothing was committed."
        )
    n = index_size(out)
    return {"index_seconds": round(seconds, 3), "indexed_units": n, "anserini_args": args, "anserini_log": logged}


def _reason(logged: list[str]) -> str:
    return f"; Anserini said: {' | '.join(logged[:3])}" if logged else " (Anserini logged no error)"


def check_count(index_dir: Path, written: int, meta: dict, units_dir: Path) -> None:
    """Refuse an index that lacks units: Anserini logs a failing document and carries on."""
    n = meta["indexed_units"]
    if n == written:
        return
    missing = _missing_ids(index_dir, units_dir) if n < written else []
    raise IndexBuildError(
        f"the BM25 index holds {n} units but {written} were written"
        + (f" (first missing: {missing})" if missing else "")
        + _reason(meta.get("anserini_log", []))
        + ". Nothing was committed. Fix: see Anserini's message; a unit it cannot index is a bug of "
        "the units writer (harness/passages.py) or a corrupt corpus row."
    )


def _missing_ids(index_dir: Path, units_dir: Path, first: int = 5) -> list[str]:
    from .jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    utils = autoclass("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(index_dir))
    out = []
    try:
        for f in sorted((Path(units_dir) / "docs").glob("*.jsonl")):
            with open(f, encoding="utf-8") as lines:
                for line in lines:
                    doc = json.loads(line).get("id")
                    if doc is None or utils.convertDocidToLuceneDocid(reader, str(doc)) < 0:
                        out.append(doc)
                        if len(out) >= first:
                            return out
    finally:
        reader.close()
    return out


TEE_KEEP = ("ERROR", "Exception", "Error:", "error iterating")


class _tee_output:
    """Copy this process's stdout and stderr (file descriptors 1 and 2, which the JVM writes to)
    through to where they went, keeping the lines that report an error: IndexCollection's only
    account of a failure is its log. Output still appears as it is written."""

    def __enter__(self) -> list[str]:
        self.kept: list[str] = []
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.saved, self.pumps = {}, []
        for fd in (1, 2):
            r, w = os.pipe()
            self.saved[fd] = os.dup(fd)
            os.dup2(w, fd)
            os.close(w)
            t = threading.Thread(target=self._pump, args=(r, self.saved[fd]), daemon=True, name=f"tee-{fd}")
            t.start()
            self.pumps.append(t)
        return self.kept

    def _pump(self, r: int, out: int) -> None:
        tail = b""
        try:
            while True:
                data = os.read(r, 1 << 16)
                if not data:
                    return
                try:
                    os.write(out, data)
                except OSError:
                    pass
                *lines, tail = (tail + data).split(b"\n")
                for line in lines:
                    text = line.decode("utf-8", "replace").strip()
                    if any(k in text for k in TEE_KEEP) and len(self.kept) < 20:
                        self.kept.append(text[:300])
        finally:
            os.close(r)

    def __exit__(self, *exc) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)  # closes the pipe's last write end: the pump sees EOF
        for t in self.pumps:
            t.join(5)
        for saved in self.saved.values():
            os.close(saved)


PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size


CHUNK_CHARS = 1 << 18


POLL_SECONDS = 0.05


class ReaderGone(RuntimeError):
    """IndexCollection ended (or failed) while the units writer still had units for it."""


def _always() -> bool:
    return True


class _Pipes:
    """Text sink over named pipes, one per IndexCollection thread. Lines are gathered into chunks
    of whole lines (256 K characters) and each chunk goes to the pipe with the fewest unread bytes.

    Why: with Linux's default 64 KiB pipes (a few dozen passages) and lines dealt round robin, the
    writer and the indexing threads ran in lockstep (whenever one pipe was full the writer waited
    while the other indexer starved). Each pipe is enlarged to 1 MiB where the system allows it.
    ``bench/dapfam_scale.py`` measures the stage against IndexCollection (README).

    Nothing here blocks for good: pipes are opened and written without blocking, and while a pipe
    has no reader or no room the writer polls ``alive()`` (IndexCollection still running). A pipe
    whose reader closed it is dropped (its thread died: the count check names the loss); when no
    reader is left, or IndexCollection has returned, :class:`ReaderGone` ends the writer."""

    def __init__(self, paths: list[Path], alive=_always):
        self.alive = alive
        self.fds: list[int] = []
        self.opened: set[Path] = set()
        self.lines = 0
        self.finished = False  # every line sent and the pipes closed: the readers see EOF
        try:
            for p in paths:  # each open waits for its reader: IndexCollection opens them all at once
                self.fds.append(open_for_writing(p, alive))
                self.opened.add(p)
                try:
                    fcntl.fcntl(self.fds[-1], fcntl.F_SETPIPE_SZ, PIPE_BYTES)
                except (AttributeError, OSError):  # not Linux, or over the user's pipe quota: default size
                    pass
        except BaseException:
            self.close()
            raise
        self.chunk: list[str] = []
        self.size = 0

    def write(self, line: str) -> None:
        self.chunk.append(line)
        self.lines += 1
        self.size += len(line)
        if self.size >= CHUNK_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.chunk:
            return
        point("bm25-streaming")
        data = memoryview("".join(self.chunk).encode("utf-8"))
        self.chunk, self.size = [], 0
        if not self.fds:
            raise ReaderGone("every IndexCollection thread stopped reading its pipe")
        fd = min(self.fds, key=_unread) if len(self.fds) > 1 else self.fds[0]
        while data:  # the whole chunk to one pipe: a line split between two readers is two bad documents
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                if not self.alive():
                    raise ReaderGone("IndexCollection returned while units were still being written") from None
                select.select([], [fd], [], POLL_SECONDS)
            except BrokenPipeError:  # that thread died; what it lost is counted after the build
                log.warning("an IndexCollection thread closed its pipe early; the next units go to the others")
                self.fds.remove(fd)
                os.close(fd)
                return

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:  # a reader that went away: the indexing error is raised elsewhere
                pass
        self.fds = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:  # the last lines; after an error the readers only need EOF
                self.flush()
        finally:
            self.close()
        self.finished = exc_type is None


def open_for_writing(path: Path, alive=_always) -> int:
    """Open a FIFO for writing, without blocking, once a reader has it open; poll ``alive()``
    meanwhile, so that a reader that never comes ends in :class:`ReaderGone`, not a hang."""

    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if not alive():
            raise ReaderGone(f"IndexCollection never opened {path.name}")
        time.sleep(0.01)


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD); 0 where the system cannot tell."""

    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def index_streaming(source: Path, write_units, tmp: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Write the units and index them at once. A Python thread writes each unit to the units
    artifact and, in chunks, to ``threads`` named pipes (:class:`_Pipes`); Anserini's
    IndexCollection (in this JVM, which releases the GIL) reads the pipes as its JsonCollection, one
    indexing thread per pipe, so passaging and indexing share the cores (``bench/dapfam_scale.py``
    compares the stage with IndexCollection; README). Units are the same; only Lucene's internal
    document order differs, which no ranking sees (ties are broken by document id). If another
    process builds the same units meanwhile, they are reused and indexed from disk. ``source``: the
    units artifact's folder; ``write_units(sink)`` builds (or reuses) it, feeding ``sink``."""
    meta = _index_fed(write_units, source, tmp, threads, docvectors)
    if meta is None:  # nothing was written: the units were reused
        return index_file(source, tmp, threads, docvectors)
    return {**meta, "indexed_while_passaging": True}


def index_file(units_dir: Path, tmp: Path, threads: int = 2, docvectors: bool = False) -> dict:
    """Index finished units into ``tmp/index`` on ``threads`` threads. IndexCollection gives each
    input file one thread, and the units artifact is one file: its lines are dealt to ``threads``
    pipes instead, which indexes as fast as IndexCollection over the same lines split into files."""
    files = sorted((Path(units_dir) / "docs").glob("*.jsonl"))
    if int(threads) < 2 or len(files) != 1:
        built = build_index(units_dir, tmp / "index", threads, docvectors)
        written = json.loads((Path(units_dir) / "meta.json").read_text())["units"]  # counted when written
        check_count(tmp / "index", written, built, units_dir)
        return built

    def copy(sink):
        with open(files[0], encoding="utf-8") as f, sink() as g:
            for line in f:
                g.write(line)

    meta = _index_fed(copy, units_dir, tmp, threads, docvectors)
    assert meta is not None  # copy() always opens the sink
    return meta


WRITER_GRACE = 60.0  # seconds a units writer may take to notice that IndexCollection ended


def _index_fed(write, source: Path, tmp: Path, threads: int, docvectors: bool) -> dict | None:
    """IndexCollection over ``threads`` named pipes under ``tmp/feed`` while a Python thread runs
    ``write(sink)``; ``sink()`` opens the pipes (:class:`_Pipes`). Returns the index's metadata
    (its arguments naming the units folder ``source``, not the pipes), or None (and no index) when
    ``write`` returned without opening the sink.

    Every wait is bounded: the writer polls whether IndexCollection still runs (:class:`_Pipes`);
    pipes it never opened are opened and closed so that a reader waiting for them sees EOF; the
    main thread gives a writer that is not finishing a clean close ``WRITER_GRACE`` seconds to
    notice that IndexCollection ended. The index must hold exactly the units written
    (:func:`check_count`). The pipes are removed before anything is committed."""

    feed = tmp / "feed"
    (feed / "docs").mkdir(parents=True)
    fifos = [feed / "docs" / f"units-{i}.jsonl" for i in range(max(1, int(threads)))]
    for f in fifos:
        os.mkfifo(f)
    done = threading.Event()  # IndexCollection returned or raised
    state = {"pipes": None, "error": None}
    meta: dict = {}

    def sent() -> bool:  # the writer sent every line: what it does now (commit the units) ends
        return state["pipes"] is not None and state["pipes"].finished

    def alive() -> bool:
        return not done.is_set()

    def sink():
        if done.is_set():
            raise ReaderGone("IndexCollection ended before the units writer began")
        state["pipes"] = _Pipes(fifos, alive)
        return state["pipes"]

    def produce():
        try:
            write(sink)
        except BaseException as e:  # noqa: BLE001  (raised in the main thread below)
            state["error"] = e
        finally:  # readers still waiting to open a pipe get EOF instead of waiting for ever
            opened = state["pipes"].opened if state["pipes"] is not None else set()
            for f in fifos:
                if f not in opened:
                    try:
                        os.close(open_for_writing(f, alive))
                    except (ReaderGone, OSError):
                        pass

    writer = threading.Thread(target=produce, name="units-writer", daemon=True)
    writer.start()
    try:
        try:
            meta = build_index(feed, tmp / "index", threads, docvectors)
        finally:
            done.set()
            # A writer that sent every line is committing the units (checksums): let it finish.
            # One that did not must notice within a poll that IndexCollection is gone.
            writer.join(None if sent() else WRITER_GRACE)
            if writer.is_alive() and not sent():
                raise IndexBuildError(
                    f"the units writer did not stop within {WRITER_GRACE:.0f}s after "
                    f"IndexCollection ended. Nothing was committed."
                )
            writer.join()
        if state["error"] is not None:
            raise state["error"]
        if state["pipes"] is None:
            shutil.rmtree(tmp / "index", ignore_errors=True)
            return None
        check_count(tmp / "index", state["pipes"].lines, meta, source)
        meta["anserini_args"] = [
            str(Path(source) / "docs") if a == str(feed / "docs") else a for a in meta["anserini_args"]
        ]
        return {**meta, "pipes": len(fifos)}
    except ReaderGone as e:
        raise IndexBuildError(f"{e}" + _reason(meta.get("anserini_log", [])) + ". Nothing was committed.") from e
    finally:
        shutil.rmtree(feed, ignore_errors=True)


def index_size(index_dir: Path) -> int:
    from .jvm import autoclass  # starts the JVM on import: deferred (harness.jvm)

    reader = autoclass("io.anserini.index.IndexReaderUtils").getReader(str(index_dir))
    try:
        return int(reader.numDocs())
    finally:
        reader.close()
