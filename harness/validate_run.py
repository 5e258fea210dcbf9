"""Validate a TREC run file before submitting it or scoring it.

    python -m harness.validate_run FILE [--tag TAG] [--max-per-topic 100]
        [--dataset local --path DIR | --dataset beir --path DIR | --dataset mini] [--strict]

Checks, each reported with its line number: six columns (``qid Q0 docid rank score tag``), a
finite numeric score, ranks 1..n in file order within each topic, one tag in the whole file (and
the expected one, if given), no duplicate (qid, docid), ranks that agree with scores (rank 1 =
highest score, increasing ranks never with a higher score), at most N documents per topic, and,
with a dataset, qids and docids that the dataset knows. With a dataset, topics of the dataset
that the run does not cover are reported (count and examples); ``--strict`` makes that an error.
Exit status 1 when any error is found, 2 when the file or dataset cannot be read.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from . import data
from .data.digest import default_cache
from .data.schema import DataError
from .store import default_root


@dataclass
class Problem:
    line: int
    message: str

    def __str__(self):
        return f"line {self.line}: {self.message}" if self.line else self.message


def validate(
    path: str | Path,
    tag: str | None = None,
    max_per_topic: int | None = 100,
    qids: set | None = None,
    docids: set | None = None,
    max_problems: int = 1000,
) -> list[Problem]:
    path = Path(path)
    problems: list[Problem] = []
    if not path.exists():
        return [Problem(0, f"{path}: no such file")]
    if not path.is_file():
        return [Problem(0, f"{path}: not a file (a directory?). Fix: give the path of a TREC run file")]
    seen: dict = {}
    per_topic: dict = {}
    last: dict = {}  # qid -> (rank, score, line)
    file_tag = None
    with open(path, "rb") as f:
        if f.read(3) == b"\xef\xbb\xbf":  # one cause, not one problem per line of the first topic
            return [
                Problem(
                    1,
                    f"{path} starts with a UTF-8 byte order mark (BOM), which makes the first topic id "
                    f"'\\ufeff<qid>'. Fix: save the file as UTF-8 without BOM (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' "
                    f"{path.name})",
                )
            ]
    with open(path, encoding="utf-8") as f:
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
            except ValueError:
                problems.append(Problem(n, f"score {score_s!r} is not a number"))
                continue
            if not math.isfinite(score):
                problems.append(Problem(n, f"score {score_s!r} is not a finite number"))
                continue
            expected_rank = per_topic.get(qid, 0) + 1
            if rank != expected_rank:
                problems.append(
                    Problem(
                        n, f"rank {rank} for topic {qid!r}: ranks must run 1..n in file order, expected {expected_rank}"
                    )
                )
            if file_tag is None:
                file_tag = run_tag
                if tag is not None and run_tag != tag:
                    problems.append(Problem(n, f"tag {run_tag!r} differs from the expected tag {tag!r}"))
            elif run_tag != file_tag:
                problems.append(
                    Problem(n, f"tag {run_tag!r} differs from the file's tag {file_tag!r} (line 1 of the run)")
                )
            if (qid, docid) in seen:
                problems.append(
                    Problem(n, f"duplicate document {docid!r} for topic {qid!r} (first at line {seen[(qid, docid)]})")
                )
            else:
                seen[(qid, docid)] = n
            per_topic[qid] = per_topic.get(qid, 0) + 1
            if max_per_topic and per_topic[qid] == max_per_topic + 1:
                problems.append(Problem(n, f"topic {qid!r} has more than {max_per_topic} documents"))
            if qid in last:
                prank, pscore, pline = last[qid]
                if score > pscore:
                    problems.append(
                        Problem(
                            n,
                            f"ranks disagree with scores: rank {rank} has score {score} > {pscore} "
                            f"at rank {prank} (line {pline}) for topic {qid!r}",
                        )
                    )
            last[qid] = (rank, score, n)
            if qids is not None and qid not in qids:
                problems.append(Problem(n, f"unknown topic {qid!r} (not a query of the dataset)"))
            if docids is not None and docid not in docids:
                problems.append(Problem(n, f"unknown document {docid!r} (not in the dataset's corpus)"))
    if not seen and not problems:
        problems.append(Problem(0, f"{path}: the run is empty"))
    return problems


def missing_topics(path: str | Path, qids: set) -> list[str]:
    """Topics of the dataset that the run does not rank."""
    with open(path, encoding="utf-8") as f:
        ranked = {line.split(None, 1)[0] for line in f if line.strip()}
    return sorted(qids - ranked)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Validate a TREC run file.")
    ap.add_argument("run")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--max-per-topic", type=int, default=100)
    ap.add_argument(
        "--dataset", choices=["local", "beir", "mini"], default=None, help="check qids and docids against this dataset"
    )
    ap.add_argument("--path", default=None, help="dataset folder for --dataset local|beir")
    ap.add_argument("--strict", action="store_true", help="topics of the dataset missing from the run are errors")
    a = ap.parse_args(argv)
    try:
        problems, warnings = check(a)
    except (UnicodeDecodeError, OSError, ValueError) as e:  # DataError is a ValueError
        print(f"{a.run}: cannot validate: {one_line(e)}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"{a.run}: {p}")
    for w in warnings:
        print(f"{a.run}: {'error' if a.strict else 'warning'}: {w}")
    if problems or (a.strict and warnings):
        print(f"{a.run}: {len(problems) + (len(warnings) if a.strict else 0)} problem(s)", file=sys.stderr)
        return 1
    print(f"{a.run}: valid")
    return 0


def check(a) -> tuple[list[Problem], list[str]]:
    qids = docids = None
    if a.dataset:
        ds = _dataset(a.dataset, a.path)
        qids, docids = set(ds.query_ids), set(ds.doc_ipc3)
    problems = validate(a.run, a.tag, a.max_per_topic, qids, docids)
    warnings = []
    if qids is not None and Path(a.run).is_file():
        missing = missing_topics(a.run, qids)
        if missing:
            warnings.append(
                f"{len(missing)} of the dataset's {len(qids)} topics are not in the run, e.g. {missing[:5]}"
            )
    return problems, warnings


def one_line(e: Exception) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text ({e.reason} at byte {e.start}). Fix: write the run as UTF-8"
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text


def _dataset(kind: str, path: str | None):
    if kind in ("local", "beir") and not path:
        raise DataError(f"--dataset {kind} needs --path DIR. Fix: add --path with the dataset folder.")
    path = path or ""
    if kind == "mini":
        cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "dataset" / "mini.yaml")
        return data.load(cfg, default_root())

    cache = default_cache(default_root())
    return data.load_local(path, digest_cache=cache) if kind == "local" else data.load_beir(path, digest_cache=cache)


if __name__ == "__main__":
    sys.exit(main())
