"""The ``ltr`` group's settings: their schema (registered with the stage, harness.settings adds it to
the config) and the refusals a type cannot express."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import ConfigError, number, positive_int
from . import features


class LTRMethod(StrEnum):
    lambdamart = "lambdamart"


@dataclass
class LTRConf:
    """Learning to rank over the candidates of the final run and its inputs (harness.ltr)."""

    method: LTRMethod = LTRMethod.lambdamart
    depth: int = 100  # candidates: the union of each input run's top `depth` families
    features: list[str] = field(default_factory=lambda: ["run", "ipc", "doc"])  # families (ablations)
    out_weight: float = 1.0  # gain of an OUT-domain positive (an IN one gains 1)
    folds: int = 5  # cross-fitting over queries: harness.select's stratified folds
    seed: int = 0  # of the folds and of LightGBM
    n_estimators: int = 200
    learning_rate: float = 0.05
    num_leaves: int = 15
    min_child_samples: int = 20
    truncation: int = 100  # LambdaRank's truncation level: the ranks whose pairs are learned
    # Families the identity check may flag and you accept anyway (tagged in the run and its row).
    allow_identifying: list[str] = field(default_factory=list)
    prior: str | None = None  # the `prior` family's judgments: a qrels file of queries NOT scored
    train: str | None = None  # learn on this dataset (a DAPFAM-format folder or mini), apply here
    nested: bool = True  # nested out-of-fold scores, so that harness.select can choose among LTR rows


def check(cfg) -> None:
    t, search = cfg.get("ltr"), cfg.search
    if t is None:
        return
    for key in ("depth", "folds", "n_estimators", "num_leaves", "min_child_samples", "truncation"):
        positive_int(getattr(t, key), f"ltr.{key}")
    if t.depth > search.k:
        raise ConfigError(
            f"ltr.depth={t.depth} > search.k={search.k}: the input runs hold only search.k families per "
            f"query. Fix: ltr.depth <= search.k, or raise search.k (up to search.depth)."
        )
    if t.folds < 2:
        raise ConfigError(f"ltr.folds={t.folds}: cross-fitting needs at least 2 folds.")
    if t.num_leaves < 2:
        raise ConfigError(f"ltr.num_leaves={t.num_leaves}: a tree of one leaf never splits. Fix: ltr.num_leaves >= 2.")
    if t.seed < 0:
        raise ConfigError(f"ltr.seed={t.seed}: expected an integer >= 0 (it seeds the folds and LightGBM).")
    number(t.out_weight, "ltr.out_weight", 0.0, hint=" (1: OUT positives gain as much as IN ones)")
    number(t.learning_rate, "ltr.learning_rate", 1e-6, 1.0)

    unknown = [f for f in t.features if f not in features.FAMILIES]
    if unknown or not len(t.features) or len(set(t.features)) != len(t.features):
        raise ConfigError(
            f"ltr.features={list(t.features)}: expected a non-empty list of distinct feature families "
            f"from {list(features.FAMILIES)}."
        )
    allowed = list(t.get("allow_identifying") or [])
    if any(f not in features.DOCUMENT_FAMILIES for f in allowed):
        raise ConfigError(
            f"ltr.allow_identifying={allowed}: expected families whose values belong to the document, "
            f"from {list(features.DOCUMENT_FAMILIES)}."
        )
    for f in features.IDENTIFYING:
        if f in t.features and f not in allowed:
            raise ConfigError(
                f"ltr.features=[..., {f}]: {f} tells documents apart (an exact per-document value), so the ranker "
                f"would learn which documents other queries' judgments cite, not what makes prior art. Fix: "
                f"use doc (the same value in coarse buckets), or name it in ltr.allow_identifying=[{f}] (tagged)."
            )
    if ("prior" in t.features) != bool(t.get("prior")):
        raise ConfigError(
            "ltr.features and ltr.prior: the prior family needs ltr.prior=FILE (judgments of queries that are "
            "not scored) and ltr.prior needs prior in ltr.features. Fix: set both or neither."
        )
    if t.get("prior") and t.get("train"):
        raise ConfigError("ltr.prior with ltr.train: a model trained elsewhere has no prior here. Fix: one of them.")
