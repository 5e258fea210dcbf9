"""Dense runs of a fine-tuned encoder: ``encoder.train=crossfit`` or ``encoder.train=DIR``.

``crossfit`` fine-tunes one encoder per query fold of the dataset being scored (the folds of
:mod:`harness.folds`, as LTR's and ``harness.select``'s), each on the judgments of the *other*
folds, and each fold's queries are ranked by the encoder that never read their judgments; the
corpus is encoded once per fold. ``DIR`` (a DAPFAM-format folder, or ``mini``) fine-tunes one
encoder on that dataset's judgments, after the leakage audit (:mod:`harness.leakage`) found none of
the scored pairs, reversed pairs or queries among them (``finetune.leakage=drop`` trains without
them instead, and the row says how many pairs went).

Everything learned is an artifact: a model (kind ``encoder_model``) is keyed by its training
judgments (their parts' nodes), its fold, its base encoder and the ``finetune`` settings; its
embeddings and Faiss index hang below it. One Faiss artifact holds a sub-index per model and
``folds.json`` (which queries each model ranks); :func:`harness.backends.dense.search` reads it.
``shown.json`` records, per scored query, the documents its model saw as training positives: the
never-shown view of the final run reads it (:func:`row_columns`).

With ``finetune.identity=true`` (the default) the identity check for encoders runs beside it
(kind ``encoder_identity``): the same training with every positive moved to another document of
the same domain relation (:func:`harness.finetune.moved_positives`), trained on the same groups.
Its gain over the base encoder must vanish, and the real model's must show on never-shown
positives (:func:`identity`).
Document level only (a passage's judgments are its family's): :func:`harness.config.check` refuses
passages.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf, open_dict

from . import data, env, evaluate, finetune, leakage, stage
from .artifact import Artifact
from .backends import dense
from .data import schema as S
from .data import views as V
from .errors import ConfigError, positive_int
from .folds import from_judgments, query_folds
from .runs import read_trec
from .stage import Context, Stage, register

log = logging.getLogger("harness.tuned")

MODEL_VERSION = 1
IDENTITY_VERSION = 2  # 2: the never-shown condition joins the verdict
_LOADED: dict[str, dense.Encoder] = {}  # fine-tuned encoders loaded in this process, by model folder


def settings(cfg) -> dict:
    """The ``finetune`` group's values (:class:`FinetuneConf`'s defaults, which are
    conf/finetune/mnrl.yaml's, where the group is not chosen)."""
    ft = cfg.get("finetune")
    given = OmegaConf.to_container(ft, resolve=True, enum_to_str=True) if ft is not None else {}
    assert isinstance(given, dict)
    return {**asdict(FinetuneConf()), **given}


def train_dtype(cfg) -> str:
    """The dtype fine-tuning runs in: ``finetune.dtype``, ``auto`` resolved as ``encoder.dtype=auto``
    is (bfloat16 autocast where the device computes it natively, else float32)."""
    asked = str(settings(cfg)["dtype"])
    if asked == "auto":
        asked = dense.resolve_dtype("auto", str(cfg.encoder.device))[0]
    return "bfloat16" if asked == "bfloat16" else "float32"


def positives(ds) -> pd.DataFrame:
    return ds.positives.rename(columns={S.DOC_ID: "doc_id"})[["query_id", "doc_id", "relevance", "domain"]]


def texts(ds, cfg) -> tuple[dict, dict]:
    """Training texts: queries in ``finetune.query_fields`` (one model serves every query view of an
    experiment: xdomain's TA, KW and T runs share it), documents in the target view it encodes."""
    view = settings(cfg)["query_fields"]
    return V.query_texts(ds.queries, str(view)), dict(V.target_texts(ds.corpus, str(cfg.target_fields)))


