"""How ``make test`` spreads the suite over its workers (tests/conftest.py): the modules whose tests
share a module-scoped fixture each go to one worker, every other test alone, the slow tier first."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ONE_WORKER, ROOT, scope_of

SHARED_SCOPES = {"module", "package", "session"}


def shared_fixture_modules(root: Path) -> set[str]:
    """The test modules under ``root/tests`` that define a fixture living longer than one test
    (``scope=`` module, package or session), as node-id paths."""
    found = set()
    for path in sorted((root / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for d in node.decorator_list:
                scope = next((k.value for k in getattr(d, "keywords", []) if k.arg == "scope"), None)
                if isinstance(scope, ast.Constant) and scope.value in SHARED_SCOPES:
                    found.add(path.relative_to(root).as_posix())
    return found


def test_the_check_sees_a_module_fixture(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n@pytest.fixture(scope='module')\ndef world():\n    return 1\n"
        "@pytest.fixture\ndef plain():\n    return 2\n"
    )
    (tmp_path / "tests" / "test_y.py").write_text("import pytest\n@pytest.fixture()\ndef plain():\n    return 2\n")
    assert shared_fixture_modules(tmp_path) == {"tests/test_x.py"}


def test_each_module_with_a_shared_fixture_runs_on_one_worker():
    """A module that builds a fixture once for its tests, left out of ONE_WORKER, would build it on
    every worker that runs one of them (three times, each a run or a sweep)."""
    assert shared_fixture_modules(ROOT) == ONE_WORKER


def test_scopes_are_those_modules_whole_and_every_other_test_alone():
    assert scope_of("tests/test_gc.py::test_gc_refuses_rather_than_guess") == "tests/test_gc.py"
    assert scope_of("tests/test_slurm.py::test_four_shard_jobs_on_slurm_rank_as_unsharded") == "tests/test_slurm.py"
    one = "tests/test_sweep.py::test_listing_counts_distinct_indexes"
    assert scope_of(one) == one
    assert scope_of("tests/test_bad_inputs.py::test_x[a::b]") == "tests/test_bad_inputs.py"
