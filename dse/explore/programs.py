"""Compiled kernel programs kept on disk, so that a new process neither traces nor compiles them.

JAX's persistent compilation cache (`dse.runtime.enable_compile_cache`) saves the compilation, but
its key is the lowered program: every process still traces the cost model (thousands of
operations) and lowers it before the cache can answer (the README's Speed section gives the times,
from `dse bench`'s compile column). `compile` keys a program instead by what determines it (the
source it is traced from, JAX's version, the devices, the host CPU and XLA flags, the static
arguments and the argument signature) and keeps the serialized executable next to JAX's cache, in
`programs/`. A later process loads it in tens of milliseconds.

Only an executable compiled in this process can be serialized whole (one that JAX's cache
loaded lacks its code on CPU), so a program missing from `programs/` is compiled with JAX's
cache off, saved, loaded back and run once on its lowering arguments before it is kept; a file
that does not load is compiled again and replaced. A program served is touched, and past
`dse.runtime.cache_limit` bytes ($DSE_CACHE_MB) the least recently used are removed. Off when JAX's persistent cache is off
(`DSE_COMPILE_CACHE=0`, or `dse.configure(compile_cache=False)`).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from dse.runtime import keep_file, touch

#: The source a program is traced from: the kernels, and the modules that wrap them in programs.
PROGRAM_SOURCES = ("kernels", "dse/explore/engine.py", "dse/spec/network.py", "dse/explore/programs.py", "dse/explore/device_stream.py")


@lru_cache(maxsize=None)
def source_digest(paths: tuple[str, ...] = ("dse", "kernels")) -> str:
    """SHA-256 of the Python files under `paths` (directories or files, relative to the project:
    every file's path and contents)."""
    h = hashlib.sha256()
    base = Path(__file__).resolve().parents[2]
    for root in paths:
        root = base / root
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            h.update(str(path.relative_to(base)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@lru_cache(maxsize=1)
def host_cpu() -> str:
    """The host CPU's model and feature flags (XLA compiles CPU code for the features it finds)."""
    text = ""
    try:
        with open("/proc/cpuinfo") as fh:
            text = "".join(ln for ln in fh if ln.startswith(("model name", "flags")))
    except OSError:
        pass
    lines = sorted(set(text.splitlines()))
    return "|".join([platform.machine(), platform.processor(), *lines])


def program_dir() -> Path | None:
    """Where programs are kept: `programs/` in JAX's persistent cache directory
    (`dse.runtime.cache_dir`); None when it is off or $DSE_KEEP_PROGRAMS=0 (`dse.runtime.keeps_programs`)."""
    from dse.runtime import cache_dir, keeps_programs

    root = cache_dir()
    return None if root is None or not keeps_programs() else root / "programs"


def _jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "")


def signature(args) -> tuple:
    """The argument structure, types, dtypes and shapes a compiled program is specific to."""
    leaves, tree = jax.tree.flatten(args)
    return str(tree), tuple((type(x).__name__, np.asarray(x).dtype.str, np.shape(x)) for x in leaves)


def program_key(what: tuple, args: tuple) -> str:
    """The key of a program: `what` (its static description: function, strategy, profile, ...), the
    argument structure and shapes, and everything of the process that changes the executable."""
    devices = jax.devices()
    parts = [
        source_digest(PROGRAM_SOURCES), host_cpu(), jax.__version__, _jaxlib_version(), os.environ.get("XLA_FLAGS", ""),
        f"{devices[0].platform}:{devices[0].device_kind}:{len(devices)}",
        f"x64={jax.config.jax_enable_x64}", repr(what), repr(signature(args)),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def load(path: Path, devices: list):
    """The program kept in `path`, loaded onto `devices` and marked used (raises if it does not load)."""
    program = _load(path, devices)
    touch(path)
    return program


def _load(path: Path, devices: list):
    from jax.experimental.serialize_executable import deserialize_and_load

    return deserialize_and_load(*pickle.loads(path.read_bytes()), execution_devices=devices)


def _save(path: Path, compiled, args: tuple, devices: list) -> None:
    """Serialize `compiled` and keep it (`dse.runtime.keep_file`) only if it loads back and runs
    on `args`."""
    try:
        from jax.experimental.serialize_executable import serialize

        payload = pickle.dumps(serialize(compiled))
    except Exception:  # noqa: BLE001 - not serializable: run without keeping it
        return
    keep_file(path, payload, lambda tmp: jax.block_until_ready(_load(tmp, devices)(*args)))


def kept_path(what: tuple, args: tuple, devices: int = 1) -> Path | None:
    """The file `compile` keeps this program in (None when programs are not kept)."""
    root = program_dir()
    return None if root is None else root / f"{program_key((*what, devices), args)}.exe"


def compile(fn: Callable, args: tuple, what: tuple, devices: int = 1) -> Any:
    """`fn.lower(*args).compile()` (fn jitted, running on the first `devices` devices), from
    `programs/` when it holds this program."""
    path = kept_path(what, args, devices)
    if path is None:
        return fn.lower(*args).compile()
    run_on = jax.devices()[:devices]
    if path.exists():
        try:
            return load(path, run_on)
        except Exception:  # noqa: BLE001 - stale or damaged: compile again and replace it
            pass
    from jax.experimental.compilation_cache import compilation_cache

    # JAX's cache off for this compilation: an executable it loaded does not serialize whole
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        compiled = fn.lower(*args).compile()
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        compilation_cache.reset_cache()
    _save(path, compiled, args, run_on)
    return compiled
