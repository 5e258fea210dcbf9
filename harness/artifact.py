"""An artifact: one node of the data path, named by a key that hashes what made it.

The bottom of the house: every stage, the store and the registry read it; it reads nothing of the
harness. :mod:`harness.store` decides where an artifact lives; :mod:`harness.stage` says what each
kind is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


def stable_hash(obj: Any, n: int = 12) -> str:
    """Short, order-independent hash of a JSON-able object."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


@dataclass(frozen=True)
class Artifact:
    """A node of the data path: what made it (kind, params), what it was made from (parents), and
    the code and software that made it (``env``: the stage's version constant and the versions that
    change its bytes, :mod:`harness.env`). ``params`` name the configuration (results columns and
    run tags are read off them); ``env`` only keys."""

    kind: str
    params: dict
    parents: tuple[Artifact, ...] = field(default_factory=tuple)
    env: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        what = {"kind": self.kind, "params": self.params, "parents": [p.key for p in self.parents]}
        if self.env:
            what["env"] = self.env
        return stable_hash(what)

    def __eq__(self, other) -> bool:
        return isinstance(other, Artifact) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.key}"


def lineage(art: Artifact) -> dict[str, dict]:
    """``{kind: params}`` along the first parents of a run, from the run down to the units."""
    out: dict[str, dict] = {}
    node: Artifact | None = art
    while node is not None:
        out.setdefault(node.kind, node.params)
        node = node.parents[0] if node.parents else None
    return out