# ----------------------------------------------------------------------------- what each model learns from
def groups(ctx: Context) -> tuple[list[dict], object, Context]:
    """One entry per model: its name, the scored queries it ranks, its training positives, the
    documents each of those queries saw as training positives, and its leakage audit. Returns
    (groups, training dataset, training context)."""
    e, ft = ctx.cfg.encoder, settings(ctx.cfg)
    scored = positives(ctx.ds)
    sq, sd = texts(ctx.ds, ctx.cfg)
    if str(e.train) == "crossfit":
        ds_a, ctx_a = ctx.ds, ctx
        qids, with_out = from_judgments(scored)
        if int(ft["folds"]) > len(qids) or int(ft["folds"]) < 2:
            raise ConfigError(
                f"finetune.folds={ft['folds']}: expected 2 .. {len(qids)} (the queries with a positive). "
                f"Fix: finetune.folds=5."
            )
        fold = query_folds(qids, with_out, int(ft["folds"]), int(ft["seed"]))
        parts = []
        rest = [q for q in ctx.ds.query_ids if q not in fold.index]  # no judgments: ranked by the first model
        for f in sorted(fold.unique()):
            ranks = sorted(fold.index[fold == f]) + (rest if f == min(fold) else [])
            parts.append(
                {"name": f"fold{f}of{ft['folds']}", "ranks": ranks, "train": scored[~scored["query_id"].isin(ranks)]}
            )
    else:
        cfg_a = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True))
        assert isinstance(cfg_a, DictConfig)
        train_cfg, ds_a = data.load_training("encoder.train", str(e.train), ctx.cfg.dataset, ctx.store.root)
        with open_dict(cfg_a):
            cfg_a.encoder.train = None
            cfg_a.dataset = train_cfg
        ctx_a = ctx.on(cfg_a, ds_a)  # type: ignore[attr-defined]
        if ds_a.qrels_digest == ctx.ds.qrels_digest and ds_a.topics_fingerprint == ctx.ds.topics_fingerprint:
            raise ConfigError(
                f"encoder.train={e.train} is the dataset being scored. Fix: encoder.train=crossfit (each "
                f"fold's queries ranked by an encoder trained on the other folds)."
            )
        parts = [{"name": "all", "ranks": list(ctx.ds.query_ids), "train": positives(ds_a)}]
    ta = texts(ds_a, ctx.cfg) if ds_a is not ctx.ds else (sq, sd)
    for p in parts:
        mine = scored[scored["query_id"].isin(p["ranks"])]
        q_side = {q: sq[q] for q in p["ranks"]}
        if ds_a is ctx.ds:
            t_side = leakage.Judged({q: sq[q] for q in set(p["train"]["query_id"])}, sd, p["train"])
        else:
            t_side = leakage.Judged(ta[0], ta[1], p["train"][["query_id", "doc_id"]])
        s_side = leakage.Judged(q_side, sd, mine[["query_id", "doc_id"]])
        found = leakage.audit(t_side, s_side)
        p["dropped"] = 0
        if found.refused and ft["leakage"] == "drop":
            kept = leakage.without_overlap(t_side, s_side)
            p["dropped"] = int(len(p["train"]) - len(kept))
            p["train"] = p["train"].loc[kept.index]
        else:
            leakage.check(found, f"encoder.train={e.train} ({p['name']})")
        p["audit"] = found
        trained = t_side if not p["dropped"] else leakage.Judged(t_side.queries, t_side.documents, p["train"])
        p["shown"] = dict.fromkeys(p["ranks"], leakage.shown_documents(trained, s_side))
    return parts, ds_a, ctx_a


def label(train: str) -> str:
    return "crossfit" if train == "crossfit" else (Path(train).name or train)


