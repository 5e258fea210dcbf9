"""Scores: ir-measures (pytrec_eval provider) over the ALL, IN and OUT qrels.

One ranking is scored against three qrel sets. Each subset's qrels hold all of its relevant
documents, so nDCG's ideal ranking and recall's denominator come from the judgments, never from
the retrieved list. Averages are over the queries that have at least one positive in the subset
(as MTEB does): a query with no OUT citation has no defined OUT score and is left out of OUT's
mean rather than counted as 0. A query that *has* positives but retrieved nothing scores 0
(trec_eval's ``-c``), so an empty query text cannot inflate a mean.

Each subset's qrels also carry the other judged documents of its queries with relevance 0
(DAPFAM's sampled ``NC`` negatives; :func:`harness.data.qrels.judgments`): no measure that counts
relevant documents changes, and Judged@k or Bpref see what was judged.

Grades are used as the qrels give them (graded nDCG); fractional grades are scaled to the
integers pytrec_eval needs by :func:`harness.data.qrels.integer_grades`. That changes neither
linear-gain nDCG nor a measure that binarises at the default level (grade > 0 is relevant), and
any other measure (ERR, exponential-gain or explicit-gain nDCG, ``rel=`` thresholds) is refused
on such qrels by :func:`check_grade_scaling` rather than computed on scaled grades.
"""

from __future__ import annotations

from pathlib import Path

import ir_measures
import pandas as pd

from . import env, stage
from .artifact import Artifact
from .data.qrels import SUBSETS, grade_scale, integer_grades
from .errors import ConfigError
from .files import write_json_atomic
from .runs import read_trec
from .stage import Stage, register

DEFAULT_MEASURES = ("nDCG@100", "R@100")
VERSION = 5  # of the scores builder (harness.env): bump when a change alters per_query.csv or means


def measure_names(names) -> list[str]:
    """``metrics`` as a list of names: ``metrics=nDCG@10`` (one name, no brackets) is accepted."""
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(n) for n in names]


def parse_measures(names) -> list:
    """ir-measures measure objects for ``metrics``, refusing names ir-measures cannot parse or no
    installed provider can compute, before anything is built."""
    out = []
    names = measure_names(names)
    if not names:
        raise ValueError("metrics=[]: no measure to compute. Fix: e.g. metrics=[nDCG@100,R@100].")
    for n in names:
        try:
            out.append(ir_measures.parse_measure(n))
        except Exception as e:
            raise ValueError(
                f"metrics: {n!r} is not an ir-measures measure name. Fix: use names such as nDCG@100, R@100, AP@100."
            ) from e
    try:
        evaluator(out, pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "relevance": [1]}))
    except Exception as e:
        raise ValueError(
            f"metrics={names}: no installed ir-measures provider computes them all ({e}). Fix: choose "
            f"measures that pytrec_eval computes (nDCG@k, R@k, P@k, AP, RR, ...)."
        ) from e
    return out


def evaluator(measures, qrels: pd.DataFrame):
    """pytrec_eval (trec_eval's own code) when it computes every measure, else the providers
    ir-measures picks (e.g. ``judged`` for Judged@10)."""
    provider = ir_measures.providers.registry["pytrec_eval"]
    if provider.is_available() and all(provider.supports(m) for m in measures):
        return provider.evaluator(measures, qrels)
    return ir_measures.evaluator(measures, qrels)


# Measures whose value a common factor on every grade leaves unchanged: linear-gain nDCG, and the
# measures that binarise grades at the default level (every positive grade is relevant).
BINARISING = {
    "R",
    "P",
    "AP",
    "RR",
    "Bpref",
    "Judged",
    "Rprec",
    "SetP",
    "SetR",
    "SetF",
    "SetAP",
    "Success",
    "IPrec",
    "NumRet",
    "NumRel",
    "NumRelRet",
    "infAP",
}


def scale_invariant(measure) -> bool:
    p = measure.params
    if measure.NAME == "nDCG":
        return p.get("gains") is None and p.get("dcg", "log2") == "log2"
    return measure.NAME in BINARISING and p.get("rel", 1) == 1


def check_grade_scaling(measures, qrels: pd.DataFrame) -> None:
    """Refuse measures that would be computed on scaled grades (module docstring)."""

    scale = grade_scale(qrels)
    bad = [str(m) for m in measures if not scale_invariant(m)]
    if scale > 1 and bad:
        example = qrels.loc[qrels["relevance"].astype(float) % 1 != 0, "relevance"].iloc[0]
        raise ConfigError(
            f"metrics: {', '.join(bad)} depend(s) on the grade values, and these qrels have fractional "
            f"grades (e.g. {example:g}) that pytrec_eval can only take multiplied by {scale}: the measure "
            f"would see {example * scale:g}. Fix: use linear-gain nDCG or measures that binarise "
            f"(R, P, AP, RR at the default rel=1), or give integer grades."
        )


