"""The leakage audit (harness/leakage.py): training and scored judgments compared by content, each
kind of overlap counted and refused, and the real folders: cacm-xdom-coded against cacm-xdom is
refused, two halves of cacm-xdom-disjoint are not."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT

from harness import leakage
from harness.leakage import Judged, Leakage

SHARED = ROOT.parent / "shared" / "data"


def _judged(queries: dict, docs: dict, pairs: list[tuple[str, str]]) -> Judged:
    return Judged(queries, docs, pd.DataFrame(pairs, columns=["query_id", "doc_id"]))


DOCS = {"d1": "Sorting networks", "d2": "A compiler for ALGOL", "d3": "Hash tables", "d4": "Parsing, revisited"}
TRAIN = _judged({"q1": "Fast sorting", "q2": "Symbol tables"}, DOCS, [("q1", "d1"), ("q2", "d3")])


def test_disjoint_judgments_pass_and_shared_positives_are_counted():
    scored = _judged({"x1": "Parsers for ALGOL"}, DOCS, [("x1", "d2"), ("x1", "d3")])
    found = leakage.audit(TRAIN, scored)
    assert (found.same_pairs, found.reversed_pairs, found.shared_queries, found.queries_as_documents) == (0, 0, 0, 0)
    assert (found.shared_positives, found.scored_positives) == (1, 2)  # d3 is a training positive
    leakage.check(found, "test")  # not refused
    assert found.columns()["leakage_shared_positive_share"] == 0.5


def test_the_same_query_under_another_id_and_spelling_is_refused():
    scored = _judged({"OTHER-7": "  FAST   sorting!"}, {"Z": "sorting NETWORKS"}, [("OTHER-7", "Z")])
    found = leakage.audit(TRAIN, scored)
    assert (found.same_pairs, found.shared_queries) == (1, 1)
    with pytest.raises(Leakage, match=r"^test: leakage audit: 1 same pairs, 0 reversed pairs, 1 scored queries .*Fix"):
        leakage.check(found, "test")


def test_a_pair_read_backwards_is_refused():
    """The scored query is a training document and its positive is the training query: CACM's
    symmetric citations across splits whose corpus holds the other split's queries."""
    scored = _judged({"s1": "Sorting networks"}, {"e1": "fast sorting"}, [("s1", "e1")])
    found = leakage.audit(TRAIN, scored)
    assert (found.reversed_pairs, found.queries_as_documents, found.same_pairs, found.shared_queries) == (1, 1, 0, 0)
    with pytest.raises(Leakage, match="1 reversed pairs"):
        leakage.check(found, "test")


def test_a_shared_query_alone_is_refused_and_drop_removes_it_from_training():
    scored = _judged({"s1": "symbol TABLES"}, DOCS, [("s1", "d4")])
    found = leakage.audit(TRAIN, scored)
    assert (found.shared_queries, found.same_pairs) == (1, 0)
    with pytest.raises(Leakage):
        leakage.check(found, "test")
    leakage.check(found, "test", drop=True)  # the caller drops the overlap instead
    kept = leakage.without_overlap(TRAIN, scored)
    assert kept.values.tolist() == [["q1", "d1"]]
    assert not leakage.audit(_judged(TRAIN.queries, DOCS, list(map(tuple, kept.values))), scored).refused


def _load(folder):
    from omegaconf import OmegaConf

    from harness import data

    cfg = OmegaConf.create({"type": "local", "path": str(folder)})
    return leakage.judged(data.load(cfg, folder))


@pytest.mark.skipif(not (SHARED / "cacm-xdom-coded").exists(), reason="../shared/data is not here")
def test_the_shared_cacm_folders_coded_against_full_is_refused_and_disjoint_halves_are_not(tmp_path):
    from harness.data.split import split

    coded, full = _load(SHARED / "cacm-xdom-coded"), _load(SHARED / "cacm-xdom")
    found = leakage.audit(coded, full)
    distinct = {leakage.normalise(t) for t in coded.queries.values()}  # 185 queries, 184 distinct texts
    assert found.shared_queries == len(distinct) and found.same_pairs > 1000  # the same queries and positives
    with pytest.raises(Leakage, match=rf"{len(distinct)} scored queries that are training queries"):
        leakage.check(found, "ltr.train=cacm-xdom-coded")
    a, b = split(SHARED / "cacm-xdom-disjoint", tmp_path / "halves", 0.5, seed=0)
    halves = leakage.audit(_load(a), _load(b))
    assert not halves.refused
    # by content, 2 queries are corpus documents all the same: CACM's algorithm certifications carry
    # their algorithm's title and no abstract (CACM-1919 = CACM-1980, CACM-2044 = CACM-2037 in TA):
    # counted, reported, not refused (no pair of them is a training pair)
    assert halves.queries_as_documents <= 2
    assert halves.shared_positives > 0  # popular targets: counted, reported, not refused


@pytest.mark.slow
def test_a_prior_from_the_scored_queries_under_other_ids_is_refused(cfg_factory, tiny_folder, tmp_path):
    """ltr.prior names a folder whose judgments are the scored ones with every query renamed: the
    id check passes, the content audit refuses it before anything is learned."""
    import shutil

    from harness.run import execute

    renamed = tmp_path / "renamed"
    shutil.copytree(tiny_folder, renamed)
    for name in ("queries.parquet", "qrels_all.parquet"):
        t = pd.read_parquet(renamed / name)
        t["query_id"] = "OTHER-" + t["query_id"].astype(str)
        t.to_parquet(renamed / name, index=False)
    args = ("+experiment=doc_bm25", "query_fields=TA", "target_fields=TA", "ltr=lambdamart", "ltr.n_estimators=5")
    here = ("dataset=local", f"dataset.path={tiny_folder}")
    with pytest.raises(Leakage, match=r"ltr.prior=.*renamed: leakage audit: [1-9]\d* same pairs"):
        execute(cfg_factory(*args, *here, "ltr.features=[run,prior]", f"ltr.prior={renamed}", tiny=False))