# ----------------------------------------------------------------------------- artifacts
def model_node(ctx: Context, ctx_a: Context, ds_a, part: dict, moved: bool = False) -> Artifact:
    e, ft = ctx.cfg.encoder, settings(ctx.cfg)
    params = {
        **{k: v for k, v in dense.encoder_params(e).items() if k != "dtype"},
        "query_prefix": e.query_prefix or "",
        "doc_prefix": e.doc_prefix or "",
        "target_view": str(ctx.cfg.target_fields),
        "train": label(str(e.train)),
        "fold": part["name"],
        # the dtype that trains keys the model (auto resolves by machine, like encoder.dtype)
        "finetune": {**{k: v for k, v in ft.items() if k != "identity"}, "dtype": train_dtype(ctx.cfg)},
        "moved": moved,
    }
    environment = {
        **dense.encoder_env(ctx, MODEL_VERSION),
        "sentence_transformers": env.version("sentence-transformers"),
        "transformers": env.version("transformers"),
    }
    art = Artifact(stage.ENCODER_MODEL, params, (ctx_a.qrels_node, ctx_a.topics_node, ctx_a.corpus_node), environment)

    def build(tmp: Path) -> dict:
        train = part["train"]
        if moved:
            q3 = dict(zip(ds_a.queries[S.QUERY_ID], ds_a.queries[S.IPC3]))
            train = finetune.moved_positives(train, q3, ds_a.doc_ipc3, int(ft["seed"]))
        qt, dt = texts(ds_a, ctx.cfg)
        qt = {q: f"{e.query_prefix or ''}{t}" for q, t in qt.items()}
        dt = {d: f"{e.doc_prefix or ''}{t}" for d, t in dt.items()}
        negatives = None
        if ft["negatives"] == "mined":
            negatives = _mined(ctx, ds_a, train, qt, dt, int(ft["mine_depth"]), int(ft["seed"]))
        ex = finetune.examples(train, qt, dt, int(ft["out_weight"]), negatives)
        device = dense.usable_device(str(e.device))
        meta = finetune.train(
            dense.resolve_model(e.model, e.revision),
            ex,
            tmp,
            int(e.max_length),
            int(ft["epochs"]),
            int(ft["batch_size"]),
            float(ft["learning_rate"]),
            float(ft["warmup"]),
            int(ft["seed"]),
            int(ft["max_steps"]),
            train_dtype(ctx.cfg),
            device,
        )
        return {**meta, "dropped_pairs": part["dropped"], "trained_on": ds_a.name}

    what = "moved positives (identity check)" if moved else "judgments"
    return ctx.ensure(art, build, f"encoder fine-tuned on {label(str(e.train))} {part['name']} ({what})")


def _mined(ctx: Context, ds_a, train: pd.DataFrame, qt: dict, dt: dict, depth: int, seed: int) -> dict:
    """Hard negatives by the base encoder (the experiment's, untuned)."""
    qids = sorted(set(train["query_id"].astype(str)))
    dids = sorted(dt)
    enc = ctx.encoder
    q_emb = enc.encode([qt[q] for q in qids], desc="mine: queries", truncates=True)
    d_emb = enc.encode([dt[d] for d in dids], desc="mine: documents", truncates=True)
    return finetune.mine(q_emb, qids, d_emb, dids, train, depth, seed)


def index(ctx: Context, units: Artifact) -> Artifact:
    """The Faiss artifact of a fine-tuned encoder: one sub-index per model, and which queries each
    ranks; with ``finetune.identity``, its identity check, whose moved-positive twin trains on the
    same groups. (Dense.index hands over here when ``encoder.train`` is set.)"""
    e = ctx.cfg.encoder
    if units.params["granularity"] != "document":
        raise ConfigError(
            f"encoder.train={e.train}: fine-tuned encoders run at document level. Fix: granularity=document."
        )
    parts, ds_a, ctx_a = groups(ctx)
    art = faiss_node(ctx, units, parts, ds_a, ctx_a)
    if settings(ctx.cfg)["identity"]:
        identity_node(ctx, units, art, faiss_node(ctx, units, parts, ds_a, ctx_a, moved=True))
    return art


def faiss_node(ctx: Context, units: Artifact, parts: list[dict], ds_a, ctx_a: Context, moved: bool = False) -> Artifact:
    """One model per group (trained on moved positives for the identity check), its embeddings, and
    the Faiss artifact that holds a sub-index each."""
    e = ctx.cfg.encoder
    embs = []
    for p in parts:
        model = model_node(ctx, ctx_a, ds_a, p, moved)
        params = {**dense.encoder_params(e), "doc_prefix": e.doc_prefix or "", "fold": p["name"]}
        emb = Artifact(stage.EMBEDDINGS, params, (units, model), dense.encoder_env(ctx, dense.EMBED_VERSION))
        ctx.ensure(emb, encoding(ctx, units, ctx.store.path(model)), f"embeddings ({p['name']} encoder)")
        embs.append(emb)
    q = str(ctx.cfg.dense.quantization)
    art = Artifact(
        stage.FAISS,
        {"type": "flat_ip", "quantization": q, "folds": [p["name"] for p in parts]},
        tuple(embs),
        {"stage": dense.FAISS_VERSION, "faiss": env.version("faiss-cpu") or env.version("faiss-gpu")},
    )

    def build(tmp: Path) -> dict:
        out: dict = {"folds": {}}
        for p, emb in zip(parts, embs):
            (tmp / p["name"]).mkdir()
            out["folds"][p["name"]] = dense.build_faiss(ctx.store.path(emb), tmp / p["name"], q)
        (tmp / "folds.json").write_text(json.dumps({p["name"]: p["ranks"] for p in parts}))
        (tmp / "shown.json").write_text(json.dumps({q: s for p in parts for q, s in p["shown"].items()}))
        audits = [p["audit"].columns() for p in parts]
        return {
            "index_seconds": round(sum(v["index_seconds"] for v in out["folds"].values()), 3),
            "train": label(str(e.train)),
            "leakage": {k: sum(a[k] for a in audits) for k in audits[0] if k != "leakage_shared_positive_share"}
            | {
                "leakage_shared_positive_share": round(
                    sum(a["leakage_shared_positives"] for a in audits)
                    / max(1, sum(a["leakage_scored_positives"] for a in audits)),
                    4,
                ),
                "finetune_dropped_pairs": sum(p["dropped"] for p in parts),
            },
        }

    return ctx.ensure(art, build, "Faiss indexes (fine-tuned encoders)")


