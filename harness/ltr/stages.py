"""The learning-to-rank stages: features, identity check, models and learned runs as keyed artifacts, how they name themselves, and ``ltr.train``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from .. import data, env, leakage, stage
from ..artifact import Artifact
from ..data import schema as S
from ..data import views as V
from ..files import write_json_atomic
from ..naming import inner_stem, tag
from ..runs import read_trec, write_trec
from ..stage import Context, Stage, register
from . import settings
from .features import (
    SHORT,
    PairStats,
    candidates,
    family_of,
    feature_columns,
    full_table,
    labels,
    run_features,
    side_table,
)
from .identity import IdentifyingFeature, format_identity, identity_check
from .prior import audit_prior, read_prior
from .training import _fold_of_rows, _importance, apply_model, fit, folds_of, learned_columns, learned_run, with_learned

log = logging.getLogger(__name__)

METHODS = ("lambdamart",)
FEATURES_VERSION = 2  # of the features builder (harness.env): bump when a change alters its files
VERSION = 2  # of the learned-run builder
IDENTITY_VERSION = 4  # of the identity check
MODEL_VERSION = 1  # of a model trained on another dataset (ltr.train)


def _passage_run(run: Artifact) -> Artifact | None:
    """The unit run of passages behind a family run (None for documents or fused runs)."""
    if run.kind != stage.FAMILY_RUN or run.params.get("aggregation") == "identity":
        return None
    return run.parents[0]


def build_features(tmp: Path, art: Artifact, run_files: list[Path], passage_files: dict[int, Path], ds) -> dict:
    """The candidates of the runs in ``run_files`` (the final run first) with their ``run``
    features, and the per-query and per-document side tables the document families read
    (``ds``: the dataset's queries, corpus view and codes)."""
    depth = art.params["depth"]
    runs = [read_trec(f) for f in run_files]
    passages = {i: read_trec(f) for i, f in passage_files.items()}
    cands = candidates(runs, depth)
    q = ds.queries
    qfull = dict(zip(q[S.QUERY_ID], q[S.IPC_FULL])) if S.IPC_FULL in q.columns else None
    try:
        dfull = ds.doc_ipc_codes if qfull is not None else None
    except Exception:  # noqa: BLE001  (a corpus without full codes: IPC4 features are NaN)
        dfull, qfull = None, None
    qtext = V.query_texts(q, art.params["query_view"])
    words = {d: len(t.split()) for d, t in V.target_texts(ds.corpus, art.params["target_view"])}
    table = pd.concat([cands, run_features(cands, runs, depth, passages)], axis=1)
    table["q_len"] = cands["query_id"].map(lambda x: len(qtext.get(x, "").split())).astype(float)
    table.to_parquet(tmp / "features.parquet", index=False)
    side_table(q[S.QUERY_ID], dict(zip(q[S.QUERY_ID], q[S.IPC3])) if S.IPC3 in q.columns else {}, qfull).to_parquet(
        tmp / "queries.parquet"
    )
    ids = set(ds.doc_ipc3) | set(words)
    side_table(ids, ds.doc_ipc3, dfull, words).to_parquet(tmp / "docs.parquet")
    return {"candidates": len(cands), "features": [c for c in table.columns if c not in ("query_id", "doc_id")]}


def build_identity(tmp: Path, features_dir: Path, positives: pd.DataFrame, params: dict, prior: dict | None) -> dict:
    """The identity check (module docstring) of ``params`` on the features in ``features_dir``."""
    f, q, d = read_features(features_dir)
    result = identity_check(f, positives, params, q, d, prior, seed=params["seed"])
    write_json_atomic(tmp / "identity.json", result)
    return {"identifying": result["identifying"]}


def build_learned(
    tmp: Path, art: Artifact, features_dir: Path, positives: pd.DataFrame, prior: dict | None, identity: dict
) -> dict:
    """The cross-fitted learned run (and its nested rankings, models, importances and folds)."""
    params = art.params
    f, q, d = read_features(features_dir)
    run, models, imp, inner = learned_run(f, positives, params, q, d, prior, nested=params["nested"])
    (tmp / "models").mkdir()
    for k, m in models.items():
        m.booster_.save_model(str(tmp / "models" / f"fold{k}.txt"))
    imp.to_csv(tmp / "importance.csv", index=False)
    folds_of(positives, params["folds"], params["seed"]).rename_axis("query_id").to_csv(tmp / "folds.csv")
    if inner is not None:
        inner.to_parquet(tmp / "nested.parquet", index=False)
    name = tag(art)
    write_trec(run, tmp / "run.trec", name)
    by_family = imp.groupby("family")["gain"].sum()
    return {
        "tag": name,
        "learned_from": "cross-fitted",
        "gain_share": (by_family / max(by_family.sum(), 1e-12)).round(4).to_dict(),
        "identity": identity,
        "identifying": [f for f in identity["identifying"] if f in params.get("allow_identifying", [])],
    }


def constant_families(x: pd.DataFrame, families) -> list[str]:
    """The feature families whose every column holds one value over ``x``'s rows (run features
    excepted: they come from the runs, never from the data's columns)."""
    out = []
    for fam in families:
        own = [c for c in x.columns if family_of(c) == fam]
        if fam != "run" and own and all(x[c].nunique(dropna=False) <= 1 for c in own):
            out.append(fam)
    return out


def build_model(tmp: Path, features_dir: Path, positives: pd.DataFrame, params: dict) -> dict:
    """One model learned from all of the training dataset's judgments (``ltr.train``), with the
    class-pair rates it saw, for another dataset's candidates."""
    f, q, d = read_features(features_dir)
    table = full_table(f, q, d, params["features"])
    cols = feature_columns(table, params["features"])
    y = labels(table, positives)
    extra = learned_columns(table, q, d, y, params["features"])
    constant = constant_families(table[cols], params["features"])
    if constant:
        raise IdentifyingFeature(
            f"ltr.train: feature famil{'y' if len(constant) == 1 else 'ies'} {constant} cannot be computed on the "
            f"training data (every row has the same value: the data lacks what they read, e.g. IPC codes or "
            f"text), so the model would learn nothing from {'it' if len(constant) == 1 else 'them'} and the row "
            f"would claim {'it' if len(constant) == 1 else 'them'}. Fix: drop {constant} from ltr.features, or "
            f"train on data that has their columns."
        )
    x = table[cols]
    if extra is not None:  # class-pair rates: each training row's from the other folds of A
        rows = _fold_of_rows(table["query_id"], folds_of(positives, params["folds"], params["seed"]))
        x = with_learned(x, extra, rows, set())
        rates = extra.rates(~np.isnan(rows))  # all of A's judged rows, for B
        pd.to_pickle(rates, tmp / "pair_rates.pkl")
    m = fit(x, y, table["query_id"], params)
    m.booster_.save_model(str(tmp / "model.txt"))
    _importance({"all": m}, list(x.columns)).to_csv(tmp / "importance.csv", index=False)
    return {"queries": int(table["query_id"].nunique())}


def build_transferred(tmp: Path, art: Artifact, model_dir: Path, features_dir: Path, train: str) -> dict:
    """This dataset's candidates ranked by the model in ``model_dir`` (its labels never read)."""
    import lightgbm as lgb  # heavy: only where a model is applied

    params = art.params
    booster = lgb.Booster(model_file=str(model_dir / "model.txt"))
    f, q, d = read_features(features_dir)
    table = full_table(f, q, d, params["features"])
    rates = model_dir / "pair_rates.pkl"
    if rates.exists():  # A's class-pair rates over this dataset's pairs
        learned = PairStats(table, q, d).columns(pd.read_pickle(rates))
        table = pd.concat([table.reset_index(drop=True), learned], axis=1)
    try:
        run = apply_model(booster, table, params["out_k"])
    except ValueError as e:
        raise IdentifyingFeature(f"ltr.train={train}: {e}") from None
    run_tag = tag(art)
    write_trec(run, tmp / "run.trec", run_tag)
    return {
        "tag": run_tag,
        "learned_from": f"trained on {train}",
        "identity": {"transfer": params["train"]},
        "identifying": [],
    }


def features_node(ctx: Context, inputs: list[Artifact]) -> Artifact:
    """The pair features of the candidates of ``inputs`` (the final run first), and the per-query
    and per-document values the document families are computed from."""
    depth = int(ctx.cfg.ltr.depth)
    art = Artifact(
        stage.LTR_FEATURES,
        {"depth": depth, "query_view": str(ctx.cfg.query_fields), "target_view": str(ctx.cfg.target_fields)},
        (*inputs, ctx.topics_node, ctx.corpus_node),
        {"stage": FEATURES_VERSION, "lightgbm": env.version("lightgbm")},
    )

    run_files = [ctx.store.path(r) / "run.trec" for r in inputs]
    passage_files = {i: ctx.store.path(u) / "run.trec" for i, r in enumerate(inputs) if (u := _passage_run(r))}
    return ctx.ensure(art, lambda tmp: build_features(tmp, art, run_files, passage_files, ctx.ds), "LTR features")


def read_features(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return (
        pd.read_parquet(folder / "features.parquet"),
        pd.read_parquet(folder / "queries.parquet"),
        pd.read_parquet(folder / "docs.parquet"),
    )


def params_of(t, out_k: int) -> dict:
    p = {
        "method": str(t.method),
        "features": sorted(str(f) for f in t.features),
        "out_weight": float(t.out_weight),
        "folds": int(t.folds),
        "seed": int(t.seed),
        "n_estimators": int(t.n_estimators),
        "learning_rate": float(t.learning_rate),
        "num_leaves": int(t.num_leaves),
        "min_child_samples": int(t.min_child_samples),
        "truncation": int(t.truncation),
        "out_k": int(out_k),
        "nested": bool(t.get("nested", True)),
    }
    allowed = sorted(str(f) for f in (t.get("allow_identifying") or []))
    if allowed:  # in the key and the tag only where named: other runs keep their names
        p["allow_identifying"] = allowed
    return p


def identity_node(ctx: Context, feats: Artifact, params: dict, prior: dict | None) -> Artifact:
    """The identity check of a learned run's configuration (module docstring), cached."""
    keyed = {k: v for k, v in params.items() if k not in ("allow_identifying", "nested")}
    art = Artifact(
        stage.LTR_IDENTITY,
        keyed,
        (feats, ctx.qrels_node),
        {"stage": IDENTITY_VERSION, "lightgbm": env.version("lightgbm")},
    )

    features_dir, positives = ctx.store.path(feats), ctx.ds.positives
    return ctx.ensure(
        art, lambda tmp: build_identity(tmp, features_dir, positives, params, prior), "LTR identity check"
    )


def node(ctx: Context, inputs: list[Artifact]) -> Artifact:
    """The learned run stage over the final run and its inputs (cross-fitted, or trained on another
    dataset with ``ltr.train``; module docstring)."""
    t = ctx.cfg.ltr
    feats = features_node(ctx, inputs)
    params = params_of(t, ctx.cfg.search.k)
    if t.get("train"):
        learned = transfer_node(ctx, feats, params)
        if learned is not None:
            return learned
    prior = None
    if t.get("prior"):
        prior, params["prior"] = read_prior(t.prior, ctx.ds.query_ids)
        audit_prior(str(t.prior), ctx)
    ident = identity_node(ctx, feats, params, prior)
    identity = None
    if not ctx.plan:
        identity = json.loads((ctx.store.path(ident) / "identity.json").read_text())
        for line in format_identity(identity):
            log.info("%s", line)
        refused = [f for f in identity["identifying"] if f not in params.get("allow_identifying", [])]
        if refused:
            e = identity["families"][refused[0]]
            raise IdentifyingFeature(
                f"ltr.features: the {refused[0]} family identifies documents on this dataset (its values moved to "
                f"other documents beat values redrawn for every pair by {e['delta']['ALL']:+.4f} ALL / "
                f"{e['delta']['OUT']:+.4f} OUT nDCG@100, Holm p {e['p_holm']['ALL']:.3g} / {e['p_holm']['OUT']:.3g}): "
                f"the ranker would learn which documents other queries' judgments cite. Fix: drop it from "
                f"ltr.features, or name it in ltr.allow_identifying=[{refused[0]}] to run it anyway (tagged)."
            )
    art = Artifact(
        stage.LTR_RUN, params, (feats, ctx.qrels_node), {"stage": VERSION, "lightgbm": env.version("lightgbm")}
    )

    features_dir, positives = ctx.store.path(feats), ctx.ds.positives

    def build(tmp):
        assert identity is not None  # read above whenever anything is built
        return build_learned(tmp, art, features_dir, positives, prior, identity)

    return ctx.ensure(art, build, "learned run (LambdaRank, cross-fitted)")


def transfer_node(ctx: Context, feats: Artifact, params: dict) -> Artifact | None:
    """``ltr.train``: the same experiment's runs on the training dataset, one model learned from
    all of its judgments, applied to this dataset's candidates (whose judgments it never reads).
    None where the training dataset is this one (cross-fitting stays the rule); refused where its
    judgments cover some of the queries scored here."""
    train = str(ctx.cfg.ltr.train)
    cfg_a = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True))
    assert isinstance(cfg_a, DictConfig)
    train_cfg, ds_a = data.load_training("ltr.train", train, ctx.cfg.dataset, ctx.store.root)
    with open_dict(cfg_a):
        cfg_a.ltr.train = None
        cfg_a.dataset = train_cfg
    ctx_a = ctx.on(cfg_a, ds_a)
    if ds_a.qrels_digest == ctx.ds.qrels_digest and ds_a.topics_fingerprint == ctx.ds.topics_fingerprint:
        log.info("ltr.train=%s is the dataset being scored: cross-fitting over its queries instead", train)
        return None
    # By content, not ids: the same patents under another source's ids, and pairs read backwards
    found = leakage.audit(leakage.judged(ds_a), leakage.judged(ctx.ds))
    leakage.check(found, f"ltr.train={train}")
    log.info("ltr.train=%s: leakage audit: %s", train, found.summary())
    feats_a = features_node(ctx_a, ctx_a.candidate_runs())
    # The run's lineage (manifest, gc) holds the training dataset's artifacts; its timings do not.
    ctx.elsewhere.update(n.key for n in ctx_a.nodes if n not in ctx.nodes)
    ctx.nodes.extend(n for n in ctx_a.nodes if n not in ctx.nodes)
    keyed = {k: v for k, v in params.items() if k not in ("out_k", "nested", "allow_identifying")}
    environment = {"stage": MODEL_VERSION, "lightgbm": env.version("lightgbm")}
    model = Artifact(stage.LTR_MODEL, keyed, (feats_a, ctx_a.qrels_node), environment)

    features_a = ctx.store.path(feats_a)
    ctx.ensure(
        model,
        lambda tmp: {
            "trained_on": ds_a.name,
            "train_source": ds_a.source,
            **build_model(tmp, features_a, ds_a.positives, params),
        },
        f"LTR model trained on {train}",
    )
    name = Path(train).name or train
    art = Artifact(
        stage.LTR_RUN,
        {**params, "train": name},
        (feats, model),
        {"stage": VERSION, "lightgbm": env.version("lightgbm")},
    )

    model_dir, features_dir = ctx.store.path(model), ctx.store.path(feats)
    return ctx.ensure(
        art,
        lambda tmp: {**build_transferred(tmp, art, model_dir, features_dir, train), "leakage": found.columns()},
        f"learned run (LambdaRank trained on {train})",
    )


