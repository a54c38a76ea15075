"""`dse.explore.programs`: a compiled program is kept on disk and comes back in a later call without being
traced or compiled, with the same numbers; a different program never shares its file; a damaged
file is compiled again and replaced."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dse.explore import programs
from dse.explore.engine import ChunkKernel, profile_of, space_options, stack_systems
from dse.explore.placement import enumerate_space
from dse.explore.space import COLUMNS, Question
from dse.spec.specs import load_model, load_system


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setattr(programs, "program_dir", lambda: tmp_path)
    return tmp_path


def test_a_program_comes_back_from_disk_untraced(disk):
    traces = []

    def make():  # a new jitted function each time: nothing kept in this process's memory
        @jax.jit
        def f(x, y):
            traces.append(x.shape)
            return jnp.sin(x) * y + jnp.floor_divide(x, 3.0)

        return f

    args = (np.arange(8.0), np.float64(2.5))
    first = programs.compile(make(), args, ("f",))
    assert len(traces) == 1 and len(list(disk.glob("*.exe"))) == 1
    again = programs.compile(make(), args, ("f",))
    assert len(traces) == 1  # loaded: not traced again
    want = np.sin(np.arange(8.0)) * 2.5 + np.floor_divide(np.arange(8.0), 3.0)
    np.testing.assert_allclose(np.asarray(again(*args)), want, rtol=1e-15)
    np.testing.assert_array_equal(np.asarray(again(*args)), np.asarray(first(*args)))
    # another shape, or another static description: another program, another file
    programs.compile(make(), (np.arange(16.0), np.float64(2.5)), ("f",))
    programs.compile(make(), args, ("g",))
    assert len(traces) == 3 and len(list(disk.glob("*.exe"))) == 3
    # a damaged file: compiled again and replaced by one that loads
    path = disk / f"{programs.program_key(('f', 1), args)}.exe"
    assert path.exists()
    path.write_bytes(b"not a program")
    fixed = programs.compile(make(), args, ("f",))
    assert len(traces) == 4
    np.testing.assert_array_equal(np.asarray(fixed(*args)), np.asarray(first(*args)))
    programs.compile(make(), args, ("f",))
    assert len(traces) == 4 and not list(disk.glob("*.tmp"))


def test_a_program_runs_where_nothing_can_be_kept(tmp_path, monkeypatch):
    """A cache directory that cannot be written (here: below a file) costs the keeping, not the run."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(programs, "program_dir", lambda: blocked / "programs")
    f = jax.jit(lambda x: x * 2.0 + 1.0)
    prog = programs.compile(f, (np.arange(4.0),), ("blocked",))
    np.testing.assert_array_equal(np.asarray(prog(np.arange(4.0))), [1.0, 3.0, 5.0, 7.0])


def test_the_search_program_from_disk_gives_the_same_scores(disk, monkeypatch):
    """The chunk program (split over the host devices) saved by one kernel and loaded by a new one
    gives bit-identical scores, without tracing the cost model."""
    prof = profile_of("lbnl")
    m, s = load_model("gpt3_1t"), load_system("b200")
    cand = enumerate_space(Question(m, "tp2d", 4096, **space_options(prof)), 1024, 8)
    table = np.stack([cand[c][:1024] for c in COLUMNS])
    table = np.concatenate([table, np.repeat(table[:, :1], 1024 - table.shape[1], axis=1)], axis=1)
    w, sp = m.workload(4096), stack_systems([s.params(), s.replace(hbm_capacity=96.0).params()])
    first = ChunkKernel("tp2d", prof, 1024, 2)(table, w, sp)
    assert len(list(disk.glob("*.exe"))) == 1

    def no_tracing(*a, **k):
        raise AssertionError("traced again")

    monkeypatch.setattr("dse.explore.engine.evaluate_candidates", no_tracing)
    again = ChunkKernel("tp2d", prof, 1024, 2)(table, w, sp)
    assert np.isfinite(first["score"]).any()
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])


def test_a_composition_comes_back_from_disk(tmp_path, monkeypatch):
    """`dse.interface.overrides.compose` keeps a successful composition and serves it to a later call
    without Hydra; an interpolating line is composed every time; an error is never kept; the key
    changes with any file of the config tree."""
    import shutil

    from dse.interface import overrides
    from dse.spec.specs import SpecError

    monkeypatch.setattr("dse.runtime.cache_dir", lambda: tmp_path)
    lines = ["model=gpt3_1t", "system=b200", "system.nvs_size=8", "n_gpus=[256,512]", "strategy=tp2d"]
    first = overrides.compose(lines)
    assert len(list((tmp_path / "config").glob("*.json"))) == 1
    calls = []
    real = overrides._compose
    monkeypatch.setattr(overrides, "_compose", lambda ls: calls.append(ls) or real(ls))
    again = overrides.compose(lines)
    assert again == first and calls == []  # read back, not composed
    assert again["system"]["nvs_size"] == 8 and again["n_gpus"] == [256, 512] and again["model"]["name"] == "gpt3_1t"
    overrides.compose([*lines, "study=${model.name}"])
    overrides.compose([*lines, "study=${model.name}"])
    assert len(calls) == 4  # two compositions each time (the tree's keys, then the config): never kept
    for _ in range(2):
        with pytest.raises(SpecError, match="nvs_sise"):
            overrides.compose([*lines, "system.nvs_sise=8"])
    assert len(list((tmp_path / "config").glob("*.json"))) == 1
    # the key covers every file of the tree
    tree = tmp_path / "conf"
    shutil.copytree(overrides.CONF_DIR, tree)
    monkeypatch.setattr(overrides, "CONF_DIR", tree)
    before = overrides._config_digest()
    (tree / "system" / "b200.yaml").write_text((tree / "system" / "b200.yaml").read_text() + "\n# edited\n")
    assert overrides._config_digest()[0] != before[0]