def encoding(ctx: Context, units: Artifact, model_dir: Path):
    """The build of one fine-tuned encoder's embeddings of the units (whole documents)."""
    prefix = ctx.cfg.encoder.doc_prefix or ""
    return lambda tmp: dense.encode_units(ctx.store.path(units), tmp, loaded(ctx, model_dir), prefix, True)


def loaded(ctx: Context, model_dir: Path) -> dense.Encoder:
    """The fine-tuned encoder in ``model_dir``, loaded once per process, with the experiment's
    encoder settings (length, pooling, dtype ...)."""
    key = str(model_dir)
    if key not in _LOADED:
        e = OmegaConf.to_container(ctx.cfg.encoder, resolve=True, enum_to_str=True)
        assert isinstance(e, dict)
        _LOADED[key] = dense.make_encoder(OmegaConf.create({**e, "model": key, "revision": None}))
    return _LOADED[key]


def encoders_of(ctx: Context, index: Artifact) -> dict[str, dense.Encoder]:
    """Each sub-index's encoder: the model its embeddings hang below."""
    return {emb.params["fold"]: loaded(ctx, ctx.store.path(emb.parents[1])) for emb in index.parents}


def search(ctx: Context, index: Artifact, topics: dict[str, str], prefix: str, depth: int, prf: dict | None):
    """Each model's queries searched in its own sub-index (the run as one table)."""
    folder = ctx.store.path(index)
    ranks = json.loads((folder / "folds.json").read_text())
    runs, seconds, empty = [], 0.0, []
    for name, enc in encoders_of(ctx, index).items():
        mine = {q: topics[q] for q in ranks[name] if q in topics}
        run, s, e = dense.search(folder / name, mine, enc, prefix, depth, ctx.cfg.search.threads, prf)
        runs.append(run)
        seconds += s
        empty += e
    return pd.concat(runs, ignore_index=True), seconds, empty


# ----------------------------------------------------------------------------- the identity check
def identity_node(ctx: Context, units: Artifact, tuned: Artifact, moved: Artifact) -> Artifact:
    """Base, fine-tuned and moved-positive encoders on the same queries: gains on all positives and
    on never-shown ones (module docstring)."""
    base_cfg = OmegaConf.create(OmegaConf.to_container(ctx.cfg, resolve=True))
    with open_dict(base_cfg):
        base_cfg.encoder.train = None
    base = dense.BACKEND.index(ctx.part(base_cfg), units)  # type: ignore[attr-defined]
    art = Artifact(
        stage.ENCODER_IDENTITY,
        {"query_view": str(settings(ctx.cfg)["query_fields"]), "depth": 100},  # the view it trained on
        (tuned, moved, base, ctx.topics_node, ctx.qrels_node),
        {"stage": IDENTITY_VERSION, **env.scorer(IDENTITY_VERSION)},
    )

    def build(tmp: Path) -> dict:
        topics = V.query_texts(ctx.ds.queries, str(settings(ctx.cfg)["query_fields"]))
        prefix = ctx.cfg.encoder.query_prefix or ""
        runs = {
            "tuned": search(ctx, tuned, topics, prefix, 100, None)[0],
            "moved": search(ctx, moved, topics, prefix, 100, None)[0],
            "base": dense.search(ctx.store.path(base), topics, ctx.encoder, prefix, 100, ctx.cfg.search.threads)[0],
        }
        shown = {q: set(v) for q, v in json.loads((ctx.store.path(tuned) / "shown.json").read_text()).items()}
        result = identity(runs, ctx.ds, shown)
        pd.DataFrame(result.pop("per_query")).to_csv(tmp / "per_query.csv", index=False)
        return result

    return ctx.ensure(art, build, "identity check (fine-tuned encoder)")


