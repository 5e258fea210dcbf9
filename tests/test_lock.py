"""requirements.lock: the environment is the lock's, a stale one says so in one line, the lock
agrees with pyproject.toml, and every distribution that keys artifacts is known to the lock's
diff (docs/development.md, "Dependencies")."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT
from packaging.requirements import Requirement

from harness import lock


def test_every_installed_distribution_has_the_locks_version():
    locked, have = lock.read(), lock.installed()
    assert lock.stale(locked, have) == [], lock.stale_message()
    assert lock.unlocked(locked, have, lock.other_builds(locked, have)) == []


def test_a_changed_lock_version_is_named_in_one_line(tmp_path, capsys):
    text = lock.LOCK.read_text()
    have = lock.installed()["transformers"]
    copy = tmp_path / "requirements.lock"
    copy.write_text(re.sub(r"(?m)^transformers==.*$", "transformers==99.0.0", text))
    msg = lock.stale_message(copy)
    assert (
        msg
        == f"stale environment: installed transformers {have}, locked 99.0.0, in requirements.lock: run make install"
    )
    assert "\n" not in msg
    assert lock.main(["check", "--lock", str(copy)]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [f"installed transformers {have}, locked 99.0.0"]
    assert "run make install" in out.err


def test_a_keying_mismatch_is_named_before_the_others():
    locked = {"attrs": "1.0", "faiss-cpu": "1.15.1", "zipp": "3.0"}
    have = {"attrs": "2.0", "faiss-cpu": "1.16.0"}
    assert lock.stale(locked, have) == [
        "installed faiss-cpu 1.16.0, locked 1.15.1",
        "installed attrs 2.0, locked 1.0",
        "zipp not installed, locked 3.0",
    ]


def test_torch_builds_of_one_release_are_the_same_version():
    assert lock.stale({"torch": "2.13.0+cpu"}, {"torch": "2.13.0+cu128"}) == []
    assert lock.stale({"torch": "2.13.0+cpu"}, {"torch": "2.14.0+cpu"}) == [
        "installed torch 2.14.0+cpu, locked 2.13.0+cpu"
    ]
    assert lock.stale({"numpy": "2.4.6"}, {"numpy": "2.4.6+local"}) != []


def test_the_lock_agrees_with_pyproject():
    assert lock.disagreements(lock.read(), lock.requirements()) == []


def test_a_pyproject_the_lock_does_not_satisfy_is_named():
    locked = {"faiss-cpu": "1.15.1", "numpy": "2.4.6"}
    reqs = [Requirement("faiss-cpu>=1.16"), Requirement("numpy>=1.26"), Requirement("newpkg==1")]
    assert lock.disagreements(locked, reqs) == [
        "pyproject.toml requires faiss-cpu>=1.16, requirements.lock locks 1.15.1",
        "pyproject.toml requires newpkg==1, which requirements.lock does not lock",
    ]


@pytest.mark.parametrize("line", ["numpy>=1.26", "numpy", "-e .", "https://example.invalid/x.whl"])
def test_a_lock_line_that_is_not_exact_is_refused(line):
    with pytest.raises(lock.LockError, match=r"requirements.lock:2: .* is not 'name==version'"):
        lock.parse("attrs==1.0\n" + line + "\n")


def test_diff_names_moved_packages_and_rekeyed_kinds():
    old = {"transformers": "5.24.0", "faiss-cpu": "1.15.1", "attrs": "1.0", "tokenizers": "0.23.3"}
    new = {"transformers": "5.25.0", "faiss-cpu": "1.15.1", "attrs": "2.0", "tokenizers": "0.23.4"}
    moved, kinds = lock.diff(old, new)
    assert moved == ["attrs 1.0 -> 2.0", "tokenizers 0.23.3 -> 0.23.4", "transformers 5.24.0 -> 5.25.0"]
    assert kinds == [
        "embedding_shard",
        "embeddings",
        "encoder_model",
        "unit_run",
        "units",
    ]  # a tokenizers patch keys nothing
    assert lock.diff(old, old) == ([], [])


def _keyed_distributions() -> set[str]:
    """Every literal passed to a ``version(...)`` or ``minor(...)`` call in harness/: the
    distributions whose installed versions enter artifact keys."""
    out = set()
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in {"version", "minor"} and isinstance(node.args[0].value, str):
                    out.add(node.args[0].value)
    return out


def test_every_distribution_that_keys_artifacts_is_in_keying():
    from packaging.utils import canonicalize_name

    keyed = {canonicalize_name(d) for d in _keyed_distributions()}
    assert {"torch", "transformers", "tokenizers", "faiss-cpu", "lightgbm"} <= keyed  # the scan finds them
    assert keyed - set(lock.KEYING) == set()
