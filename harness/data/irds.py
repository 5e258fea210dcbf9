"""ir_datasets registration: ``dapfam/all``, ``dapfam/in``, ``dapfam/out`` and ``dapfam-mini/*``.

Each id iterates the same data the harness runs on: docs are families with their ``FULL`` target
view as text (title, abstract, claims, description), queries their ``TA`` view, qrels the subset's
positives. Registration is lazy: nothing is loaded (or downloaded) until an id is iterated.

    import harness.data.irds as irds; irds.register_defaults()
    ds = ir_datasets.load("dapfam-mini/out"); next(ds.qrels_iter())

Any loaded :class:`harness.data.Dataset` (a local folder, a BEIR folder) can be registered under
a prefix of your choice with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import ir_datasets
from ir_datasets.datasets.base import Dataset as IrdsDataset
from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries, GenericDoc, GenericQuery, TrecQrel
from ir_datasets.indices import Docstore
from omegaconf import OmegaConf

from ..store import default_root
from . import load
from . import views as V
from .qrels import SUBSETS


class _Docs(BaseDocs):
    def __init__(self, get, view):
        self._get, self._view = get, view

    def docs_iter(self):
        for doc_id, text in V.target_texts(self._get().corpus, self._view):
            yield GenericDoc(doc_id, text)

    def docs_count(self):
        return self._get().n_docs

    def docs_store(self, field="doc_id"):
        return _Store(self)

    def docs_cls(self):
        return GenericDoc

    def docs_namespace(self):
        return "dapfam"

    def docs_lang(self):
        return "en"


class _Store(Docstore):
    """Lookup by id (``docs_store().get(id)``, ``get_many(ids)``), as PyTerrier's text loaders use.

    Backed by the same streamed corpus, never held in memory: a lookup reads the corpus once and
    stops when every asked id is found, so ask for many ids at a time."""

    def __init__(self, docs: _Docs):
        super().__init__(GenericDoc, "doc_id")
        self._docs = docs

    def get_many_iter(self, doc_ids):
        wanted = set(doc_ids)
        if not wanted:
            return
        for doc_id, text in V.target_texts(self._docs._get().corpus, self._docs._view):
            if doc_id in wanted:
                wanted.discard(doc_id)
                yield GenericDoc(doc_id, text)
                if not wanted:
                    return


class _Queries(BaseQueries):
    def __init__(self, get, view):
        self._get, self._view = get, view

    def queries_iter(self):
        for qid, text in V.query_texts(self._get().queries, self._view).items():
            yield GenericQuery(qid, text)

    def queries_cls(self):
        return GenericQuery

    def queries_namespace(self):
        return "dapfam"

    def queries_lang(self):
        return "en"


class _Qrels(BaseQrels):
    def __init__(self, get, subset):
        self._get, self._subset = get, subset

    def qrels_iter(self):
        for q, d, r in self._get().qrels(self._subset).itertuples(index=False):
            yield TrecQrel(q, d, int(r), "0")

    def qrels_cls(self):
        return TrecQrel

    def qrels_defs(self):
        return {1: "cited or citing family (DAPFAM citation relevance)"}


def register(prefix: str, get: Callable, doc_view: str = "FULL", query_view: str = "TA") -> list[str]:
    """Register ``<prefix>/all|in|out`` over ``get()`` (a function returning a harness Dataset)."""
    get = lru_cache(maxsize=1)(get)
    ids = []
    for s in SUBSETS:
        name = f"{prefix}/{s.lower()}"
        if name not in ir_datasets.registry:
            ir_datasets.registry.register(
                name, IrdsDataset(_Docs(get, doc_view), _Queries(get, query_view), _Qrels(get, s))
            )
        ids.append(name)
    return ids


def register_defaults(root: str | Path | None = None) -> list[str]:
    """``dapfam/*`` (the hub, with conf/dataset/dapfam.yaml's settings) and ``dapfam-mini/*``,
    with artifacts under ``root`` (default: ``$HARNESS_ROOT``, else the current directory)."""

    root = root if root is not None else default_root()
    conf = Path(__file__).resolve().parents[2] / "conf" / "dataset"
    hub = OmegaConf.load(conf / "dapfam.yaml")
    mini = OmegaConf.load(conf / "mini.yaml")
    return register("dapfam", lambda: load(hub, root)) + register("dapfam-mini", lambda: load(mini, root))
