"""Helpers shared by the bench scripts: the data they run on, timing, the ratio line."""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACM = ROOT.parent / "shared" / "data" / "cacm-xdom"


def add_quick(ap) -> None:
    """``--quick``: the script on tiny input, one round, so that ``make test`` runs every benchmark
    (tests/test_bench.py) and none can rot unseen; its ratios mean nothing."""
    ap.add_argument("--quick", action="store_true", help="tiny input, one round: checks the script runs, not a figure")


def dataset(store_root, quick: bool = False):
    """The real CACM cross-domain set when ../shared has it, else the embedded mini set; ``quick``:
    the mini set at its smallest."""
    from omegaconf import OmegaConf

    from harness import data

    if CACM.exists() and not quick:
        return data.load_local(CACM), "cacm-xdom"
    cfg = OmegaConf.load(ROOT / "conf" / "dataset" / "mini.yaml")
    if quick:
        cfg.params.n_docs, cfg.params.n_queries = 60, 8
    return data.load(cfg, store_root), "mini (quick)" if quick else "mini"


@contextmanager
def timer(out: dict, key: str):
    t0 = time.perf_counter()
    yield
    out[key] = time.perf_counter() - t0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, ratio: float, detail: str) -> None:
    print(f"RATIO {name:38s} {ratio:8.3f}   {detail}", flush=True)


def split_units(units_dir: Path, out: Path, threads: int) -> Path:
    """The units file dealt line by line into one file per thread under ``out/docs``: IndexCollection
    gives each input file one thread, so this is Anserini at its best with ``threads`` threads,
    the equal-work anchor of the harness's own multi-threaded build."""
    docs = Path(out) / "docs"
    docs.mkdir(parents=True)
    outs = [open(docs / f"units-{i}.jsonl", "w", encoding="utf-8") for i in range(threads)]
    with open(Path(units_dir) / "docs" / "units.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f):
            outs[i % threads].write(line)
    for o in outs:
        o.close()
    return Path(out)


def compose(*overrides: str):
    """The project's config composed as the CLI would, with these overrides."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir

    import harness.config  # noqa: F401  (registers the schema)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return _compose("config", overrides=list(overrides))