# ----------------------------------------------------------------------------- how the stages name themselves
def ltr_label(params: dict) -> str:
    """``lambdamart(doc+ipc+run,ow=2)``: a learned run's feature families and OUT gain, and where
    named, the identifying families allowed and the dataset it was trained on."""
    extra = "".join(
        f",{k}={v}"
        for k, v in (
            ("allow", "+".join(params.get("allow_identifying", []))),
            ("train", params.get("train")),
        )
        if v
    )
    return f"{params['method']}({'+'.join(params['features'])},ow={params['out_weight']:g}{extra})"


def learned_tag(run: Artifact) -> str:
    """The run it improves on, then ``ltr-<families>-ow<gain>``, the identifying families allowed
    and the training dataset where named, and the key."""
    p = run.params
    fam = "".join(SHORT.get(f, f[0]) for f in p["features"])
    allow = "-id" + "".join(SHORT.get(f, f[0]) for f in p["allow_identifying"]) if p.get("allow_identifying") else ""
    train = f"-tr{p['train']}" if p.get("train") else ""
    return f"{inner_stem(learned_from(run))}.ltr-{fam}-ow{p['out_weight']:g}{allow}{train}.{run.key[:8]}"


def learned_from(run: Artifact) -> Artifact:
    """The run a learned run improves on: its features' first parent (the final run)."""
    return run.parents[0].parents[0]


