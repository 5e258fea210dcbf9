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


def dataset(store_root):
    """The real CACM cross-domain set when ../shared has it, else the embedded mini set."""
    from omegaconf import OmegaConf

    from harness import data

    if CACM.exists():
        return data.load_local(CACM), "cacm-xdom"
    return data.load(OmegaConf.load(ROOT / "conf" / "dataset" / "mini.yaml"), store_root), "mini"


@contextmanager
def timer(out: dict, key: str):
    t0 = time.perf_counter()
    yield
    out[key] = time.perf_counter() - t0


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(name: str, ratio: float, detail: str) -> None:
    print(f"RATIO {name:38s} {ratio:8.3f}   {detail}", flush=True)
