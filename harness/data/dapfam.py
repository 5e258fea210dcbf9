"""DAPFAM-format data: the hub dataset and the same three parquet files in a local folder.

``queries.parquet``  query_id, title_en, abstract_en, claims_text, abstract_keywords, IPC3 list
``corpus.parquet``   relevant_id, title_en, abstract_en, claims_text, description_en, IPC3 list
``qrels_all.parquet`` query_id, relevant_id, relevance_score, domain_rel (IN / OUT / NC)

Queries and qrels are small and read whole. The corpus is about 3 GB of text on DAPFAM: only its
ids and IPC3 codes are read up front; text is streamed in record batches, only the columns a view
needs, through :meth:`ParquetCorpus.iter_batches`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import schema as S
from .digest import file_digest, files_digest
from .schema import DataError
from .validate import validate

log = logging.getLogger(__name__)

DEFAULT_FILES = {"queries": "queries.parquet", "corpus": "corpus.parquet", "qrels": "qrels_all.parquet"}


@dataclass
class ParquetCorpus:
    """The corpus file, streamed: never more than one record batch of text in memory."""

    path: Path

    @property
    def names(self) -> list[str]:
        import pyarrow.parquet as pq  # heavy: deferred to where a file is read

        return pq.read_schema(self.path).names

    def column(self, name: str) -> dict:
        """``{doc id: value}`` of one column (e.g. ``ipcr_codes_str``), read alone."""
        if name not in self.names:
            raise DataError(f"{self.path}: no column {name!r}. Fix: use the hub's corpus.parquet, which has it.")
        frame = read_parquet(self.path, [S.DOC_ID, name])
        return dict(zip(frame[S.DOC_ID].astype(str), frame[name]))

    def iter_batches(self, columns: list[str], batch_size: int = 2048) -> Iterator[pd.DataFrame]:
        # pre_buffer=False: pyarrow's default pre-buffering holds large parts of the file in memory
        # while streaming; without it memory stays near one record batch (bench/dapfam_scale.py
        # prints the peak RSS of a DAPFAM-sized run).
        import pyarrow.parquet as pq  # heavy: deferred to where a file is read

        pf = pq.ParquetFile(self.path, pre_buffer=False)
        wanted = [S.DOC_ID] + [c for c in columns if c != S.DOC_ID]
        cols = [c for c in wanted if c in pf.schema_arrow.names]  # an absent optional column reads as empty
        batches = pf.iter_batches(batch_size=batch_size, columns=cols, use_threads=False)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (UnicodeDecodeError, ValueError) as e:
                raise DataError(
                    f"{self.path}: cannot read columns {cols}: {str(e).splitlines()[0]}. Fix: re-encode "
                    f"the text as UTF-8 and write the file again."
                ) from e
            except OSError as e:  # pyarrow's corrupt pages and compressed blocks
                raise DataError(
                    f"{self.path}: damaged, cannot be read ({str(e).splitlines()[0]}). Fix: replace it with a good "
                    f"copy (fetch or export it again); artifacts built from the good file are keyed by its digest."
                ) from e
            frame = checked(batch, self.path).to_pandas()
            for c in wanted:
                if c not in frame:
                    frame[c] = None
            yield frame


TEXT_COLUMNS = (S.TITLE, S.ABSTRACT, S.CLAIMS, S.DESCRIPTION, S.KEYWORDS)


def check_columns(path: Path, required: list[str], optional: Sequence[str] = ()) -> list[str]:
    """Raise a :class:`DataError` naming the file and every missing ``required`` column, or a text
    column stored as bytes (whose text would otherwise be rendered as ``b'...'``). Returns the
    ``optional`` columns the file lacks (one schema read for both)."""
    import pyarrow.parquet as pq  # heavy: deferred to where a file is read

    if not path.exists():
        raise DataError(
            f"{path}: file not found. Fix: point dataset.path at a folder holding "
            f"{', '.join(DEFAULT_FILES.values())} (the hub's DAPFAM layout)."
        )
    if not path.is_file():
        raise DataError(
            f"{path}: not a file. Fix: point dataset.path at a folder holding {', '.join(DEFAULT_FILES.values())}."
        )
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # not parquet, truncated, ...
        raise DataError(f"{path}: not a readable parquet file ({e}). Fix: re-export it as parquet.") from e
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {schema.names}. Fix: rename or add them "
            f"(DAPFAM's column names are required; see README 'Data')."
        )
    import pyarrow as pa

    present = set(required) | {c for c in optional if c in schema.names}
    for col in TEXT_COLUMNS:
        if col in present and (
            pa.types.is_binary(schema.field(col).type) or pa.types.is_large_binary(schema.field(col).type)
        ):
            raise DataError(
                f"{path}: column {col!r} holds bytes, not text. Fix: decode it and store it as UTF-8 "
                f"strings (pandas: df[{col!r}].str.decode('utf-8'))."
            )
    return [c for c in optional if c not in schema.names]


def read_parquet(path: Path, columns: list[str]) -> pd.DataFrame:
    """Read columns of a parquet file; undecodable text becomes a DataError naming file and fix."""
    import pyarrow.parquet as pq  # heavy: deferred to where a file is read

    try:
        table = pq.read_table(path, columns=columns)
    except (UnicodeDecodeError, ValueError) as e:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(
            f"{path}: cannot read columns {columns}: {str(e).splitlines()[0]}. Fix: re-encode the text "
            f"as UTF-8 and write the file again."
        ) from e
    return checked(table, path).to_pandas()


def checked(table, path: Path):
    """``table`` (or record batch) after a full validation of its string columns: a parquet writer
    can store bytes that are not UTF-8 in a string column, and pandas would fail on them later."""
    import pyarrow as pa

    for name, column in zip(table.schema.names, table.columns):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            try:
                column.validate(full=True)
            except pa.ArrowInvalid as e:
                raise DataError(
                    f"{path}: column {name!r} holds text that is not valid UTF-8 ({str(e).splitlines()[0]}). "
                    f"Fix: re-encode the text as UTF-8 and write the file again."
                ) from None
    return table


def fingerprint_file(path: Path, cache: Path | None = None) -> str:
    """SHA-256 of the whole file (see :mod:`harness.data.digest`): any edit makes other artifacts."""

    return file_digest(path, cache)


def read_local(
    path: str | Path, files: dict | None = None, unknown_ids: str = "keep", digest_cache: Path | None = None
) -> dict:
    """Read and validate a DAPFAM-format folder. Returns the parts a :class:`Dataset` is made of."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DataError(
            f"{root}: no such folder. Fix: set dataset.path to a folder with {', '.join(DEFAULT_FILES.values())}."
        )
    files = {**DEFAULT_FILES, **(files or {})}
    qpath, cpath, rpath = (root / files[k] for k in ("queries", "corpus", "qrels"))
    lacking_q = check_columns(qpath, S.REQUIRED["queries"], S.QUERY_COLUMNS + [S.IPC_FULL])
    missing = {
        "queries": [c for c in lacking_q if c != S.IPC_FULL],  # full IPC codes: read on demand only
        "corpus": check_columns(cpath, S.REQUIRED["corpus"], S.CORPUS_COLUMNS),
        "qrels": check_columns(rpath, S.REQUIRED["qrels"], [S.DOMAIN]),
    }
    for part, cols in missing.items():
        for c in cols:
            log.warning("%s has no column %r: %s are refused with this data", files[part], c, S.ENABLES[c])

    queries = read_optional(qpath, S.QUERY_COLUMNS + [S.IPC_FULL], lacking_q)
    docs = read_optional(cpath, [S.DOC_ID, S.IPC3], missing["corpus"])
    qrels = read_optional(rpath, S.QRELS_COLUMNS, missing["qrels"])

    return validate(queries, docs, qrels, qpath=qpath, cpath=cpath, rpath=rpath, unknown_ids=unknown_ids) | {
        "corpus": ParquetCorpus(cpath),
        "fingerprint": files_digest((qpath, cpath, rpath), digest_cache),
        "corpus_fingerprint": fingerprint_file(cpath, digest_cache),
        "files": {"queries": str(qpath), "corpus": str(cpath), "qrels": str(rpath)},
        "missing": {k: v for k, v in missing.items() if v},
    }