def test_prune_removes_the_least_recently_used_first(tmp_path):
    """Files of 100 bytes used at times 1..6: with a limit of 350 bytes the three oldest go (the
    newest three, 300 bytes, stay); other suffixes and the file just written are never removed."""
    from dse.runtime import prune

    for t in range(1, 7):
        f = tmp_path / f"p{t}.exe"
        f.write_bytes(b"x" * 100)
        os.utime(f, (t, t))
    other = tmp_path / "note.json"
    other.write_bytes(b"y" * 1000)
    os.utime(other, (0, 0))
    assert prune(tmp_path, ".exe", 350) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["note.json", "p4.exe", "p5.exe", "p6.exe"]
    assert prune(tmp_path, ".exe", 350) == 0
    # the file just written survives even as the oldest; the next oldest go in its stead
    os.utime(tmp_path / "p4.exe", (0, 0))
    assert prune(tmp_path, ".exe", 150, keep=tmp_path / "p4.exe") == 2
    assert sorted(p.name for p in tmp_path.glob("*.exe")) == ["p4.exe"]
    assert prune(tmp_path / "missing", ".exe", 0) == 0


def test_a_served_program_is_touched_and_the_cache_is_held_to_its_limit(disk, monkeypatch):
    """Serving a kept program marks it used; writing a new one past $DSE_CACHE_MB removes the
    program used least recently, not the one just served."""
    f = jax.jit(lambda x: x * 3.0)
    a, b = (np.arange(4.0),), (np.arange(8.0),)
    programs.compile(f, a, ("f",))
    programs.compile(f, b, ("f",))
    pa, pb = (disk / f"{programs.program_key(('f', 1), x)}.exe" for x in (a, b))
    os.utime(pa, (100, 100))
    os.utime(pb, (200, 200))
    programs.compile(f, a, ("f",))  # served from disk: now the most recent
    assert pa.stat().st_mtime > pb.stat().st_mtime
    size = max(pa.stat().st_size, pb.stat().st_size)
    monkeypatch.setenv("DSE_CACHE_MB", str(2.5 * size / (1 << 20)))  # room for two programs
    c = (np.arange(16.0),)
    programs.compile(f, c, ("f",))
    pc = disk / f"{programs.program_key(('f', 1), c)}.exe"
    assert pa.exists() and pc.exists() and not pb.exists()


@pytest.mark.parametrize("var,value", [("DSE_CACHE_MB", "lots"), ("DSE_CACHE_MB", "-1"),
                                       ("DSE_CPU_DEVICES", "two"), ("DSE_CPU_DEVICES", "0")])
def test_a_bad_environment_variable_is_one_line_naming_it(var, value, monkeypatch, capsys):
    from dse.cli import main

    monkeypatch.setenv(var, value)
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # so that the device count is read
    assert main(["eval", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dse: error: {var} = {value!r}")


def test_the_top_rows_program_is_loaded_while_the_search_runs(disk, monkeypatch):
    """A search whose every-metric program a previous process kept starts loading it in a
    background thread (`prefetch_table_program`) and finishes with the same top rows."""
    import threading

    from dse.explore import engine
    from dse.explore.search import run_search

    kw = dict(model="gpt3_1t", system="b200", strategy="tp1d", n_gpus=[256, 512], nvs_size=8, top_k=3,
              profile="lbnl")
    # a fresh process: an executable of this program that JAX's cache served an earlier test in this
    # one (the suite keeps no programs, DSE_KEEP_PROGRAMS=0) would not serialize whole, so nothing would be kept
    jax.clear_caches()
    monkeypatch.setattr(engine, "_TABLE_PROGRAMS", {})  # none in memory, so this run keeps it under `disk`
    first = run_search(**kw)
    assert len(engine._TABLE_PROGRAMS) == 1
    monkeypatch.setattr(engine, "_TABLE_PROGRAMS", {})  # a new process: nothing in memory
    loads = []
    real = programs.load

    def spy(path, devices):
        loads.append(threading.current_thread() is not threading.main_thread())
        return real(path, devices)

    monkeypatch.setattr(programs, "load", spy)
    again = run_search(**kw)
    assert loads.count(True) == 1  # the table program, off the main thread
    assert again.top.equals(first.top)
    assert not engine._LOADING


def test_keeping_programs_can_be_turned_off(monkeypatch, tmp_path):
    """$DSE_KEEP_PROGRAMS=0 keeps no program (JAX's cache stays on); any other value keeps them in the
    cache's programs/ folder: the same compilation writes a file there with it on and none with it off."""
    import dse.runtime

    monkeypatch.setattr(dse.runtime, "cache_dir", lambda: tmp_path)  # the persistent cache on, here
    kept = tmp_path / "programs"
    monkeypatch.setenv("DSE_KEEP_PROGRAMS", "1")
    assert programs.program_dir() == kept
    x = np.float64(1.5)
    assert float(programs.compile(jax.jit(lambda v: 2.0 * v), (x,), ("on",))(x)) == 3.0
    assert len(list(kept.glob("*.exe"))) == 1
    monkeypatch.setenv("DSE_KEEP_PROGRAMS", "0")
    assert programs.program_dir() is None
    assert float(programs.compile(jax.jit(lambda v: 3.0 * v), (x,), ("off",))(x)) == 4.5
    assert len(list(kept.glob("*.exe"))) == 1  # nothing more kept