def as_dict(frame: pd.DataFrame, value: str) -> dict:
    """``{query_id: {doc_id: value}}``, ir-measures' dict-of-dict form (the last of duplicate pairs
    wins, as when it reads a frame): built from whole columns, where ir-measures would read the
    frame row by row."""
    out: dict = {}
    for q, d, v in zip(frame["query_id"].tolist(), frame["doc_id"].tolist(), frame[value].tolist()):
        out.setdefault(q, {})[d] = v
    return out


def per_query(run: pd.DataFrame, qrels: pd.DataFrame, measures=DEFAULT_MEASURES) -> pd.DataFrame:
    """``(query_id, measure, value)`` for every query with a positive in ``qrels``; missing
    queries score 0. Rows with relevance 0 are judged non-relevant documents."""
    ms = parse_measures(measures)
    check_grade_scaling(ms, qrels)
    qids = sorted(qrels.loc[qrels["relevance"].astype(float) > 0, "query_id"].unique())
    if not qids:
        return pd.DataFrame(columns=["query_id", "measure", "value"])
    ev = evaluator(ms, as_dict(integer_grades(qrels[["query_id", "doc_id", "relevance"]]), "relevance"))
    rows = [(m.query_id, str(m.measure), float(m.value)) for m in ev.iter_calc(as_dict(run, "score"))]
    got = pd.DataFrame(rows, columns=["query_id", "measure", "value"])
    full = pd.MultiIndex.from_product([qids, [str(m) for m in ms]], names=["query_id", "measure"])
    got = got.set_index(["query_id", "measure"]).reindex(full, fill_value=0.0).reset_index()
    return got


def score(run: pd.DataFrame, dataset, measures=DEFAULT_MEASURES, subsets=SUBSETS) -> pd.DataFrame:
    """Per-query table over subsets: ``(subset, query_id, measure, value)``."""
    parts = []
    for s in subsets:
        pq = per_query(run, dataset.judgments(s), measures)
        pq.insert(0, "subset", s)
        parts.append(pq)
    return pd.concat(parts, ignore_index=True)


def score_nested(nested: pd.DataFrame, dataset, measures=DEFAULT_MEASURES) -> pd.DataFrame:
    """Per-query scores of a learned run's nested rankings (:func:`harness.ltr.nested_fit`):
    ``(outer_fold, subset, query_id, measure, value)``, each outer fold's queries only (the held
    fold's own queries are not in its nested ranking and are not scored as 0)."""
    parts = []
    for f, run in nested.groupby("outer_fold", sort=True):
        qids = set(run["query_id"])
        for s in SUBSETS:
            j = dataset.judgments(s)
            pq = per_query(run, j[j["query_id"].isin(qids)], measures)
            pq.insert(0, "subset", s)
            pq.insert(0, "outer_fold", int(f))
            parts.append(pq)
    return pd.concat(parts, ignore_index=True)


def means(per_query_table: pd.DataFrame) -> pd.DataFrame:
    """Mean per subset and measure, with the number of queries averaged over."""
    g = per_query_table.groupby(["subset", "measure"], sort=False)["value"]
    return pd.DataFrame({"mean": g.mean(), "queries": g.size()}).reset_index()


def artifact(run: Artifact, qrels: Artifact, metrics: list[str]) -> Artifact:
    """The scores of a run: keyed by the judgments as scored (a digest of the positives), not by
    how they were read."""
    return Artifact(stage.SCORES, {"metrics": metrics}, (run, qrels), env.scorer(VERSION))


def build(tmp: Path, run_dir: Path, ds, metrics: list[str], manifest: dict) -> dict:
    """Per-query and mean scores over ALL / IN / OUT of the run in ``run_dir`` (and its nested
    scores, where a learned run wrote them), and the experiment's ``manifest``."""
    table = score(read_trec(run_dir / "run.trec"), ds, metrics)
    table.to_csv(tmp / "per_query.csv", index=False)
    nested = run_dir / "nested.parquet"
    if nested.exists():  # a learned run's nested scores: what harness.select chooses on
        score_nested(pd.read_parquet(nested), ds, metrics).to_csv(tmp / "nested_per_query.csv", index=False)
    write_json_atomic(tmp / "manifest.json", manifest)
    m = means(table)
    m.to_csv(tmp / "means.csv", index=False)
    return {
        "means": {f"{r.measure}/{r.subset}": r.mean for r in m.itertuples()},
        "queries": {r.subset: int(r.queries) for r in m.itertuples()},
    }


def canonical(metrics) -> list[str]:
    """Canonical ir-measures names of ``metrics`` (``nDCG@100``), refused in one line where ir-measures
    cannot parse a name or no installed provider computes it."""
    try:
        return [str(m) for m in parse_measures(metrics)]
    except ValueError as e:
        raise ConfigError(str(e)) from e


def check(cfg) -> None:
    """``metrics``: every name parsed and computed by an installed provider."""
    canonical(cfg.metrics)


STAGE = register(
    Stage(
        stage.SCORES,
        "runs",
        "experiments (distinct scores)",
        VERSION,
        cost="scoring",
        check=check,
    )
)
