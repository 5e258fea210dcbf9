"""`make bench`: the quick benchmarks, each printing RATIO lines (and ESTIMATE lines: the cost estimate
against what a stage took)."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK = [
    ["bm25_search.py"],
    ["indexing.py"],
    ["encoding.py"],
    ["sweep_rerun.py", "dataset.params.n_docs=200", "dataset.params.n_queries=15"],
    ["dapfam_scale.py", "--families", "3000"],
    ["query_reduction.py", "--families", "3000", "--queries", "200"],
]

failed = 0
for script, *args in QUICK:
    r = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True)
    lines = [line for line in r.stdout.splitlines() if line.startswith(("RATIO", "ESTIMATE"))]
    print("\n".join(lines) if lines else f"{script}: no ratio printed", flush=True)
    if r.returncode != 0:
        failed += 1
        print(r.stderr[-2000:], file=sys.stderr)
sys.exit(1 if failed else 0)
