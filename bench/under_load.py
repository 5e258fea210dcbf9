"""README's timings, measured as a newcomer meets them: on this machine's two cores while another
CPU-bound process runs (a busy laptop, a shared CI runner). A burner process spins on one core for
the whole measurement; each step runs as README says to run it, in a fresh clone-like state:

* the default sweep in a fresh artifact root (target: under 3 minutes), then again, all cached
  (under 10 s);
* ``make check`` from a cold mypy cache (under 2 minutes) and ``make test`` (under 8 minutes).

Prints one ``TIME`` line per step: seconds, the target, and whether it was met. Not a ratio: these
are the promises README makes, each with the command that measures it.

    python bench/under_load.py                      # all four (about 15 minutes)
    python bench/under_load.py --only sweep         # the two sweep timings
    python bench/under_load.py --quick              # a one-experiment sweep, fresh and cached (tests)
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import ROOT, add_quick

TARGETS = {"sweep fresh": 180.0, "sweep cached": 10.0, "make check": 120.0, "make test": 480.0}


def timed(name: str, cmd: list[str], env: dict, cwd: Path, target: float | None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"{name}: exit {r.returncode}\n{r.stdout[-4000:]}", file=sys.stderr)
        sys.exit(1)
    met = "" if target is None else (" (met)" if seconds < target else " (MISSED)")
    goal = "" if target is None else f" target < {target:.0f} s{met}"
    print(f"TIME {name:16s} {seconds:8.1f} s  under load{goal}: {' '.join(cmd[-3:])}", flush=True)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("sweep", "check", "test"), default=None)
    add_quick(ap)
    a = ap.parse_args()
    # the load; not in the quick mode, which checks the script inside the test suite (whose other
    # worker it would slow)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass" if not a.quick else "pass"])
    try:
        root = Path(tempfile.mkdtemp(prefix="bench-load-"))
        env = {**os.environ, "HARNESS_ROOT": str(root)}
        sweep = [sys.executable, "-m", "harness.sweep"]
        if a.quick:  # one BM25 experiment on the smallest mini set: checks the script, no figure
            (root / "quick.yaml").write_text("blocks:\n  b:\n    +experiment: doc_bm25\n    target_fields: TA\n")
            sweep += [f"sweep={root / 'quick.yaml'}", "dataset.params.n_docs=60", "dataset.params.n_queries=8"]
        else:
            sweep += ["sweep=default"]
        if a.only in (None, "sweep"):
            timed("sweep fresh", sweep, env, root, None if a.quick else TARGETS["sweep fresh"])
            timed("sweep cached", sweep, env, root, None if a.quick else TARGETS["sweep cached"])
        if not a.quick and a.only in (None, "check"):
            shutil.rmtree(ROOT / ".mypy_cache", ignore_errors=True)
            timed("make check", ["make", "check"], {**os.environ}, ROOT, TARGETS["make check"])
        if not a.quick and a.only in (None, "test"):
            timed("make test", ["make", "test"], {**os.environ}, ROOT, TARGETS["make test"])
    finally:
        burner.kill()
        burner.wait()


if __name__ == "__main__":
    main()
