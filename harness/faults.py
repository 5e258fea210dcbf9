"""Named points where a test kills this process: ``HARNESS_FAULT=<point>`` sends SIGKILL to itself
there, so a test of what a kill leaves behind hits exactly the stage it names, without racing a
build against a timer (and without a corpus large enough to give that race a window).

Points: ``bm25-streaming`` (the first chunk of units sent to IndexCollection: the temporary
folder and its named pipes exist), ``encoding`` (the first batch of embeddings computed),
``shard-I`` (shard I of a sharded stage started, :mod:`harness.shards`). Unset,
a point costs one dictionary lookup.

``HARNESS_HOLD=<point>`` with ``HARNESS_HOLD_DIR=<folder>`` pauses there instead: the process
writes ``<folder>/ready`` and waits (up to ten minutes) for ``<folder>/go``, so a test can run
something else (gc) while this process is exactly mid-experiment. Points: ``after-<kind>`` (an
artifact of that kind just built or reused, :meth:`harness.experiment.Experiment.ensure`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def point(name: str) -> None:
    if os.environ.get("HARNESS_FAULT") == name:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def hold(name: str) -> None:
    if os.environ.get("HARNESS_HOLD") != name:
        return
    folder = Path(os.environ["HARNESS_HOLD_DIR"])
    (folder / "ready").write_text(f"{os.getpid()} at {name}\n")
    deadline = time.monotonic() + 600
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
