"""The streamed BM25 build ends: every injected failure gives a clear error within a bounded time,
commits no index (the units only when every one was written), and leaves no named pipe, thread or
temporary folder behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY

from harness import lucene
from harness.files import damage
from harness.run import execute
from harness.store import Store

BOUND = 120  # seconds: a hang fails the test instead of stalling the suite


@pytest.fixture
def bounded():
    def hang(signum, frame):
        raise TimeoutError(f"the build did not end within {BOUND}s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(BOUND)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def nothing_left(root: Path, kinds=("lucene", "units")) -> None:
    root = Path(root)
    assert not [p for p in root.rglob("*") if p.is_fifo()], "a named pipe was left"
    assert not [p for p in root.rglob(".*.tmp")], "a temporary folder was left"
    for kind in kinds:
        folder = root / "indexes" / kind
        assert not (folder.exists() and [p for p in folder.iterdir() if p.is_dir()]), f"a {kind} artifact was committed"
    assert not [t for t in threading.enumerate() if t.name == "units-writer" and t.is_alive()]


@pytest.mark.slow
def test_indexcollection_rejecting_its_arguments_is_an_error_not_a_hang(cfg_factory, monkeypatch, bounded):
    real = lucene.index_args
    monkeypatch.setattr(lucene, "index_args", lambda *a: real(*a) + ["-noSuchOption"])
    cfg = cfg_factory("+experiment=doc_bm25", "target_fields=TA")
    with pytest.raises(lucene.IndexBuildError, match=r"returned without writing an index.*noSuchOption"):
        execute(cfg)
    nothing_left(cfg.root)


@pytest.mark.slow
def test_a_unit_that_fails_to_index_is_named_and_nothing_is_committed(cfg_factory, monkeypatch, bounded):
    """Anserini logs a document it cannot index and carries on; the count check refuses the index,
    naming the counts, the first missing id and Anserini's reason."""
    real = lucene._Pipes.write
    lost = []

    def write(self, line):
        if self.lines == 2:  # the third unit loses its id
            import json

            doc = json.loads(line)
            lost.append(doc.pop("id"))
            line = json.dumps(doc) + "\n"
        real(self, line)

    monkeypatch.setattr(lucene._Pipes, "write", write)
    cfg = cfg_factory("+experiment=doc_bm25", "target_fields=TA")
    with pytest.raises(lucene.IndexBuildError) as e:
        execute(cfg)
    msg = str(e.value)
    assert "units but" in msg and "were written" in msg and "Nothing was committed" in msg
    assert 'no "id" field' in msg, msg
    assert f"first missing: ['{lost[0]}'" in msg
    nothing_left(cfg.root, kinds=("lucene",))  # the units themselves are whole: they are kept


def test_a_reader_that_stops_reading_ends_the_writer(cfg_factory, monkeypatch, bounded):
    """IndexCollection whose threads stop reading without closing their pipes (a dead Java thread
    keeps its stream open): the writer, blocked on a full pipe, notices that IndexCollection
    returned and the build fails clearly."""
    held = []

    def stalled(units_dir, out, threads=2, docvectors=False):
        held.extend(os.open(f, os.O_RDONLY) for f in sorted((Path(units_dir) / "docs").iterdir()))
        os.read(held[0], 100)
        time.sleep(0.5)
        return {"index_seconds": 0.5, "indexed_units": 0, "anserini_args": [], "anserini_log": []}

    monkeypatch.setattr(lucene, "build_index", stalled)
    monkeypatch.setattr(lucene, "PIPE_BYTES", 4096)
    monkeypatch.setattr(lucene, "CHUNK_CHARS", 1024)
    cfg = cfg_factory("+experiment=doc_bm25", "target_fields=FULL")
    t0 = time.perf_counter()
    try:
        with pytest.raises(
            lucene.IndexBuildError, match="IndexCollection returned while units were still being written"
        ):
            execute(cfg)
    finally:
        for fd in held:
            os.close(fd)
    assert time.perf_counter() - t0 < 60
    nothing_left(cfg.root)


def test_a_reader_that_dies_ends_the_build(cfg_factory, monkeypatch, bounded):
    def dies(units_dir, out, threads=2, docvectors=False):
        fds = [os.open(f, os.O_RDONLY) for f in sorted((Path(units_dir) / "docs").iterdir())]
        os.read(fds[0], 100)
        for fd in fds:
            os.close(fd)
        raise RuntimeError("java.lang.OutOfMemoryError in an indexing thread")

    monkeypatch.setattr(lucene, "build_index", dies)
    monkeypatch.setattr(lucene, "CHUNK_CHARS", 1024)
    cfg = cfg_factory("+experiment=doc_bm25", "target_fields=FULL")
    with pytest.raises(RuntimeError, match="OutOfMemoryError"):
        execute(cfg)
    nothing_left(cfg.root, kinds=("lucene",))
    # The units are kept only when the writer had sent every one before the reader died (the tiny
    # corpus fits in the pipes, so on a busy machine it can): then they are whole, checksums and all.
    for kept in (Path(cfg.root) / "indexes" / "units").glob("[!.]*/meta.json"):
        meta = json.loads(kept.read_text())
        units = kept.parent / "docs" / "units.jsonl"
        assert meta["units"] == TINY["n_docs"] == len(units.read_text().splitlines()), meta
        assert damage(kept.parent, meta["files"], checksums=True) is None


def test_stale_temporary_folders_of_any_key_are_swept_at_start_up(tmp_path):
    """A killed build's folder (with its pipes) is removed when a store opens the root, unless a
    live process holds that key's lock."""
    stale = tmp_path / "indexes" / "lucene" / ".aaaaaaaaaaaa.x1.tmp"
    live = tmp_path / "runs" / "unit_run" / ".bbbbbbbbbbbb.x2.tmp"
    for d in (stale, live):
        (d / "feed" / "docs").mkdir(parents=True)
        os.mkfifo(d / "feed" / "docs" / "units-0.jsonl")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; "
            f"lock = FileLock({str(live.parent / 'bbbbbbbbbbbb')!r} + '.lock'); lock.acquire(); "
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        Store(tmp_path)  # the first store of a root in a process sweeps it
        assert not stale.exists() and live.exists()
    finally:
        holder.kill()
        holder.wait()
    assert Store(tmp_path).sweep() == [live]  # its builder is gone now


def test_a_chunk_larger_than_a_pipe_is_never_split_between_pipes(tmp_path, monkeypatch, bounded):
    """Non-blocking writes go out in pieces when a pipe is nearly full: the rest of the chunk must
    follow into the same pipe, or two readers each get half a line (two unindexable documents)."""
    import json

    monkeypatch.setattr(lucene, "PIPE_BYTES", 4096)
    monkeypatch.setattr(lucene, "CHUNK_CHARS", 20_000)
    fifos = [tmp_path / f"p{i}" for i in range(2)]
    for f in fifos:
        os.mkfifo(f)
    got = [b"", b""]

    def read(i):
        with open(fifos[i], "rb") as f:
            while block := f.read(1024):
                got[i] += block
                time.sleep(0.001)  # slow readers: the writer meets full pipes

    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    lines = [json.dumps({"id": f"d{i}", "contents": "word " * 100}) + "\n" for i in range(300)]
    with lucene._Pipes(fifos) as pipes:
        for line in lines:
            pipes.write(line)
    for t in readers:
        t.join()
    out = [g.decode().splitlines(keepends=True) for g in got]
    assert all(out), "both pipes should have been used"
    assert sorted(out[0] + out[1]) == sorted(lines)  # every line whole, in exactly one pipe
