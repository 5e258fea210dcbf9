"""The console a person reads while a sweep runs: the plan, one progress bar, each warning once,
and a summary at the end. Everything else goes to the sweep's log file.

A sweep builds hundreds of artifacts, and the store logs a line for each one it builds or reuses;
the libraries under it (transformers, huggingface_hub, the harness's own per-stage bars) print
bars and notices of their own. On a terminal that is hundreds of lines that break the sweep's
progress bar apart, with the result at the end scrolled away. So during a sweep:

* every INFO line (the store's ``building`` / ``built`` / ``reused``, dataset summaries, the
  calibration) goes to the log file only, whose path the sweep prints first and last;
* the console gets warnings and errors, written above the progress bar (:func:`tqdm.write`), each
  (logger, message) once: a warning that every experiment repeats with other numbers is shown
  the first time and counted after, the log has them all;
* one progress bar over the experiments, its postfix the stage being built now (from the store's
  ``building`` lines), with tqdm's rate and ETA;
* the libraries' progress bars and the harness's per-stage bars (units, encoding batches) are off.

``-v`` (or ``log=info`` / ``log=debug``) brings the INFO lines (or DEBUG) back to the console, and
the inner bars with them.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"

_inner_bars = True


def inner_bars() -> bool | None:
    """``disable=`` for a stage's own progress bar: ``None`` (tqdm's default: on in a terminal)
    outside a quiet sweep, ``True`` (off) inside one."""
    return None if _inner_bars else True


class Once(logging.Filter):
    """Passes the first record of each (logger, message template) and counts the others."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()
        self.repeats = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        if key in self.seen:
            self.repeats += 1
            return False
        self.seen.add(key)
        return True


class _AboveTheBar(logging.StreamHandler):
    """Writes through tqdm, so that a line printed while the bar runs does not break it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001  (logging's own convention: report, never raise)
            self.handleError(record)


class _StageOnTheBar(logging.Handler):
    """The store's ``building <what> <key>`` lines become the bar's postfix: what is being built now."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.bar: tqdm | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.bar is not None and record.name == "harness.store" and str(record.msg).startswith("building "):
            what = record.getMessage()[len("building ") :].rsplit(" ", 1)[0]
            self.bar.set_postfix_str(what[:48], refresh=True)


class Console:
    """A sweep's logging, set up by :func:`open_console` and put back by :meth:`close`."""

    def __init__(self, log_file: Path, level: int) -> None:
        global _inner_bars
        self.log_file, self.level = log_file, level
        self.once = Once()
        self.stage = _StageOnTheBar()
        root = logging.getLogger()
        self._saved = (root.level, list(root.handlers), _inner_bars)
        for h in list(root.handlers):
            root.removeHandler(h)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self.file = logging.FileHandler(log_file, encoding="utf-8")
        self.file.setLevel(min(level, logging.INFO))
        self.file.setFormatter(logging.Formatter(FORMAT))
        self.screen = _AboveTheBar(sys.stderr)
        self.screen.setLevel(level)
        self.screen.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        if level >= logging.WARNING:
            self.screen.addFilter(self.once)
        root.setLevel(min(level, logging.INFO))
        for h in (self.file, self.screen, self.stage):
            root.addHandler(h)
        for noisy in ("faiss.loader", "urllib3", "filelock"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        if level >= logging.WARNING:  # the libraries' bars and notices, and the stages' own bars
            _inner_bars = False
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

    def progress(self, items, total: int, desc: str = "sweep"):
        """One bar over ``items``; the stage being built shows as its postfix."""
        bar = tqdm(items, total=total, desc=desc, unit=" exp", disable=None, dynamic_ncols=True, file=sys.stderr)
        self.stage.bar = bar
        return bar

    def close(self) -> None:
        global _inner_bars
        self.stage.bar = None
        root = logging.getLogger()
        for h in (self.file, self.screen, self.stage):
            root.removeHandler(h)
        self.file.close()
        level, handlers, _inner_bars = self._saved
        root.setLevel(level)
        for old in handlers:
            root.addHandler(old)


def level_of(argv_flags: dict[str, str], verbose: bool) -> int:
    """The console's level: ``log=warning`` (default), ``log=info`` (or ``-v``), ``log=debug``."""
    name = "info" if verbose else argv_flags.get("log", "warning")
    levels = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
    if name.lower() not in levels:
        raise ValueError(f"log={name}: expected one of {sorted(levels)}")
    return levels[name.lower()]


def open_console(log_file: Path, level: int = logging.WARNING) -> Console:
    return Console(log_file, level)
