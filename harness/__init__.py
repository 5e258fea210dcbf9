"""DAPFAM experiment harness: cross-domain patent prior-art retrieval with BM25, dense and RRF.

The data path, one function per arrow, every box after ``dataset`` an artifact on disk::

    dataset -> views -> units -> index -> unit run -> family run -> fused run -> scores -> report

Importing the package starts nothing: modules that need Java import :mod:`harness.jvm` first.
"""

import os

__version__ = "0.1.0"


def fast_tier_guard(what: str) -> None:
    """Refuse to start ``what`` (the JVM, a model) under ``HARNESS_FAST_TIER=1``, which ``make
    check`` sets: its tests must need neither, and one that does fails saying how to move it to
    the full tier, instead of making the quick loop slow unseen."""

    if os.environ.get("HARNESS_FAST_TIER") == "1":
        raise RuntimeError(
            f"the fast test tier (make check, HARNESS_FAST_TIER=1) starts no {what}, and this test needs "
            f"one. Fix: mark the test @pytest.mark.slow (see README 'Development')."
        )