def identity(runs: dict[str, pd.DataFrame], ds, shown: dict[str, set], alpha: float = 0.05) -> dict:
    """nDCG@100 gains over the base encoder, per subset, of the fine-tuned and the moved-positive
    encoders, on all positives and on never-shown ones. Passed when both conditions of the identity
    check hold: (a) trained on moved positives, the gain vanishes (the moved model's ALL gain is not
    significantly above 0: one-sided paired t-test at ``alpha``); (b) the fine-tuned model's gain
    shows where it cannot come from knowing which documents are cited (its ALL gain on never-shown
    positives is above 0). ``failed``: the conditions that did not hold, in words."""
    from scipy.stats import ttest_1samp

    out: dict = {"per_query": []}
    for view in ("all", "never_shown"):
        for s in ("ALL", "IN", "OUT"):
            qrels = ds.judgments(s)
            tables = {}
            for name, run in runs.items():
                r, q = (run, qrels) if view == "all" else finetune.never_shown(run, qrels, shown)
                pq = evaluate.per_query(r, q, ["nDCG@100"]).set_index("query_id")["value"]
                tables[name] = pq
                out["per_query"] += [
                    {"view": view, "subset": s, "encoder": name, "query_id": k, "value": v} for k, v in pq.items()
                ]
            common = tables["base"].index
            for name in ("tuned", "moved"):
                gain = (
                    float((tables[name].reindex(common, fill_value=0) - tables["base"]).mean()) if len(common) else 0.0
                )
                out[f"{view}_{name}_gain_{s}"] = round(gain, 4)
            out[f"{view}_base_{s}"] = round(float(tables["base"].mean()), 4) if len(common) else None
            if view == "all" and s == "ALL":
                d = tables["moved"].reindex(common, fill_value=0) - tables["base"]
                if len(common) > 1 and d.std() > 1e-9:
                    p = float(ttest_1samp(d, 0.0, alternative="greater").pvalue)
                else:  # every query moved alike: a gain is as sure as it gets, none is none
                    p = 0.0 if len(common) and d.mean() > 1e-9 else 1.0
                out["moved_p"] = round(p, 4)
    failed = []
    if out["moved_p"] < alpha:
        failed.append(
            f"trained on moved positives it still gains (ALL {out['all_moved_gain_ALL']:+.4f}, p {out['moved_p']})"
        )
    if not out["never_shown_tuned_gain_ALL"] > 0:
        failed.append(
            f"no gain on never-shown positives (ALL {out['never_shown_tuned_gain_ALL']:+.4f}, against "
            f"{out['all_tuned_gain_ALL']:+.4f} on all): it learned which documents are cited"
        )
    out["failed"] = failed
    out["passed"] = not failed
    return out


def row_columns(store, nodes: list[Artifact], run_file: Path, ds) -> dict:
    """The results row's fine-tuning columns: the identity check's gains and verdict, and the final
    run's never-shown view (the positives whose document no model that ranked the query saw)."""
    ids = [n for n in nodes if n.kind == stage.ENCODER_IDENTITY]
    tuned = [
        n
        for n in nodes
        if n.kind == stage.FAISS and "folds" in n.params and not n.parents[0].parents[1].params.get("moved")
    ]
    if not tuned:
        return {}
    run = read_trec(run_file)
    shown: dict[str, set] = {}
    for t in tuned:
        for q, docs in json.loads((store.path(t) / "shown.json").read_text()).items():
            shown.setdefault(q, set()).update(docs)
    out: dict = {"finetune_train": "+".join(sorted({store.meta(t).get("train", "") for t in tuned}))}
    out.update(store.meta(tuned[0]).get("leakage", {}))  # the audit of the (first) fine-tuned encoder's training
    for s, (mean, n) in never_shown_view(run, ds, shown).items():
        out[f"never_shown_nDCG@100/{s}"] = None if mean is None else round(mean, 4)
        out[f"never_shown_queries_{s}"] = n
    for n in ids:
        m = store.meta(n)
        out["finetune_identity"] = "passed" if m.get("passed") else "FAILED: " + "; ".join(m.get("failed", []))
        out["finetune_identity_moved_p"] = m.get("moved_p")
        for k in (
            "all_tuned_gain_ALL",
            "all_moved_gain_ALL",
            "never_shown_tuned_gain_ALL",
            "never_shown_tuned_gain_OUT",
            "all_tuned_gain_OUT",
        ):
            out[f"finetune_{k}"] = m.get(k)
    return out


