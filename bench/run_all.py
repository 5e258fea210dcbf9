"""`make bench`: the benchmarks, each printing RATIO lines (and ESTIMATE lines: the cost estimate
against what a stage took). A script that fails or leaves out a line it owes fails the run.

    python bench/run_all.py            # the figures of docs/benchmarks.md (minutes)
    python bench/run_all.py --quick    # every script on tiny input, one round: tests/test_bench.py
"""

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/dapfam_scale.py's encoding figure per encoder x dtype (the CPU's; a GPU's too where one is)
DENSE_SCALE = [
    f"SCALE dense {m} {d} cpu" for m in ("all-MiniLM-L6-v2", "all-mpnet-base-v2") for d in ("float32", "bfloat16")
]
# Each script, its arguments for `make bench`, and the lines it owes (docs/benchmarks.md lists them).
BENCHES = [
    (["bm25_search.py"], ["RATIO bm25 search overhead harness/SearchCollection"]),
    (["query_time.py"], ["RATIO bm25 ms/query first row/same search again"]),
    (["indexing.py"], ["RATIO passaging+indexing harness/IndexCollection"]),
    (["encoding.py"], ["RATIO encoding minilm harness auto/ST float32"]),
    (["finetune.py"], ["RATIO finetune minilm harness auto/ST float32"]),
    (
        ["sweep_rerun.py", "dataset.params.n_docs=200", "dataset.params.n_queries=15"],
        ["RATIO sweep rerun cached/fresh"],
    ),
    (
        ["dapfam_scale.py", "--families", "3000"],
        [
            "RATIO passaging+indexing harness/IndexCollection",
            "RATIO bm25 search overhead harness/SearchCollection",
            "ESTIMATE passaging+indexing",
            "ESTIMATE search",
            "ESTIMATE aggregation",
            "ESTIMATE scoring",
            *DENSE_SCALE,
        ],
    ),
    (
        ["shards.py"],
        ["RATIO shards dense 2 jobs x1 thread/1 process x2", "RATIO shards bm25 2 jobs x1 thread/1 process x2"],
    ),
    (
        ["query_reduction.py", "--families", "3000", "--queries", "200"],
        ["RATIO query reduction tfidf25/full query s/query", "RATIO query reduction kl25/full query s/query"],
    ),
]

# README's timings under load (bench/under_load.py): minutes of `make test` inside, so `make bench`
# leaves it to its own command; its quick mode runs with the others in tests/test_bench.py.
TIMINGS = [(["under_load.py"], ["TIME sweep fresh", "TIME sweep cached"])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="every script on tiny input, one round (checks, no figures)")
    a = ap.parse_args(argv)
    failed = []
    for (script, *args), owed in BENCHES + (TIMINGS if a.quick else []):
        cmd = [sys.executable, str(HERE / script), *(["--quick"] if a.quick else args)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [line for line in r.stdout.splitlines() if line.startswith(("RATIO", "ESTIMATE", "TIME", "SCALE"))]
        print("\n".join(lines), flush=True)
        missing = [o for o in owed if not any(line.startswith(o) for line in lines)]
        if r.returncode != 0 or missing:
            failed.append(script)
            print(f"{script}: exit {r.returncode}; missing lines: {missing}\n{r.stderr[-3000:]}", file=sys.stderr)
    if failed:
        print(f"bench: {len(failed)} script(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
