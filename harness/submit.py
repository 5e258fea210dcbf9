"""Package chosen runs into one submission folder.

    python -m harness.submit --out submission/ doc_bm25 rrf_doc [--results $HARNESS_ROOT/runs/results.jsonl]

For each system (experiment name, run tag or scores key in the results table): the run file,
validated (format, one tag, no duplicates, ranks vs scores, known qids and docids), copied as
``<tag>.trec`` with at most 100 families per topic (a deeper run is cut to its top 100, the families
the measures at 100 score); its resolved Hydra config as ``<tag>.config.yaml``; its manifest
as ``<tag>.manifest.json``; plus a README listing the runs and their scores. Nothing is written
if any run is invalid.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from omegaconf import OmegaConf

from . import data
from .files import damage, file_checksum
from .report import metric_cols, metrics_of
from .results import find, scores_dir
from .runs import read_trec, top_k, write_trec
from .store import default_results, write_text_atomic
from .validate_run import validate

SUBMIT_K = 100  # families per topic in a submission (TREC; DAPFAM's measures are at 100)


def dataset_of(results: Path, row: dict):
    """The dataset a results row was scored on, reloaded from its resolved config, with the
    artifact root the results table lives in (``<root>/runs/results.jsonl``)."""

    return data.load(OmegaConf.create(row["config"]["dataset"]), Path(results).resolve().parent.parent)


def package(
    results: Path, names: list[str], out: Path, dataset=None, dataset_name: str | None = None, where=()
) -> Path:
    """Verify the named runs (the files their scores were computed on: size and SHA-256 against
    their artifact's meta.json and the scores' manifest), validate them against their dataset's
    topics and documents, and copy them with configs and manifests. Rows are named as in
    ``compare`` (``dataset_name``, ``where``)."""

    chosen = [find(results, name, dataset_name, where) for name in names]
    manifests = [json.loads((scores_dir(results, r) / "manifest.json").read_text()) for r in chosen]
    tags = [m["tag"] for m in manifests]
    dup = sorted({t for t in tags if tags.count(t) > 1})
    if dup:
        raise SystemExit(
            f"runs share the tag(s) {dup}: their files would overwrite each other. Fix: name each "
            f"system once (the same configuration twice has one tag)."
        )
    runs = [Path(r["run_file"]) for r in chosen]  # read_rows located each under this root
    for r, run, man in zip(chosen, runs, manifests):
        problem = run_damage(run, man)
        if problem:
            raise SystemExit(
                f"{run}: {problem}, so its scores are not this file's. Fix: python -m harness.run with "
                f"the experiment's config rebuilds it (it detects the damage), then submit again."
            )
        ds = dataset if dataset is not None else dataset_of(results, r)
        problems = validate(run, None, None, set(ds.query_ids), set(ds.doc_ipc3))  # depth: cut below
        if problems:
            raise SystemExit(f"{run} is not a valid submission: " + "; ".join(map(str, problems[:5])))
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out} is a file. Fix: name a folder (new or existing).")
    out.mkdir(parents=True, exist_ok=True)

    cols = metric_cols(metrics_of(chosen))
    readme = [
        "# Submission",
        "",
        "| run | experiment | " + " | ".join(cols) + " | config hash |",
        "|---|---|" + "---|" * len(cols) + "---|",
    ]
    for r, run, man in zip(chosen, runs, manifests):
        # One manifest per experiment: the scores artifact is shared by identical configurations
        # under other names, so its name and config are this row's own.
        man = {**man, "experiment": r.get("experiment"), "config": r["config"]}
        tag = man["tag"]
        table = read_trec(run)
        if table.groupby("query_id").size().max() > SUBMIT_K:  # a deep run (search.k > 100): its top 100
            write_trec(top_k(table, SUBMIT_K), out / f"{tag}.trec", tag)
            man = {**man, "submitted_per_topic": SUBMIT_K}
        else:
            shutil.copyfile(run, out / f"{tag}.trec")
        problems = validate(out / f"{tag}.trec", None, SUBMIT_K)
        if problems:
            raise SystemExit(f"{out / f'{tag}.trec'} is not a valid submission: " + "; ".join(map(str, problems[:5])))
        write_text_atomic(out / f"{tag}.config.yaml", OmegaConf.to_yaml(OmegaConf.create(man["config"])))
        write_text_atomic(out / f"{tag}.manifest.json", json.dumps(man, indent=2, sort_keys=True) + "\n")
        readme.append(
            f"| {tag} | {r.get('experiment')} | " + " | ".join(_f(r, c) for c in cols) + f" | {man['config_hash']} |"
        )
    readme += [
        "",
        "Run files are TREC format (`qid Q0 docid rank score tag`), 100 families per topic (a deeper run, "
        "e.g. search.k=300 for deep candidates, is cut to its top 100: what the measures at 100 score), validated by "
        "`python -m harness.validate_run` against the dataset's topics and documents. Each run's resolved Hydra "
        "config and manifest (versions, dataset revision, model, checksums, timings) sit beside it; "
        "`python -m harness.run` with that config reproduces it.",
    ]
    write_text_atomic(out / "README.md", "\n".join(readme) + "\n")
    return out


def run_damage(run: Path, manifest: dict) -> str | None:
    """Why ``run`` is not the file that was scored: missing, another size or SHA-256 than its
    artifact's meta.json lists, or another SHA-256 than the scores' manifest names."""

    try:
        meta = json.loads((run.parent / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"its meta.json is unreadable ({e})"
    problem = damage(run.parent, {k: v for k, v in meta.get("files", {}).items() if k == run.name}, checksums=True)
    if problem is None and manifest.get("run_file_sha256") not in (None, file_checksum(run)):
        problem = "its SHA-256 is not the one its scores' manifest names"
    return problem


def _f(row: dict, key: str) -> str:
    v = row.get(key)
    return f"{v:.4f}" if isinstance(v, (int, float)) else "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Package runs into a submission folder.")
    ap.add_argument("systems", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--results", type=Path, default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    ap.add_argument("--dataset", default=None, help="only rows of this dataset (name or dataset.path)")
    ap.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only rows with this value (results column or dotted config key); repeatable",
    )
    a = ap.parse_args(argv)
    print(package(a.results or default_results(), a.systems, a.out, dataset_name=a.dataset, where=a.where))
    return 0


if __name__ == "__main__":
    sys.exit(main())
