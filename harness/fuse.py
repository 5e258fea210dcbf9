"""Fusion of family runs through pyserini's trectools: RRF, interpolation, average.

* ``rrf``: score(d) = sum_i w_i / (k + rank_i(d)) (Cormack et al., SIGIR 2009; weights all 1 is
  pyserini's ``reciprocal_rank_fusion``);
* ``interpolation``: sum_i w_i * minmax_i(d), each run's scores min-max normalised per query
  (BM25 and cosine scores live on different scales, so raw scores are never mixed);
* ``average``: mean of the normalised scores (pyserini's ``normalize`` fusion, divided by n).

The input runs are ``fusion.backends`` (one per backend, this experiment's views) or
``fusion.runs``, a list of per-run overrides of this experiment's config (:func:`run_config`).
Only the top ``depth`` of each run count; a document missing from a run adds nothing for it.
Ranks are the runs' own (trec_eval order, see :mod:`harness.runs`). pyserini truncates after its
own tie-break (doc id ascending); we ask it for the full union and cut to ``out_k`` in trec_eval's
order, so the written ranks are the ones trec_eval evaluates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from .runs import top_k, with_ranks

if TYPE_CHECKING:
    from .experiment import Experiment
    from .store import Artifact

METHODS = ("rrf", "interpolation", "average")
VERSION = 1  # of the fused-run builder (harness.env): bump when a change alters its run files


def to_trecrun(run: pd.DataFrame):
    from pyserini.trectools import TrecRun

    r = with_ranks(run)
    df = pd.DataFrame(
        {"topic": r["query_id"], "q0": "Q0", "docid": r["doc_id"], "rank": r["rank"], "score": r["score"], "tag": "run"}
    )
    return TrecRun.from_dataframes([df])


def fuse(
    runs: list[pd.DataFrame],
    method: str = "rrf",
    k: int = 60,
    weights: list[float] | None = None,
    depth: int | None = 100,
    out_k: int | None = 100,
) -> pd.DataFrame:
    """Fuse run tables; returns a run table with the top ``out_k`` per query."""
    from pyserini.trectools import AggregationMethod, RescoreMethod, TrecRun

    if len(runs) < 2:
        raise ValueError("fusion needs at least two runs (fusion.backends or fusion.runs).")
    if method not in METHODS:
        raise ValueError(f"fusion.method={method!r}: expected one of {METHODS}")
    if k < 0:
        raise ValueError(f"fusion.k={k}: expected a non-negative integer (the paper's grid: 10, 30, 60, 100).")
    weights = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(runs):
        raise ValueError(f"fusion.weights: {len(weights)} weights for {len(runs)} runs.")
    if method == "average":
        weights = [1.0 / len(runs)] * len(runs)
    parts = []
    for run, w in zip(runs, weights):
        t = to_trecrun(top_k(run, depth) if depth else run)  # min-max over the rows that are fused
        t = t.rescore(RescoreMethod.RRF, rrf_k=int(k)) if method == "rrf" else t.rescore(RescoreMethod.NORMALIZE)
        parts.append(t if w == 1.0 else t.rescore(RescoreMethod.SCALE, scale=w))
    fused = TrecRun.merge(parts, AggregationMethod.SUM, depth=depth, k=None).run_data
    out = pd.DataFrame(
        {
            "query_id": fused["topic"].astype(str),
            "doc_id": fused["docid"].astype(str),
            "score": fused["score"].astype(float),
        }
    )
    return top_k(out, out_k) if out_k else out


def params_of(f, out_k: int) -> dict:
    """The fused run's key: method, RRF constant, depth, and weights only where they are not all 1
    (so unweighted fusions keep the keys they always had; ``average`` has none)."""
    from .config import fusion_weights

    params = {"method": str(f.method), "depth": int(f.depth), "out_k": int(out_k)}
    if str(f.method) == "rrf":  # the RRF constant; normalised-score fusions have none
        params["k"] = int(f.k)
    weights = fusion_weights(f)
    if str(f.method) != "average" and any(w != 1.0 for w in weights):
        params["weights"] = weights
    return params


def node(exp: Experiment, parts: list[Artifact]) -> Artifact:
    """The fused run stage: fusion of family runs (each an artifact other experiments share)."""
    from .store import Artifact

    params = params_of(exp.cfg.fusion, exp.cfg.search.k)
    art = Artifact("fused_run", params, tuple(parts), {"stage": VERSION})

    def build(tmp):
        from .runs import read_trec, write_trec

        runs = [read_trec(exp.store.path(p) / "run.trec") for p in parts]
        tag = exp.tag(art)
        write_trec(
            fuse(runs, params["method"], params.get("k", 60), params.get("weights"), params["depth"], params["out_k"]),
            tmp / "run.trec",
            tag,
        )
        return {"tag": tag}

    return exp.ensure(art, build, "RRF fused run" if params["method"] == "rrf" else f"{params['method']} fused run")


# ----------------------------------------------------------------------------- inputs of an N-way fusion
def _groups() -> dict:
    """Optional config groups a fused run may name by file, and their schema."""
    from .config import DensePRFConf, FusionConf, LTRConf, PRFConf, QueryReductionConf, RerankConf

    return {
        "prf": PRFConf,
        "dense_prf": DensePRFConf,
        "query_reduction": QueryReductionConf,
        "rerank": RerankConf,
        "ltr": LTRConf,
        "fusion": FusionConf,
    }


def run_config(cfg, overrides):
    """The config of one input run of an N-way fusion: this experiment's, without fusion,
    learning to rank and re-ranking, with the run's overrides (``{backend: bm25, query_fields: KW, prf: rm3}``).

    Entries compose like a command line: a group chosen by name (``prf: rm3`` loads
    ``conf/prf/rm3.yaml``) first, then dotted keys into it, whatever their order in the entry.
    ``weight`` is fusion's. A run cannot be a fusion itself, be learned or be re-ranked (they apply
    to the fused run: set them outside ``fusion.runs``). Levers inherited from the fused experiment
    go only to runs of their backend (``prf`` and ``query_reduction`` to BM25 runs, ``dense_prf``
    to dense ones)."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from .config import LEVER_BACKEND, ConfigError, check

    sub = cfg.copy()
    sub.fusion = None
    sub.rerank = None
    sub.ltr = None
    conf = Path(__file__).resolve().parent.parent / "conf"
    GROUPS = _groups()
    items = [(str(k), v) for k, v in dict(overrides).items() if str(k) != "weight"]
    for key, _ in items:
        if key.split(".", 1)[0] in ("fusion", "rerank", "ltr"):
            what = {"fusion": "a fusion itself", "rerank": "re-ranked on its own", "ltr": "learned on its own"}[
                key.split(".", 1)[0]
            ]
            raise ConfigError(
                f"fusion.runs: {key!r} inside a run entry: an input run cannot be {what}. Fix: set "
                f"{key.split('.', 1)[0]} outside fusion.runs (it applies to the fused run), or list "
                f"the inner fusion's runs in this one."
            )
    items.sort(key=lambda kv: "." in kv[0])  # group choices before their keys (a stable sort keeps the rest)
    chosen = {key.split(".", 1)[0] for key, _ in items}
    for key, value in items:
        group = key.split(".", 1)[0]
        try:
            if key in GROUPS and isinstance(value, str) and value not in ("none", "null"):
                path = conf / key / f"{value}.yaml"
                if not path.exists():
                    raise ConfigError(
                        f"fusion.runs: {key}={value!r} names no {path}. Fix: one of "
                        f"{sorted(p.stem for p in path.parent.glob('*.yaml'))}."
                    )
                value = OmegaConf.merge(OmegaConf.structured(GROUPS[key]), OmegaConf.load(path))
            elif key in GROUPS and value in ("none", "null"):
                value = None
            elif group in GROUPS and "." in key and OmegaConf.select(sub, group) is None:
                sub[group] = OmegaConf.structured(GROUPS[group])  # the schema's defaults, then the dotted value
            OmegaConf.update(sub, key, value, merge=False)
        except ConfigError:
            raise
        except Exception as e:  # omegaconf's validation errors: say which run and key
            raise ConfigError(
                f"fusion.runs: {key}={value!r}: {str(e).splitlines()[0]}. Fix: a key of the experiment "
                f"config (python -m harness.run --cfg job shows them), spelled as on the command "
                f"line."
            ) from e
    for lever, backend in LEVER_BACKEND.items():
        if lever not in chosen and str(sub.backend) != backend:
            sub[lever] = None  # the fused experiment's lever, for the runs of its backend
    check(sub)
    return sub
