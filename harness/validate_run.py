"""Validate a TREC run file before submitting it or scoring it.

    python -m harness.validate_run FILE [--tag TAG] [--max-per-topic 100]
        [--dataset local --path DIR | --dataset mini] [--qrels-ids]

Checks, each reported with its line number: six columns (``qid Q0 docid rank score tag``),
numeric score, integer rank, one tag in the whole file (and the expected one, if given), no
duplicate (qid, docid), ranks that agree with scores (rank 1 = highest score, increasing ranks
never with a higher score), at most N documents per topic, and, with a dataset, qids and docids
that the dataset knows. Exit status 1 when any error is found.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Problem:
    line: int
    message: str

    def __str__(self):
        return f"line {self.line}: {self.message}" if self.line else self.message


def validate(path: str | Path, tag: str | None = None, max_per_topic: int | None = 100,
             qids: set | None = None, docids: set | None = None, max_problems: int = 1000) -> list[Problem]:
    path = Path(path)
    problems: list[Problem] = []
    if not path.exists():
        return [Problem(0, f"{path}: no such file")]
    seen: dict = {}
    per_topic: dict = {}
    last: dict = {}  # qid -> (rank, score, line)
    file_tag = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if len(problems) >= max_problems:
                problems.append(Problem(0, f"stopped after {max_problems} problems"))
                break
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                problems.append(Problem(n, f"expected 6 columns 'qid Q0 docid rank score tag', found {len(parts)}"))
                continue
            qid, q0, docid, rank_s, score_s, run_tag = parts
            if q0 != "Q0":
                problems.append(Problem(n, f"second column should be 'Q0', found {q0!r}"))
            try:
                rank = int(rank_s)
            except ValueError:
                problems.append(Problem(n, f"rank {rank_s!r} is not an integer"))
                continue
            try:
                score = float(score_s)
                if score != score:
                    raise ValueError
            except ValueError:
                problems.append(Problem(n, f"score {score_s!r} is not a number"))
                continue
            if file_tag is None:
                file_tag = run_tag
                if tag is not None and run_tag != tag:
                    problems.append(Problem(n, f"tag {run_tag!r} differs from the expected tag {tag!r}"))
            elif run_tag != file_tag:
                problems.append(Problem(n, f"tag {run_tag!r} differs from the file's tag {file_tag!r} (line 1 of the run)"))
            if (qid, docid) in seen:
                problems.append(Problem(n, f"duplicate document {docid!r} for topic {qid!r} (first at line {seen[(qid, docid)]})"))
            else:
                seen[(qid, docid)] = n
            per_topic[qid] = per_topic.get(qid, 0) + 1
            if max_per_topic and per_topic[qid] == max_per_topic + 1:
                problems.append(Problem(n, f"topic {qid!r} has more than {max_per_topic} documents"))
            if qid in last:
                prank, pscore, pline = last[qid]
                if rank <= prank:
                    problems.append(Problem(n, f"rank {rank} does not increase after rank {prank} (line {pline}) for topic {qid!r}"))
                elif score > pscore:
                    problems.append(Problem(n, f"ranks disagree with scores: rank {rank} has score {score} > {pscore} "
                                               f"at rank {prank} (line {pline}) for topic {qid!r}"))
            last[qid] = (rank, score, n)
            if qids is not None and qid not in qids:
                problems.append(Problem(n, f"unknown topic {qid!r} (not a query of the dataset)"))
            if docids is not None and docid not in docids:
                problems.append(Problem(n, f"unknown document {docid!r} (not in the dataset's corpus)"))
    if not seen and not problems:
        problems.append(Problem(0, f"{path}: the run is empty"))
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Validate a TREC run file.")
    ap.add_argument("run")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--max-per-topic", type=int, default=100)
    ap.add_argument("--dataset", choices=["local", "beir", "mini"], default=None,
                    help="check qids and docids against this dataset")
    ap.add_argument("--path", default=None, help="dataset folder for --dataset local|beir")
    a = ap.parse_args(argv)
    qids = docids = None
    if a.dataset:
        from . import data

        ds = (data.load_local(a.path) if a.dataset == "local" else data.load_beir(a.path) if a.dataset == "beir"
              else _mini())
        qids, docids = set(ds.query_ids), set(ds.doc_ipc3)
    problems = validate(a.run, a.tag, a.max_per_topic, qids, docids)
    for p in problems:
        print(f"{a.run}: {p}")
    if problems:
        print(f"{a.run}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{a.run}: valid")
    return 0


def _mini():
    from omegaconf import OmegaConf

    from . import data

    return data.load(OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "dataset" / "mini.yaml"))


if __name__ == "__main__":
    sys.exit(main())
