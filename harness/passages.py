"""Units of retrieval: a whole target view (document level) or windows over it (passage level).

A window is ``length`` tokens, starting every ``stride`` tokens (default ``stride = length``: no
overlap); the last window ends at the text's end. Passage ids are ``<family id>#<n>`` (n from 0),
so every passage keeps its family and aggregation needs no lookup table.

Which tokenizer counts tokens is configurable (``passage.tokenizer``):

* ``words`` (default): whitespace-separated words. Fast, model-independent, and what "a passage
  of N tokens" means for BM25;
* ``encoder``: the dense encoder's own sub-word tokenizer. Windows are cut at the tokenizer's
  character offsets, so the passage text is a verbatim slice of the view. A window must fit the
  model with its special tokens ([CLS], [SEP]) and the document prefix: one of ``length`` tokens
  is shrunk to ``encoder.max_length`` less those, so that nothing is truncated at encoding (with
  max_length 256, ``passage.length=256`` gives windows of 254 word pieces, 128 stays 128).

:func:`node` is the units stage: its artifact (keyed by the view and the window settings) and
its builder, which streams the corpus and writes Anserini's JsonCollection lines.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from . import env, stage
from .artifact import Artifact
from .console import inner_bars
from .data import views as V
from .data.schema import PASSAGE_SEP, DataError
from .stage import Context, Stage, register

log = logging.getLogger(__name__)

VERSION = 1  # of the units builder (harness.env): bump when a change alters the units written
# Of the encoder's windows alone (2: each re-tokenises within its window, fitted_windows): keys
# only the units cut by the encoder's tokenizer, so word windows and BM25 indexes are reused.
WINDOWS_VERSION = 2

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
    return [" ".join(words[s : s + length]) for s in starts(len(words), length, stride)]


def offset_windows(text: str, offsets: list[tuple[int, int]], length: int, stride: int) -> list[str]:
    """Windows over sub-word tokens given their character offsets (from a fast HF tokenizer)."""
    if not offsets:
        return []
    return [
        text[offsets[s][0] : offsets[min(s + length, len(offsets)) - 1][1]]
        for s in starts(len(offsets), length, stride)
    ]


def fitted_windows(text: str, offsets: list[tuple[int, int]], length: int, stride: int, hf_tokenizer) -> list[str]:
    """:func:`offset_windows` whose text re-tokenises to at most ``length`` tokens. A window cut
    out of the whole text can come out longer when tokenised alone (a window that starts inside
    a word, a hyphen or digit group the tokenizer splits otherwise, accents its normaliser strips):
    such a window loses its last tokens until it fits, so the encoder never truncates it."""
    if not offsets:
        return []
    spans = [(s, min(s + length, len(offsets))) for s in starts(len(offsets), length, stride)]
    pieces = [text[offsets[s][0] : offsets[e - 1][1]] for s, e in spans]
    counts = [len(ids) for ids in hf_tokenizer(pieces, add_special_tokens=False, verbose=False)["input_ids"]]
    for i, ((s, e), n) in enumerate(zip(spans, counts)):
        while n > length and e - s > 1:
            e = max(s + 1, e - (n - length))
            pieces[i] = text[offsets[s][0] : offsets[e - 1][1]]
            n = len(hf_tokenizer(pieces[i], add_special_tokens=False, verbose=False)["input_ids"])
    return pieces


def make_splitter(tokenizer: str, length: int, stride: int, hf_tokenizer=None) -> Callable[[str], list[str]]:
    if tokenizer == "words":
        return lambda text: word_windows(text, length, stride)
    if tokenizer == "encoder":
        if hf_tokenizer is None:
            raise DataError("passage.tokenizer=encoder needs the encoder's tokenizer (dense backend).")

        def split(text: str) -> list[str]:
            enc = hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            return fitted_windows(text, enc["offset_mapping"], length, stride, hf_tokenizer)

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


def tokenizer_for(choice: str, backend) -> str:
    """``passage.tokenizer``: ``auto`` is the backend's own (words for BM25, the encoder's for dense)."""
    choice = str(choice)
    return backend.tokenizer if choice == "auto" else choice


def fitted_length(length: int, max_length: int, hf_tokenizer, prefix: str = "") -> int:
    """Content tokens per window so that window + special tokens + prefix fit ``max_length``."""
    room = max_length - hf_tokenizer.num_special_tokens_to_add(pair=False)
    if prefix:
        room -= len(hf_tokenizer(prefix, add_special_tokens=False)["input_ids"])
    if room < 1:
        raise DataError(
            f"encoder.max_length={max_length} leaves no room for text after the special tokens and the "
            f"prefix. Fix: raise encoder.max_length."
        )
    return min(length, room)


def node(ctx: Context, backend, build: bool = True) -> Artifact:
    """The units artifact of an experiment for ``backend``: the whole target view or its windows.
    ``build=False`` records it and leaves building to the backend (``ctx.build_later``):
    BM25 writes the units while Anserini indexes them (:func:`harness.lucene.index_streaming`)."""
    cfg = ctx.cfg
    params: dict[str, Any] = {"view": str(cfg.target_fields), "granularity": str(cfg.granularity)}
    if params["granularity"] == "passage":
        tok = tokenizer_for(cfg.passage.tokenizer, backend)
        params |= {
            "length": int(cfg.passage.length),
            "stride": check(cfg.passage.length, cfg.passage.stride),
            "tokenizer": tok,
        }
        if tok == "encoder":
            e = cfg.encoder
            params |= {
                "encoder_tokenizer": e.model,
                "encoder_revision": e.revision,
                "fit_max_length": int(e.max_length),
                "doc_prefix": e.doc_prefix or "",
            }
    environment: dict[str, Any] = {"stage": VERSION}
    if params.get("tokenizer") == "encoder":  # windows are cut by the encoder's tokenizer
        environment |= {
            "windows": WINDOWS_VERSION,
            "transformers": env.minor("transformers"),
            "tokenizers": env.minor("tokenizers"),
        }
    art = Artifact(stage.UNITS, params, (ctx.corpus_node,), environment)

    def make(tmp: Path, sink=None):
        hf = ctx.hf_tokenizer() if params.get("tokenizer") == "encoder" else None
        return build_units(tmp, params, V.target_texts(ctx.ds.corpus, params["view"]), ctx.ds.n_docs, hf, sink)

    describe = f"{params['granularity']} units ({params['view']})"
    if not build:
        return ctx.build_later(art, make, describe)
    return ctx.ensure(art, make, describe)


def build_units(tmp: Path, params: dict, docs: Iterable, total: int, hf=None, sink=None) -> dict:
    """Write the units of ``docs`` (``(id, text)`` of the target view): each whole, or cut into
    windows as ``params`` say (``hf``: the encoder's tokenizer, for windows cut in its word pieces);
    ``sink`` as in :func:`write_units`."""
    splitter, extra = None, {}  # type: ignore[var-annotated]
    if params["granularity"] == "passage":
        length, stride = params["length"], params["stride"]
        if params["tokenizer"] == "encoder":
            length = fitted_length(length, params["fit_max_length"], hf, params["doc_prefix"])
            stride = min(stride, length)
            if length < params["length"]:
                log.info(
                    "passage windows of %d word pieces: %d tokens fit encoder.max_length=%d with the special "
                    "tokens and prefix",
                    length,
                    params["length"],
                    params["fit_max_length"],
                )
        splitter = make_splitter(params["tokenizer"], length, stride, hf)
        extra = {"window_tokens": length, "window_stride": stride}
    return write_units(units(docs, splitter), tmp, total=total, sink=sink) | extra


def write_units(records: Iterable[dict], folder: Path, total: int | None = None, sink=None) -> dict:
    """Write units as JSON lines under ``folder/docs/`` and count them. ``sink()`` (optional)
    opens a second text stream that gets the same lines (a named pipe an indexer reads). Each
    line is ``json.dumps`` written by hand rather than through ``jsonlines.Writer``: the same
    bytes go to two streams, and this loop is the hot path of passaging."""

    out = folder / "docs"
    out.mkdir(parents=True, exist_ok=True)
    n_units = 0
    families = set()
    with (
        open(out / "units.jsonl", "w", encoding="utf-8", buffering=1 << 20) as f,
        sink() if sink else nullcontext() as g,
    ):
        for rec in tqdm(records, desc="units", unit=" unit", mininterval=2, disable=inner_bars()):
            line = json.dumps(rec, ensure_ascii=False) + "\n"
            f.write(line)
            if g is not None:
                g.write(line)
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
    with open(Path(folder) / "docs" / "units.jsonl", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def check_settings(cfg) -> None:
    """``passage.length`` / ``passage.stride``, where passages are cut."""
    if str(cfg.granularity) == "passage":
        check(cfg.passage.length, cfg.passage.stride)


STAGE = register(
    Stage(stage.UNITS, "indexes", "unit sets (views x granularity)", VERSION, cost="passaging", check=check_settings)
)
