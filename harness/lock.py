"""The dependency lock (``requirements.lock``): what ``make install`` installs, exactly.

Artifact keys follow the installed versions of the libraries that compute them
(:mod:`harness.env`), so an install that resolves "whatever is newest today" re-keys a user's
embeddings and runs without anyone deciding it. The lock names every runtime and dev distribution
with one exact version; ``make install`` installs those and nothing else, and only ``make lock`` /
``make upgrade`` move it (docs/development.md, "Dependencies").

This module reads the lock and answers three questions, each a pure function of the lock's text
and what it is compared with:

* :func:`stale`: which installed distributions differ from the lock, the keying ones first, so a
  test failing on an old environment says "installed X, locked Y: run make install" instead of a
  diff of artifact keys (``tests/conftest.py`` and the keys test call it);
* :func:`unlocked`: what is installed that the lock does not name;
* :func:`disagreements`: where pyproject.toml's requirements and the lock disagree (a dependency
  added to pyproject without ``make lock``, a pin changed by hand).

``python -m harness.lock check`` prints the first two (exit 1 when either is non-empty);
``python -m harness.lock diff OLD NEW`` prints which packages moved and which artifact kinds
they re-key, for an upgrade's commit message.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
PYPROJECT = REPO / "pyproject.toml"

# The distributions whose versions enter artifact keys (harness/env.py, harness/passages.py and the
# stages that call env.version), with the artifact kinds each one keys directly; everything
# downstream of those kinds re-keys through its parents. tests/test_lock.py checks that every
# distribution the harness passes to env.version or env.minor is named here.
KEYING: dict[str, tuple[str, ...]] = {
    "torch": ("embeddings", "embedding_shard", "unit_run", "encoder_model"),
    "transformers": ("embeddings", "embedding_shard", "unit_run", "units", "encoder_model"),
    "tokenizers": ("units",),
    "faiss-cpu": ("faiss",),
    "faiss-gpu": ("faiss",),
    "ir-measures": ("scores",),
    "pytrec-eval-terrier": ("scores",),
    "pytrec-eval": ("scores",),
    "lightgbm": ("ltr_features", "ltr_identity", "ltr_model", "ltr_run"),
    "pyserini": ("lucene", "lucene_shard", "unit_run"),
    "sentence-transformers": ("encoder_model",),
}

# Installed by the venv or by make install itself, never by the lock: the installer and the
# project (an editable install of this checkout).
NOT_LOCKED = frozenset({"pip", "dapfam-harness"})

# A local version label is a build of the same release (torch 2.13.0+cpu or +cu128): the
# lock names the CPU build of this machine; a CUDA build installed on purpose (docs/development.md)
# keeps the same public version and the same artifact keys (env.minor reads major.minor).
LOCAL_BUILDS = frozenset({"torch"})


class LockError(ValueError):
    """The lock file cannot be read."""


def parse(text: str, source: str = "requirements.lock") -> dict[str, str]:
    """``{canonical name: version}`` from a pip-compile / uv lock: one ``name==version`` per
    requirement line, comments and indented ``# via`` lines ignored. Anything else (a range, a URL,
    an option) is refused: a lock names exact versions."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
        if m is None:
            raise LockError(
                f"{source}:{number}: {line!r} is not 'name==version'. Fix: regenerate the lock with `make lock`."
            )
        name = canonicalize_name(m.group(1))
        if name in out:
            raise LockError(f"{source}:{number}: {name} is locked twice. Fix: regenerate the lock with `make lock`.")
        out[name] = m.group(3)
    return out


def read(path: Path = LOCK) -> dict[str, str]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockError(f"{path}: no lock file. Fix: `git checkout {path.name}` or `make lock`.") from None
    return parse(text, str(path))