# ----------------------------------------------------------------------------- the view of any row
def never_shown_view(run: pd.DataFrame, ds, shown: dict[str, set], metric: str = "nDCG@100") -> dict:
    """``{subset: (mean, queries)}`` of the never-shown view (:func:`harness.finetune.never_shown`)."""
    out = {}
    for s in ("ALL", "IN", "OUT"):
        r, q = finetune.never_shown(run, ds.judgments(s), shown)
        pq = evaluate.per_query(r, q, [metric])
        out[s] = (float(pq["value"].mean()) if len(pq) else None, int(pq["query_id"].nunique()))
    return out


@dataclass
class FinetuneConf:
    """How an encoder is fine-tuned where ``encoder.train`` is set (the ``finetune`` group,
    conf/finetune/mnrl.yaml; these defaults without it)."""

    loss: str = "mnrl"
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup: float = 0.1
    seed: int = 0
    negatives: str = "in_batch"  # in_batch | mined
    mine_depth: int = 30
    out_weight: int = 1
    max_steps: int = 0
    dtype: str = "auto"  # auto (bfloat16 where native: bench/finetune.py) | float32 | bfloat16
    folds: int = 5
    identity: bool = True
    leakage: str = "refuse"  # refuse | drop
    query_fields: str = "TA"  # the query view it trains on (every run's view is ranked by it)


def check(cfg) -> None:
    """``encoder.train`` and the ``finetune`` group: document level, unsharded, known choices."""
    train = cfg.encoder.get("train")
    if not train:
        return
    if str(cfg.granularity) != "document":
        raise ConfigError(
            f"encoder.train={train}: fine-tuned encoders run at document level (a passage's judgments are its "
            f"family's). Fix: granularity=document."
        )
    if int(cfg.shards) > 1:
        raise ConfigError(f"encoder.train={train}: fine-tuned encodings are not sharded. Fix: shards=1.")
    ft = cfg.get("finetune")
    if ft is None:
        return
    choices = {
        "loss": ("mnrl",),
        "negatives": ("in_batch", "mined"),
        "dtype": ("float32", "bfloat16", "auto"),
        "leakage": ("refuse", "drop"),
        "query_fields": ("T", "TA", "TAC", "KW"),
    }
    for k, allowed in choices.items():
        if str(ft[k]) not in allowed:
            raise ConfigError(f"finetune.{k}={ft[k]}: expected one of {list(allowed)}.")
    for k in ("epochs", "batch_size", "mine_depth", "out_weight", "folds"):
        positive_int(ft[k], f"finetune.{k}")
    if ft.batch_size < 2:
        raise ConfigError(f"finetune.batch_size={ft.batch_size}: in-batch negatives need at least 2. Fix: 16.")
    if not (0 < float(ft.learning_rate) < 1) or not (0 <= float(ft.warmup) < 1) or int(ft.max_steps) < 0:
        raise ConfigError(
            f"finetune: learning_rate={ft.learning_rate} (0..1), warmup={ft.warmup} (0..1), max_steps="
            f"{ft.max_steps} (>= 0): one is out of range. Fix: conf/finetune/mnrl.yaml's values."
        )


MODEL = register(
    Stage(
        stage.ENCODER_MODEL,
        "indexes",
        "fine-tuned encoders",
        MODEL_VERSION,
        group="finetune",
        cost="finetune",
        schema=FinetuneConf,
        check=check,
    )
)
dense.TUNED = sys.modules[__name__]  # Dense hands fine-tuned encoders over here (a plug-in: dense never imports this)
IDENTITY = register(
    Stage(stage.ENCODER_IDENTITY, "runs", "identity checks (fine-tuned encoders)", IDENTITY_VERSION, cost="free")
)