# Registered by the imported module only: `python -m harness.ltr` runs this file as __main__ too,
# and a second registration of the same stages (other function objects) is refused by the registry.
STAGES = (
    ()
    if __name__ == "__main__"
    else (
        register(Stage(stage.LTR_FEATURES, "runs", "LTR feature tables", FEATURES_VERSION, cost="transform")),
        register(Stage(stage.LTR_IDENTITY, "runs", "LTR identity checks", IDENTITY_VERSION, cost="transform")),
        register(
            Stage(stage.LTR_MODEL, "runs", "LTR models trained on another dataset", MODEL_VERSION, cost="transform")
        ),
        register(
            Stage(
                stage.LTR_RUN,
                "runs",
                "learned runs (LTR)",
                VERSION,
                group="ltr",
                run=True,
                node=node,
                inner=learned_from,
                requires=lambda t: (
                    [(part, [S.IPC3], "ltr.features=[..., ipc]") for part in ("queries", "corpus")]
                    if "ipc" in t.features
                    else []
                ),
                tag=learned_tag,
                columns=lambda params: {"ltr": ltr_label(params) if params else None},
                system=" + LTR",
                in_fused_input="learned on its own",
                cost="transform",
                schema=settings.LTRConf,
                check=settings.check,
            )
        ),
    )
)
