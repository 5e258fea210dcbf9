"""What caching saves: the same sweep run twice in a fresh artifact root, the second run reading
the first one's artifacts. Ratio = second (cached) / first (fresh) seconds."""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import ROOT, add_quick, report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", default="default")
    ap.add_argument("extra", nargs="*", help="extra overrides, e.g. dataset.params.n_docs=200")
    add_quick(ap)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    if a.quick:  # one BM25 experiment on the smallest mini set
        (root / "quick.yaml").write_text("blocks:\n  b:\n    +experiment: doc_bm25\n    target_fields: TA\n")
        a.sweep = str(root / "quick.yaml")
        a.extra = [*a.extra, "dataset.params.n_docs=60", "dataset.params.n_queries=8"]
    cmd = [sys.executable, "-m", "harness.sweep", f"sweep={a.sweep}", f"root={root}", *a.extra]
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    report(
        "sweep rerun cached/fresh",
        times[1] / times[0],
        f"sweep={a.sweep} {' '.join(a.extra)}: first {times[0]:.1f}s, second {times[1]:.1f}s",
    )


if __name__ == "__main__":
    main()
