"""The process-wide JAX settings `dse` relies on, applied only when asked (`configure`).

Importing `dse` or `kernels` changes nothing in the process: no environment variable, no JAX
option. `configure()` applies, once and in this order:

* XLA flags, read by JAX once, when its CPU backend starts (the first computation or
  `jax.devices()`); `configure` must therefore run before that, and warns when it comes too late.
  - One XLA host device per core (`--xla_force_host_platform_device_count`), so that the search
    engine splits each chunk over the cores (`dse.explore.engine.ChunkKernel`).
  - On x86 CPUs, no FMA (`--xla_cpu_max_isa=AVX`). LLVM contracts a*b + c into one fused
    multiply-add in some loops and not in others, so a candidate evaluated alone (a scalar program)
    and the same candidate inside a vectorized batch would differ in the last bit. Without FMA, and
    with the habits of `kernels.numerics`, they agree bit for bit; the kernels run as fast either
    way (`dse bench`). This holds for the whole process: other JAX CPU code loses AVX2/FMA too.
  Flags already present in XLA_FLAGS are left as they are.
* JAX's persistent compilation cache, so that a second process does not compile again; in its
  directory dse keeps its compiled kernel programs (`dse.explore.programs`: a second process neither
  traces nor compiles them) and its config compositions (`dse.interface.overrides.compose`).
* JAX's 64-bit mode for the whole process (`x64=True`), for code that calls the kernels directly.

The `dse` command calls `configure()` first, and so does each Hydra job. The Python API does not
need it for its numbers: `dse.evaluate`, `evaluate_many`, `search`, `run_search`, the traffic and
network-cost functions run under a scoped 64-bit mode (`float64`), whatever the process's setting;
only bit-for-bit agreement between a candidate alone and inside a batch needs the XLA flags.

Environment variables, read when an argument is left as None:

    DSE_CPU_DEVICES=N      host devices (default: the cores this process may run on)
    DSE_ALLOW_FMA=1        keep FMA (batches still agree with each other exactly, and with single
                           evaluations to about 1e-15)
    DSE_COMPILE_CACHE=0    no persistent compilation cache (and no kept programs or compositions)
    DSE_KEEP_PROGRAMS=0    no kept programs (`dse.explore.programs`; JAX's cache stays on): for a
                           process that compiles many programs once each, which keeping would only
                           slow (serializing each, loading it back and running it), as the tests do
    DSE_CACHE_DIR=PATH     where the cache lives (default ~/.cache/dse/jax)
    DSE_CACHE_MB=N         megabytes each of dse's kept programs and compositions may hold (default
                           1024; the least recently used go first)
    DSE_DEVICE_STREAM=M    on, off or auto (default): whether searches that keep only their top-k
                           and counts expand and reduce their candidates in the program
                           (`dse.explore.device_stream`; auto: on an accelerator)
"""

from __future__ import annotations

import functools
import os
import platform
import warnings
from pathlib import Path
from typing import Callable, NamedTuple, TypeVar

import jax

try:  # jax >= 0.6: the scoped switch is public at the top level
    _x64_scope = jax.enable_x64
except AttributeError:  # older JAX
    from jax.experimental import enable_x64 as _x64_scope

F = TypeVar("F", bound=Callable)


class Settings(NamedTuple):
    """What `configure` applied (or found already applied)."""

    xla_flags: str  # XLA_FLAGS after configure
    xla_flags_effective: bool  # False when JAX's CPU backend had started before the flags were set
    compile_cache: Path | None  # the persistent compilation cache directory, None when off
    x64: bool  # JAX's process-wide 64-bit mode


def _env_flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default) not in ("", "0")


def keeps_programs() -> bool:
    """Whether compiled kernel programs are kept on disk ($DSE_KEEP_PROGRAMS, default on; only where
    the persistent cache is on)."""
    return _env_flag("DSE_KEEP_PROGRAMS", "1")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def xla_flags(cpu_devices: int | None = None, allow_fma: bool | None = None, current: str = "") -> str:
    """XLA_FLAGS with dse's flags added to `current` (flags already in it are kept as they are)."""
    extra = []
    if "xla_force_host_platform_device_count" not in current:
        if cpu_devices is None:
            text = os.environ.get("DSE_CPU_DEVICES", "").strip()
            if text and (not text.isdigit() or int(text) < 1):
                raise ValueError(f"DSE_CPU_DEVICES = {text!r}: expected a whole number of host devices >= 1")
            n = int(text) if text else _cores()
        else:
            n = int(cpu_devices)
        extra.append(f"--xla_force_host_platform_device_count={max(n, 1)}")
    fma = _env_flag("DSE_ALLOW_FMA") if allow_fma is None else bool(allow_fma)
    if not fma and "xla_cpu_max_isa" not in current and platform.machine().lower() in ("x86_64", "amd64"):
        extra.append("--xla_cpu_max_isa=AVX")
    return " ".join([current] + extra).strip()


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX without this query: assume not started
        return False


def enable_compile_cache(path: str | os.PathLike | None = None) -> Path:
    """Turn on JAX's persistent compilation cache (default: $DSE_CACHE_DIR or ~/.cache/dse/jax)."""
    if path is None:
        path = os.environ.get("DSE_CACHE_DIR") or Path.home() / ".cache" / "dse" / "jax"
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def cache_dir() -> Path | None:
    """The directory of dse's caches: JAX's persistent compilation cache, with `programs/`
    (`dse.explore.programs`) and `config/` (`dse.interface.overrides.compose`) in it; None when it is off."""
    if not jax.config.jax_compilation_cache_dir or not jax.config.jax_enable_compilation_cache:
        return None
    return Path(jax.config.jax_compilation_cache_dir)


