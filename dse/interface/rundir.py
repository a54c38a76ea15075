"""A job's Hydra directory: a refused job leaves none behind; a job that failed keeps its traceback.

Hydra creates a job's directory (`hydra.run.dir`, or `hydra.sweep.dir`/`hydra.sweep.subdir` under
`dse -m`) and writes its `.hydra/` files and log before the job reads its config, so a config the
job refuses (a SpecError: one line, exit status 2) would leave them. The callback `RunDirs`
(conf/config.yaml, `hydra.callbacks`) notes, before Hydra creates anything, which of the run's (or
sweep's) directory and the folders above it exist; `tidy`, at the end of the command, removes each
refused job's directory unless it existed before, then the sweep directory when a sweep left
nothing in it but Hydra's `multirun.yaml`, then the folders above that the command created and
left empty. A job that ran, or failed for any other reason, keeps its directory; a failed job's
traceback is written there (`traceback_note`).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hydra.experimental.callback import Callback

#: What a sweep directory may hold and still be left by refused jobs only: Hydra's sweep config.
SWEEP_FILES = ("multirun.yaml",)


@dataclass(frozen=True)
class Before:
    """A run's (or sweep's) directory as it was before the command: the names inside it (None: it
    did not exist) and the folders above it that did not exist, nearest first."""

    root: Path
    entries: frozenset[str] | None
    created: tuple[Path, ...]


#: The directories of this process's Hydra runs and sweeps, noted by `RunDirs`.
_BEFORE: dict[Path, Before] = {}


def remember(directory: str | Path) -> Before:
    """Note the directory `directory` and the folders above it as they are now."""
    root = Path(os.path.abspath(directory))  # as Hydra writes runtime.output_dir
    entries = frozenset(p.name for p in root.iterdir()) if root.is_dir() else None
    created, up = [], root.parent
    while not up.exists():
        created.append(up)
        up = up.parent
    _BEFORE[root] = Before(root, entries, tuple(created))
    return _BEFORE[root]


class RunDirs(Callback):
    """Notes the run's or the sweep's directory before Hydra creates it (`remember`); both hooks
    run in the launching process, before any job."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        remember(str(config.hydra.run.dir))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        remember(str(config.hydra.sweep.dir))


def job_dir() -> str:
    """The running Hydra job's directory; '' without a Hydra context (a plain call of run_job)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.output_dir)
    except Exception:
        return ""


def _existed(path: Path) -> bool | None:
    """Whether `path` (a run directory, or a job's directory in a sweep's) existed before the
    command; None when no noted directory holds it (then it is never removed)."""
    for before in _BEFORE.values():
        if path == before.root:
            return before.entries is not None
        if before.root in path.parents:
            return before.entries is not None and path.relative_to(before.root).parts[0] in before.entries
    return None


def discard(directory: str | Path) -> None:
    """Remove a refused job's directory unless it existed before the command (then only what the
    command added inside it, when it is a noted run directory), or is not one this process noted;
    and the folders between it and its run's directory that it alone held."""
    if not directory:
        return
    path = Path(os.path.abspath(directory))
    before = _BEFORE.get(path)
    if before is not None and before.entries is not None:  # hydra.run.dir given, or an earlier run's second
        for p in path.iterdir():
            if p.name in before.entries:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        return
    if _existed(path) is not False:
        return
    shutil.rmtree(path, ignore_errors=True)
    for up in path.parents:
        if _existed(up) is not False or up in _BEFORE or any(up.iterdir()):
            break
        up.rmdir()


def tidy(refused: Iterable[str] = ()) -> None:
    """The end of a command: every refused job's directory removed (`discard`); then each noted
    run or sweep directory the command created that holds nothing but `SWEEP_FILES`, and the
    folders above it the command created and left empty; then forget them all."""
    for directory in refused:
        discard(directory)
    try:
        for before in _BEFORE.values():
            root = before.root
            if before.entries is None and root.is_dir() and all(p.name in SWEEP_FILES for p in root.iterdir()):
                shutil.rmtree(root, ignore_errors=True)
            for up in before.created:
                if root.exists() or not up.is_dir() or any(up.iterdir()):
                    break
                up.rmdir()
    finally:
        _BEFORE.clear()


def traceback_note() -> str:
    """' (traceback: PATH)': the exception being handled, written beside the job's Hydra log (a job
    that failed for a reason other than its config keeps its directory); '' without a Hydra
    context or where it cannot be written."""
    import traceback

    directory = job_dir()
    if not directory:
        return ""
    path = Path(directory) / "traceback.txt"
    try:
        path.write_text(traceback.format_exc())
    except OSError:  # an unwritable directory: the one line alone
        return ""
    return f" (traceback: {path})"