def read_optional(path: Path, columns: list[str], missing: list[str]) -> pd.DataFrame:
    """Read the columns a file has; those it lacks are empty (None), their features refused."""
    frame = read_parquet(path, [c for c in columns if c not in missing])
    for c in missing:
        frame[c] = None
    return frame


def download_hub(
    repo_id: str, revision: str, files: dict, cache_dir: str | None = None, local_files_only: bool = False
) -> tuple[Path, str]:
    """The three files of a hub dataset at ``revision`` through huggingface_hub's cache: the
    snapshot folder and the commit. A pinned commit is immutable, so files already in the cache
    are used without asking the hub (offline, air-gapped nodes, ``HF_HUB_OFFLINE``); anything else
    (a branch name, files not cached yet) asks the hub unless ``local_files_only``."""

    from huggingface_hub import HfApi, hf_hub_download

    def fetch(commit: str, local: bool) -> dict:
        return {
            k: Path(
                hf_hub_download(
                    repo_id, name, repo_type="dataset", revision=commit, cache_dir=cache_dir, local_files_only=local
                )
            )
            for k, name in files.items()
        }

    paths, commit = None, revision
    if re.fullmatch(r"[0-9a-f]{40}", revision or ""):
        try:
            paths = fetch(revision, True)
        except Exception:  # noqa: BLE001  (not cached yet: ask the hub below)
            paths = None
    if paths is None:
        try:
            if local_files_only:
                raise RuntimeError("dataset.local_files_only=true")
            commit = HfApi().dataset_info(repo_id, revision=revision).sha or revision
            paths = fetch(commit, False)
        except Exception as e:
            raise DataError(
                f"hub dataset {repo_id}@{revision}: cannot fetch {', '.join(files.values())} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}). Fix: check network access to the hub (the files "
                f"are cached once fetched), or download them once and use dataset=local dataset.path=DIR."
            ) from e
    # Names may hold sub-folders ("data/corpus.parquet"): the snapshot root is above them.
    roots = {p.parents[len(Path(files[k]).parts) - 1] for k, p in paths.items()}
    if len(roots) != 1:
        raise DataError(
            f"hub dataset {repo_id}@{revision}: the files resolved to several snapshots {sorted(map(str, roots))}."
        )
    return roots.pop(), commit
