"""Package chosen runs into one submission folder.

    python -m harness.submit --out submission/ doc_bm25 rrf_doc [--results runs/results.jsonl]

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


def package(results: Path, names: list[str], out: Path, dataset=None) -> Path:
    from .results import find, scores_dir
    from .validate_run import validate

    chosen = [find(results, name) for name in names]
    qids = docids = None
    if dataset is not None:
        qids, docids = set(dataset.query_ids), set(dataset.doc_ipc3)
    for r in chosen:
        problems = validate(r["run_file"], None, 100, qids, docids)
        if problems:
            raise SystemExit(f"{r['run_file']} is not a valid submission: " + "; ".join(map(str, problems[:5])))
    out.mkdir(parents=True, exist_ok=True)
    readme = ["# Submission", "", "| run | nDCG@100 ALL | IN | OUT | R@100 ALL | config hash |", "|---|---|---|---|---|---|"]
    for r in chosen:
        man = json.loads((scores_dir(results, r) / "manifest.json").read_text())
        tag = man["tag"]
        shutil.copyfile(r["run_file"], out / f"{tag}.trec")
        write_text_atomic(out / f"{tag}.config.yaml", OmegaConf.to_yaml(OmegaConf.create(man["config"])))
        write_text_atomic(out / f"{tag}.manifest.json", json.dumps(man, indent=2, sort_keys=True) + "\n")
        readme.append(f"| {tag} | {r['nDCG@100/ALL']:.4f} | {r['nDCG@100/IN']:.4f} | {r['nDCG@100/OUT']:.4f} | "
                      f"{r['R@100/ALL']:.4f} | {man['config_hash']} |")
    readme += ["", "Run files are TREC format (`qid Q0 docid rank score tag`), 100 families per topic, validated by "
               "`python -m harness.validate_run`. Each run's resolved Hydra config and manifest (versions, dataset "
               "revision, model, checksums, timings) sit beside it; `python -m harness.run` with that config "
               "reproduces it."]
    write_text_atomic(out / "README.md", "\n".join(readme) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Package runs into a submission folder.")
    ap.add_argument("systems", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--results", type=Path, default=Path("runs/results.jsonl"))
    a = ap.parse_args(argv)
    print(package(a.results, a.systems, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
