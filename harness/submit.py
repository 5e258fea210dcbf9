"""Package chosen runs into one submission folder.

    python -m harness.submit --out submission/ doc_bm25 rrf_doc [--results $HARNESS_ROOT/runs/results.jsonl]

For each system (experiment name, run tag or scores key in the results table): the run file,
validated (format, one tag, no duplicates, ranks vs scores, <= 100 per topic, known qids and
docids), copied as ``<tag>.trec``; its resolved Hydra config as ``<tag>.config.yaml``; its manifest
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

from .store import write_text_atomic


def dataset_of(results: Path, row: dict):
    """The dataset a results row was scored on, reloaded from its resolved config, with the
    artifact root the results table lives in (``<root>/runs/results.jsonl``)."""
    from omegaconf import OmegaConf

    from . import data

    return data.load(OmegaConf.create(row["config"]["dataset"]), Path(results).resolve().parent.parent)


def package(results: Path, names: list[str], out: Path, dataset=None) -> Path:
    """Validate the named runs against their dataset and copy them, with configs and manifests."""
    from .results import find, scores_dir
    from .validate_run import validate

    chosen = [find(results, name) for name in names]
    manifests = [json.loads((scores_dir(results, r) / "manifest.json").read_text()) for r in chosen]
    tags = [m["tag"] for m in manifests]
    dup = sorted({t for t in tags if tags.count(t) > 1})
    if dup:
        raise SystemExit(f"runs share the tag(s) {dup}: their files would overwrite each other. Fix: name each "
                         f"system once (the same configuration twice has one tag).")
    for r in chosen:
        ds = dataset if dataset is not None else dataset_of(results, r)
        problems = validate(r["run_file"], None, 100, set(ds.query_ids), set(ds.doc_ipc3))
        if problems:
            raise SystemExit(f"{r['run_file']} is not a valid submission: " + "; ".join(map(str, problems[:5])))
    out.mkdir(parents=True, exist_ok=True)
    from .report import metric_cols, metrics_of

    cols = metric_cols(metrics_of(chosen))
    readme = ["# Submission", "", "| run | experiment | " + " | ".join(cols) + " | config hash |",
              "|---|---|" + "---|" * len(cols) + "---|"]
    for r, man in zip(chosen, manifests):
        # One manifest per experiment: the scores artifact is shared by identical configurations
        # under other names, so its name and config are this row's own.
        man = {**man, "experiment": r.get("experiment"), "config": r["config"]}
        tag = man["tag"]
        shutil.copyfile(r["run_file"], out / f"{tag}.trec")
        write_text_atomic(out / f"{tag}.config.yaml", OmegaConf.to_yaml(OmegaConf.create(man["config"])))
        write_text_atomic(out / f"{tag}.manifest.json", json.dumps(man, indent=2, sort_keys=True) + "\n")
        readme.append(f"| {tag} | {r.get('experiment')} | " + " | ".join(_f(r, c) for c in cols)
                      + f" | {man['config_hash']} |")
    readme += ["", "Run files are TREC format (`qid Q0 docid rank score tag`), 100 families per topic, validated by "
               "`python -m harness.validate_run` against the dataset's topics and documents. Each run's resolved Hydra "
               "config and manifest (versions, dataset revision, model, checksums, timings) sit beside it; "
               "`python -m harness.run` with that config reproduces it."]
    write_text_atomic(out / "README.md", "\n".join(readme) + "\n")
    return out


def _f(row: dict, key: str) -> str:
    v = row.get(key)
    return f"{v:.4f}" if isinstance(v, (int, float)) else "-"


def main(argv=None) -> int:
    from .store import default_results

    ap = argparse.ArgumentParser(description="Package runs into a submission folder.")
    ap.add_argument("systems", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--results", type=Path, default=None, help="default: $HARNESS_ROOT/runs/results.jsonl")
    a = ap.parse_args(argv)
    print(package(a.results or default_results(), a.systems, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
