"""Named points where a test kills this process: ``HARNESS_FAULT=<point>`` sends SIGKILL to itself
there, so a test of what a kill leaves behind hits exactly the stage it names, without racing a
build against a timer (and without a corpus large enough to give that race a window).

Points: ``bm25-streaming`` (the first chunk of units sent to IndexCollection: the temporary
folder and its named pipes exist), ``encoding`` (the first batch of embeddings computed). Unset,
a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import sys


def point(name: str) -> None:
    if os.environ.get("HARNESS_FAULT") == name:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