#: Bytes each of dse's own caches keeps at most (`DSE_CACHE_MB`, default 1024): past it, the files
#: used least recently are removed when a new one is written (`prune`).
DEFAULT_CACHE_MB = 1024


def cache_limit() -> int:
    """The byte limit of each of dse's own caches (`programs/`, `config/`): $DSE_CACHE_MB
    megabytes, else `DEFAULT_CACHE_MB`."""
    text = os.environ.get("DSE_CACHE_MB", "").strip()
    if not text:
        return DEFAULT_CACHE_MB << 20
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"DSE_CACHE_MB = {text!r}: expected a number of megabytes >= 0")
    return int(mb * (1 << 20))


def prune(directory: Path, suffix: str, limit: int, keep: Path | None = None) -> int:
    """Remove the least recently used files `*suffix` of `directory` (oldest modification time
    first: a cache touches a file when it serves it) until they hold at most `limit` bytes; never
    `keep` (the file just written). Returns the files removed. Files another process removes
    meanwhile are skipped."""
    entries = []
    try:
        for entry in os.scandir(directory):
            if entry.name.endswith(suffix) and entry.is_file():
                try:
                    st = entry.stat()
                except OSError:
                    continue
                entries.append((st.st_mtime, entry.name, st.st_size))
    except OSError:
        return 0
    total = sum(size for _, _, size in entries)
    removed = 0
    for _, name, size in sorted(entries):
        if total <= limit:
            break
        if keep is not None and name == keep.name:
            continue
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            continue
        total -= size
        removed += 1
    return removed


def keep_file(path: Path, data: bytes, check: Callable[[Path], object] | None = None) -> bool:
    """Keep `data` in `path` of one of dse's caches, whole or not at all: written to a temporary
    file beside it, checked (`check(temporary path)` raising: not kept), then renamed over `path`
    (concurrent processes may keep the same key); then the directory is held to `cache_limit`
    bytes of files like it (`prune`). False when nothing was kept (nowhere to write, or the check
    failed): a cache that cannot keep costs the keeping, never the run."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a write or check that fails keeps nothing
        Path(tmp).unlink(missing_ok=True)
        return False
    prune(path.parent, path.suffix, cache_limit(), keep=path)
    return True


def touch(path: Path) -> None:
    """Mark a cached file as just used (its modification time: what `prune` orders by)."""
    try:
        os.utime(path)
    except OSError:
        pass


_warned: set[str] = set()


def _warn_once(message: str, category: type[Warning], stacklevel: int) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, category, stacklevel=stacklevel + 1)


DEVICE_STREAM_MODES = {"auto": None, "on": True, "off": False}


def device_stream_env() -> bool | None:
    """$DSE_DEVICE_STREAM as True (on), False (off) or None (auto, also when unset); another value
    is a ValueError naming it."""
    text = os.environ.get("DSE_DEVICE_STREAM", "auto").strip().lower() or "auto"
    if text not in DEVICE_STREAM_MODES:
        raise ValueError(f"DSE_DEVICE_STREAM = {os.environ['DSE_DEVICE_STREAM']!r}: expected one of on, off, auto")
    return DEVICE_STREAM_MODES[text]


def configure(
    cpu_devices: int | None = None,
    allow_fma: bool | None = None,
    compile_cache: str | os.PathLike | None | bool = None,
    x64: bool = True,
) -> Settings:
    """Apply dse's process-wide JAX settings (module docstring); calling it again changes nothing.

    cpu_devices    XLA host devices (None: $DSE_CPU_DEVICES, else one per core)
    allow_fma      keep FMA on x86 (None: $DSE_ALLOW_FMA)
    compile_cache  a directory, False (leave the cache off), or None: off if $DSE_COMPILE_CACHE=0,
                   else $DSE_CACHE_DIR or ~/.cache/dse/jax
    x64            turn on JAX's 64-bit mode for the whole process
    """
    cache_limit()  # a bad $DSE_CACHE_MB is an error here, before any work
    device_stream_env()  # and a bad $DSE_DEVICE_STREAM
    current = os.environ.get("XLA_FLAGS", "")
    flags = xla_flags(cpu_devices, allow_fma, current)
    effective = True
    if flags != current:
        effective = not _backend_started()
        if effective:
            os.environ["XLA_FLAGS"] = flags
        else:
            flags = current
            _warn_once("dse.configure(): JAX's CPU backend has already started, so the XLA flags "
                       "(host devices, no FMA) do not apply; call dse.configure() before any JAX "
                       "computation", RuntimeWarning, stacklevel=2)
    if compile_cache is None:
        compile_cache = _env_flag("DSE_COMPILE_CACHE", "1")
    cache = None
    if compile_cache is not False:
        cache = enable_compile_cache(None if compile_cache is True else compile_cache)
    elif jax.config.jax_compilation_cache_dir:
        cache = Path(jax.config.jax_compilation_cache_dir)
    if x64:
        jax.config.update("jax_enable_x64", True)
    return Settings(flags, effective, cache, bool(jax.config.jax_enable_x64))


def float64(fn: F) -> F:
    """Run `fn` with JAX's 64-bit types on (`jax.enable_x64`, scoped to the call and its thread),
    so that its results are float64/int64 whether or not the process turned 64-bit mode on."""

    @functools.wraps(fn)
    def scoped(*args, **kwargs):
        with _x64_scope(True):
            return fn(*args, **kwargs)

    return scoped
