"""The Java bootstrap: fresh interpreters, since a JVM starts once per process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts a JVM in a subprocess

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_pyserini_imports_without_java_home_or_openai_key():
    p = _run(
        "import harness.jvm as j\nfrom pyserini.search.lucene import LuceneSearcher\n"
        "import os\nprint(j.versions()['java'].split('.')[0], os.environ['OPENAI_API_KEY'])"
    )
    assert p.returncode == 0, p.stderr[-2000:]
    major, key = p.stdout.split()[-2:]
    assert int(major) >= 21
    assert key.startswith("unused-placeholder")


def test_existing_openai_key_is_kept():
    p = _run("import harness.jvm, os\nprint(os.environ['OPENAI_API_KEY'])", OPENAI_API_KEY="sk-user")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().endswith("sk-user")


def test_old_java_home_gives_one_clear_error(tmp_path):
    fake = tmp_path / "jdk17"
    (fake / "bin").mkdir(parents=True)
    (fake / "release").write_text('JAVA_VERSION="17.0.15"\n')
    p = _run("import harness.jvm", JAVA_HOME=str(fake))
    assert p.returncode != 0
    assert "JavaError" in p.stderr and "Java 17" in p.stderr and "unset JAVA_HOME" in p.stderr


def test_java_home_without_java_is_reported(tmp_path):
    p = _run("import harness.jvm", JAVA_HOME=str(tmp_path))
    assert p.returncode != 0 and "has no bin/java" in p.stderr
