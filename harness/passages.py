"""Units of retrieval: a whole target view (document level) or windows over it (passage level).

A window is ``length`` tokens, starting every ``stride`` tokens (default ``stride = length``: no
overlap); the last window ends at the text's end. Passage ids are ``<family id>#<n>`` (n from 0),
so every passage keeps its family and aggregation needs no lookup table.

Which tokenizer counts tokens is configurable (``passage.tokenizer``):

* ``words`` (default): whitespace-separated words. Fast, model-independent, and what "a passage
  of N tokens" means for BM25;
* ``encoder``: the dense encoder's own sub-word tokenizer, so that a 256-token passage fits a
  256-token model exactly. Windows are cut at the tokenizer's character offsets, so the passage
  text is a verbatim slice of the view.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tqdm.auto import tqdm

from .data.schema import PASSAGE_SEP, DataError

log = logging.getLogger(__name__)

MIN_LENGTH, MAX_LENGTH = 16, 8192


def check(length: int, stride: int | None) -> int:
    """Validate passage.length / passage.stride; return the effective stride."""
    if not isinstance(length, int) or not MIN_LENGTH <= length <= MAX_LENGTH:
        raise DataError(f"passage.length={length!r}: expected an integer from {MIN_LENGTH} to {MAX_LENGTH} tokens.")
    stride = length if stride in (None, 0) else stride
    if not isinstance(stride, int) or not 1 <= stride <= length:
        raise DataError(f"passage.stride={stride!r}: expected 1..passage.length ({length}); null means no overlap.")
    return stride


def starts(n_tokens: int, length: int, stride: int) -> list[int]:
    """Window starts: every ``stride`` tokens until a window reaches the end."""
    if n_tokens <= length:
        return [0]
    out = list(range(0, n_tokens - length, stride))
    out.append(out[-1] + stride if out[-1] + length < n_tokens else out[-1])
    return sorted(set(out))


def word_windows(text: str, length: int, stride: int) -> list[str]:
    words = text.split()
    if not words:
        return []
    return [" ".join(words[s:s + length]) for s in starts(len(words), length, stride)]


def offset_windows(text: str, offsets: list[tuple[int, int]], length: int, stride: int) -> list[str]:
    """Windows over sub-word tokens given their character offsets (from a fast HF tokenizer)."""
    if not offsets:
        return []
    return [text[offsets[s][0]:offsets[min(s + length, len(offsets)) - 1][1]] for s in starts(len(offsets), length, stride)]


def make_splitter(tokenizer: str, length: int, stride: int, hf_tokenizer=None) -> Callable[[str], list[str]]:
    if tokenizer == "words":
        return lambda text: word_windows(text, length, stride)
    if tokenizer == "encoder":
        if hf_tokenizer is None:
            raise DataError("passage.tokenizer=encoder needs the encoder's tokenizer (dense backend).")

        def split(text: str) -> list[str]:
            enc = hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            return offset_windows(text, enc["offset_mapping"], length, stride)

        return split
    raise DataError(f"passage.tokenizer={tokenizer!r}: expected 'words' or 'encoder'.")


def units(docs: Iterable[tuple[str, str]], splitter: Callable[[str], list[str]] | None) -> Iterator[dict]:
    """``{"id", "contents"}`` records (Anserini's JsonCollection): the view itself, or its passages."""
    for doc_id, text in docs:
        if not text:
            continue
        if splitter is None:
            yield {"id": doc_id, "contents": text}
        else:
            for n, passage in enumerate(splitter(text)):
                yield {"id": f"{doc_id}{PASSAGE_SEP}{n}", "contents": passage}


def write_units(records: Iterable[dict], folder: Path, total: int | None = None) -> dict:
    """Write units as JSON lines under ``folder/docs/`` and count them."""
    out = folder / "docs"
    out.mkdir(parents=True, exist_ok=True)
    n_units = 0
    families = set()
    with open(out / "units.jsonl", "w") as f:
        for rec in tqdm(records, desc="units", unit=" unit", mininterval=2, disable=None):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n_units += 1
            families.add(family_of(rec["id"]))
    if n_units == 0:
        raise DataError("the target view is empty for every document. Fix: choose target_fields that the corpus fills.")
    if total is not None and len(families) < total:
        log.warning("%d of %d documents have an empty target view and are not indexed", total - len(families), total)
    return {"units": n_units, "families": len(families)}


def family_of(unit_id: str) -> str:
    return unit_id.rsplit(PASSAGE_SEP, 1)[0] if PASSAGE_SEP in unit_id else unit_id


def read_units(folder: Path) -> Iterator[dict]:
    with open(Path(folder) / "docs" / "units.jsonl") as f:
        for line in f:
            yield json.loads(line)