def installed() -> dict[str, str]:
    """``{canonical name: version}`` of every distribution this interpreter sees."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def _same(name: str, have: str, want: str) -> bool:
    if name in LOCAL_BUILDS:
        return Version(have).public == Version(want).public
    return Version(have) == Version(want)


def stale(locked: Mapping[str, str], have: Mapping[str, str]) -> list[str]:
    """One line per locked distribution whose installed version differs (or that is missing),
    the ones that key artifacts first: ``installed transformers 5.25.0, locked 5.24.0``."""
    lines = []
    for name, want in locked.items():
        got = have.get(name)
        if got is None:
            lines.append((name not in KEYING, f"{name} not installed, locked {want}"))
        elif not _same(name, got, want):
            lines.append((name not in KEYING, f"installed {name} {got}, locked {want}"))
    return [text for _, text in sorted(lines)]


def unlocked(locked: Mapping[str, str], have: Mapping[str, str], allowed: Iterable[str] = ()) -> list[str]:
    """Installed distributions the lock does not name (besides pip, the project and ``allowed``)."""
    skip = NOT_LOCKED | {canonicalize_name(n) for n in allowed}
    return sorted(n for n in have if n not in locked and n not in skip)


def other_builds(locked: Mapping[str, str], have: Mapping[str, str]) -> set[str]:
    """What a build installed on purpose brings with it: a CUDA torch (``make install TORCH=…``)
    requires its CUDA libraries, which the CPU lock does not name."""
    out: set[str] = set()
    for name in LOCAL_BUILDS:
        if name in have and name in locked and have[name] != locked[name]:
            for spec in metadata.requires(name) or []:
                req = Requirement(spec)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    out.add(canonicalize_name(req.name))
    return out


def stale_message(path: Path = LOCK, have: Mapping[str, str] | None = None) -> str | None:
    """The one line a test prints on an environment that is not the lock's, or None when it is.
    The first mismatch is named (a keying one when there is one) and the count of the rest."""
    lines = stale(read(path), installed() if have is None else have)
    if not lines:
        return None
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return f"stale environment: {lines[0]}{more}, in {path.name}: run make install"


def requirements(pyproject: Path = PYPROJECT) -> list[Requirement]:
    """pyproject.toml's dependencies and every optional group's (the lock is made with all extras)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        specs.extend(group)
    return [Requirement(s) for s in specs]


def disagreements(locked: Mapping[str, str], reqs: Iterable[Requirement]) -> list[str]:
    """Where pyproject's requirements and the lock disagree: a requirement the lock does not name,
    or whose specifier the locked version does not satisfy. Empty when the lock is pyproject's."""
    out = []
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        version = locked.get(name)
        if version is None:
            out.append(f"pyproject.toml requires {req}, which {LOCK.name} does not lock")
        elif not req.specifier.contains(version, prereleases=True):
            out.append(f"pyproject.toml requires {req}, {LOCK.name} locks {version}")
    return out


def diff(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """``(moved packages, re-keyed artifact kinds)`` between two locks, for an upgrade's commit.
    Only a version that keys artifacts the way harness.env reads it re-keys (torch and
    transformers by major.minor, the others by their full version)."""
    moved: list[str] = []
    kinds: set[str] = set()
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        moved.append(f"{name} {a or '(none)'} -> {b or '(none)'}")
        if name in KEYING and _rekeys(name, a, b):
            kinds.update(KEYING[name])
    return moved, sorted(kinds)


def _rekeys(name: str, a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return True
    if name in {"torch", "transformers", "tokenizers"}:  # env.minor: major.minor only
        return Version(a).release[:2] != Version(b).release[:2]
    return Version(a) != Version(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.lock", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    check = sub.add_parser("check", help="the installed environment against the lock (exit 1 when they differ)")
    check.add_argument("--lock", type=Path, default=Path(os.environ.get("HARNESS_LOCK", LOCK)))
    d = sub.add_parser("diff", help="packages moved and artifact kinds re-keyed between two locks")
    d.add_argument("old", type=Path)
    d.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "diff":
            moved, kinds = diff(read(args.old), read(args.new))
            print("packages moved: " + ("; ".join(moved) if moved else "none"))
            print("artifact kinds re-keyed: " + (", ".join(kinds) if kinds else "none"))
            return 0
        locked, have = read(args.lock), installed()
        extra = unlocked(locked, have, other_builds(locked, have))
        problems = stale(locked, have) + [f"{n} is installed but not locked" for n in extra]
        problems += disagreements(locked, requirements())
    except LockError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} difference(s) from {args.lock.name}: run make install (or make lock)", file=sys.stderr)
        return 1
    print(f"{len(locked)} distributions, every one at {args.lock.name}'s version")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
