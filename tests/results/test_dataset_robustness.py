"""Datasets a user can trust (`dse.results.io`): categorical columns stored by name, reruns that
replace rows rather than add them, and one line naming the file for every dataset that cannot be
read. Tiny real datasets written by `run_job` (Llama 3 8B, DGX H100, 1D TP, 8 and 16 GPUs)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from dse.cli import main as cli
from dse.commands.query import parse_where
from dse.figures.study import plot
from dse.interface.app import run_job
from dse.interface.table import render_frame, with_mechanisms
from dse.results import io, query
from dse.results.report import DrawFigures
from dse.spec.specs import SpecError
from kernels.params import FULL, NO_RECOMPUTE, PRECISIONS, RECOMPUTE, SELECTIVE

TOP_K = 3


def job(root: Path, *overrides: str):
    with initialize_config_module(config_module="dse.conf", version_base=None):
        cfg = compose(config_name="config", overrides=[
            "model=llama3_8b", "system=dgx_h100", "strategy=tp1d", f"search.top_k={TOP_K}", "study=s",
            f"output.root={root}", "search.progress=false", "profile.precision=any", *overrides])
    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("sweep", None)
    return run_job(data, echo=lambda *_: None)


def files(root: Path) -> list[Path]:
    return sorted(root.glob("model=*/system=*/strategy=*/*.parquet"))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """One file: every row of 8 and 16 GPUs, bf16 and fp8 searched (profile.precision=any)."""
    root = tmp_path_factory.mktemp("base")
    job(root, "n_gpus=[8,16]", "output.rows=all")
    return root / "s"


@pytest.fixture
def copy(base, tmp_path) -> Path:
    """A private copy of the base dataset, to damage."""
    shutil.copytree(base, tmp_path / "s")
    return tmp_path / "s"


def rewrite(path: Path, frame: pl.DataFrame, version: int | None = None, rows: int | None = None,
            keep_written: bool = True) -> None:
    """Write `frame` over the file at `path` with its dse metadata, as another schema version would."""
    kv = dict(pq.read_metadata(path).metadata)
    meta = json.loads(kv[b"dse"])
    meta["schema_version"] = version or meta["schema_version"]
    kv[b"dse"] = json.dumps(meta).encode()
    kv[io.ROWS_KEY] = str(len(frame) if rows is None else rows).encode()
    if not keep_written:
        kv.pop(io.WRITTEN_KEY, None)
    pq.write_table(frame.to_arrow().replace_schema_metadata(kv), path)


def added_since(version: int) -> list[str]:
    """The columns of `io.ADDED` a file of schema `version` lacks."""
    return [c for c, v in io.ADDED.items() if v > version]


def as_schema10(frame: pl.DataFrame) -> pl.DataFrame:
    """A schema-11 frame as schema 10 stored it: no t_host nor host_moe_time."""
    return frame.drop(*added_since(10))


def as_schema9(frame: pl.DataFrame) -> pl.DataFrame:
    """A schema-11 frame as schema 9 stored it: no matrix_flops_fp4 nor fp4_eff, none of the later columns."""
    return frame.drop(*added_since(9))


def as_schema8(frame: pl.DataFrame) -> pl.DataFrame:
    """A schema-11 frame as schema 8 stored it: no t_ep_comm (t_tp_comm held the all-to-alls), no
    host_bandwidth, none of the later columns."""
    return frame.with_columns(pl.col("t_tp_comm") + pl.col("t_ep_comm")).drop(*added_since(8))


def as_schema7(frame: pl.DataFrame) -> pl.DataFrame:
    """A schema-11 frame as schema 7 stored it: recompute and precision as codes, seq_par 0/1."""
    return as_schema8(frame).with_columns(pl.col("recompute").to_physical().cast(pl.Int64),
                              pl.col("precision").to_physical().cast(pl.Int64),
                              pl.col("seq_par").cast(pl.Int64))


# --- B. categorical columns ------------------------------------------------------------------------

def test_dataset_stores_the_categorical_columns_by_name(base):
    path = files(base)[0]
    assert io.read_metadata(path)["schema_version"] == io.SCHEMA_VERSION == 11
    df = io.scan(base).collect()
    assert df.schema["recompute"] == pl.Enum(["none", "selective", "full"])
    assert df.schema["precision"] == pl.Enum(["bf16", "fp8", "nvfp4"])
    assert df.schema["seq_par"] == pl.Boolean and df.schema["zero"] == pl.Int64
    assert set(df["precision"]) == {"bf16", "fp8"}  # both searched
    assert set(df["recompute"]) == {"none", "selective", "full"}  # the default profile's modes
    assert set(df["seq_par"]) == {True}
    # the raw file says the same without dse: a plain Polars read
    raw = pl.read_parquet(path)
    assert raw.schema["recompute"] == pl.Enum(list(RECOMPUTE)) and raw["seq_par"].dtype == pl.Boolean


def test_the_names_follow_the_kernels_codes():
    assert (RECOMPUTE[NO_RECOMPUTE], RECOMPUTE[SELECTIVE], RECOMPUTE[FULL]) == ("none", "selective", "full")
    assert PRECISIONS == ("bf16", "fp8", "nvfp4")
    assert io.CATEGORIES == {"recompute": ("none", "selective", "full"), "precision": ("bf16", "fp8", "nvfp4")}


@pytest.mark.parametrize("column, codes, names", [
    ("recompute", [0, 1, 2, 1], ["none", "selective", "full", "selective"]),
    ("precision", [1, 0, 2, 1], ["fp8", "bf16", "nvfp4", "fp8"]),
    ("seq_par", [0, 1, 1], [False, True, True]),
])
def test_decode_maps_codes_to_names(column, codes, names):
    got = io.decode(pl.DataFrame({column: codes, "n1": list(range(len(codes)))}))
    assert got[column].to_list() == names
    assert got["n1"].to_list() == list(range(len(codes)))  # other columns untouched
    assert io.decode(got).equals(got)  # names pass unchanged
    lazy = io.decode(pl.LazyFrame({column: codes})).collect()
    assert lazy[column].to_list() == names


def test_decode_refuses_a_code_without_a_name():
    with pytest.raises(pl.exceptions.InvalidOperationError):
        io.decode(pl.DataFrame({"recompute": [0, 3]}))


def test_the_sort_order_of_names_is_the_order_of_codes():
    """The ranking's tie-break sorts the candidate columns; by name it must order as by code."""
    df = io.decode(pl.DataFrame({"recompute": [2, 0, 1], "precision": [1, 0, 1]}))
    assert df.sort("recompute")["recompute"].to_list() == ["none", "selective", "full"]
    assert df.sort("precision")["precision"].to_list() == ["bf16", "fp8", "fp8"]


def test_tables_print_codes_and_names_alike():
    codes = pl.DataFrame({"microbatch": [1, 2], "recompute": [1, 2], "seq_par": [1, 1], "precision": [0, 1],
                          "zero": [1, 3], "iteration_time": [1.5, 2.5]})
    a, cols_a = with_mechanisms(codes, ["microbatch", "iteration_time"])
    b, cols_b = with_mechanisms(io.decode(codes), ["microbatch", "iteration_time"])
    assert cols_a == cols_b == ["microbatch", "recompute", "precision", "zero", "iteration_time"]
    assert render_frame(a, cols_a) == render_frame(b, cols_b)
    assert a["recompute"].to_list() == ["selective", "full"] and a["precision"].to_list() == ["bf16", "fp8"]


@pytest.mark.parametrize("decoded", [False, True])
def test_tables_leave_out_mechanisms_at_their_unused_value(decoded):
    frame = pl.DataFrame({"microbatch": [1, 2], "recompute": [1, 1], "seq_par": [1, 1], "precision": [0, 0],
                          "zero": [1, 1]})
    frame = io.decode(frame) if decoded else frame
    assert with_mechanisms(frame, ["microbatch"])[1] == ["microbatch"]
    off = frame.with_columns(pl.Series("seq_par", [False, True]) if decoded else pl.Series("seq_par", [0, 1]))
    out, cols = with_mechanisms(off, ["microbatch"])
    assert cols == ["microbatch", "seq_par"] and out["seq_par"].to_list() == ["off", "on"]


def test_query_filters_by_name_or_code(base):
    lf = io.scan(base)
    fp8 = query.where(lf, precision="fp8").collect()
    assert len(fp8) > 0 and set(fp8["precision"]) == {"fp8"}
    assert query.where(lf, precision=1).collect().equals(fp8)
    both = query.where(lf, precision=["bf16", "fp8"]).collect()
    assert len(both) == len(lf.collect())
    with pytest.raises(KeyError, match="valid: bf16, fp8"):
        query.where(lf, precision="fp16")


@pytest.mark.parametrize("item, value", [
    ("recompute=full", "full"), ("precision=bf16,fp8", ["bf16", "fp8"]),
    ("seq_par=on", True), ("seq_par=false", False), ("feasible=yes", True),
])
def test_where_values_of_categorical_columns(base, item, value):
    schema = dict(io.scan(base).collect_schema())
    assert parse_where([item], schema) == {item.split("=")[0]: value}


@pytest.mark.parametrize("item, message", [
    ("recompute=2", "recompute='2': not a value of recompute; valid: none, selective, full"),
    ("precision=fp4", "valid: bf16, fp8"),
    ("seq_par=maybe", "seq_par is true or false"),
])
def test_where_refuses_a_value_the_column_cannot_hold(base, item, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        parse_where([item], dict(io.scan(base).collect_schema()))


def test_query_optimum_prints_the_mechanisms_by_name(base, capsys):
    assert cli(["query", str(base), "optimum", "--where", "precision=fp8"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    # fp8 and none: not the unused values bf16 and selective
    assert header.index("precision") == header.index("recompute") + 1 == header.index("microbatch") + 2
    rows = [ln.split() for ln in out.splitlines()[2:] if not ln.startswith("reproduce")]
    assert len(rows) == 2 and [r[header.index("precision")] for r in rows] == ["fp8", "fp8"]  # 8 and 16 GPUs
    assert [r[header.index("recompute")] for r in rows] == ["none", "none"]
    assert [int(r[header.index("n_gpus")]) for r in rows] == [8, 16]


def test_query_optimum_reproduce_lines_give_each_rows_time(base, capsys):
    """Each optimum row is followed by the `dse eval` command that rebuilds its question from its
    file's metadata; run, it prints that row's seconds per iteration."""
    import shlex

    assert cli(["query", str(base), "optimum", "--where", "precision=fp8"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    times = [float(ln.split()[header.index("iteration_time")]) for ln in out.splitlines()[2:]
             if not ln.startswith("reproduce")]
    commands = [ln.split(": ", 1)[1] for ln in out.splitlines() if ln.startswith("reproduce (row ")]
    assert len(commands) == len(times) == 2
    for command, want in zip(commands, times):
        argv = shlex.split(command)
        assert argv[:2] == ["dse", "eval"] and "precision=fp8" in argv
        assert cli(argv[1:]) == 0
        got = float(re.search(r"^iteration ([0-9.e+-]+) s", capsys.readouterr().out, re.M).group(1))
        assert got == pytest.approx(want, rel=1e-4)  # the table prints 5 significant digits


def test_plot_takes_codes_and_names(base, tmp_path):
    rows = io.scan(base).collect()
    coded = as_schema7(rows)
    for frame, name in ((rows, "names"), (coded, "codes")):
        out = plot(frame, x="n_gpus", y="iteration_time", color="precision", out=tmp_path / f"{name}.png")
        assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SpecError, match="--y recompute: not a numeric column"):
        plot(coded, x="n_gpus", y="recompute", out=tmp_path / "no.png")


@pytest.mark.parametrize("version, old", [(7, "as_schema7"), (8, "as_schema8"), (9, "as_schema9"),
                                          (10, "as_schema10")])
def test_an_older_schema_file_reads_decoded(copy, version, old):
    """Schema 7 (integer codes, decoded), 8, 9 and 10: the columns later schemas added (`io.ADDED`: the
    all-to-alls, offloading, the host link in 9; the NVFP4 rate and efficiency in 10; the host wait
    and the host's MoE issue time in 11) read as null, the rest as written."""
    path = files(copy)[0]
    before = io.scan(copy).collect()
    rewrite(path, globals()[old](pl.read_parquet(path)), version=version)
    assert io.inspect(path).version == version
    after = io.scan(copy).collect()
    assert after.schema == before.schema
    assert all(after[c].null_count() == len(after) for c in added_since(version))
    expected = {10: as_schema10, 9: as_schema9}.get(version, as_schema8)(before)
    assert after.drop(*added_since(version)).equals(expected)


# --- C. reruns replace rows ------------------------------------------------------------------------

def test_a_rerun_over_overlapping_gpu_counts_replaces_their_rows(tmp_path, capsys):
    first = job(tmp_path, "n_gpus=[8,16]").files[0]
    second = job(tmp_path, "n_gpus=[16,32]").files[0]
    assert first != second and len(files(tmp_path / "s")) == 2
    df = io.scan(tmp_path / "s").collect()
    source = dict(df.group_by("n_gpus").agg(pl.col("job_id").unique()).iter_rows())
    assert source == {8: [first.stem], 16: [second.stem], 32: [second.stem]}
    assert len(df) == 3 * TOP_K and df.select("n_gpus", "rank").is_duplicated().sum() == 0
    summary = query.summary(io.scan(tmp_path / "s"))
    assert summary["rows"].to_list() == [3 * TOP_K] and (summary["n_min"][0], summary["n_max"][0]) == (8, 32)
    # rerunning the first job skips it (complete); 16 GPUs still read from the newer file
    again = job(tmp_path, "n_gpus=[8,16]")
    assert again.skipped == [first] and again.files == []
    assert io.scan(tmp_path / "s").collect().filter(pl.col("n_gpus") == 16)["job_id"].unique().to_list() == [second.stem]
    assert cli(["query", str(tmp_path / "s"), "summary"]) == 0
    line = capsys.readouterr().out.splitlines()[2].split()
    assert line[line.index("tp1d") + 3] == str(3 * TOP_K)  # rows: each group once


def test_fewer_rows_kept_replace_the_older_top_k(tmp_path):
    job(tmp_path, "n_gpus=[8]")
    job(tmp_path, "n_gpus=[8]", "search.top_k=2")
    df = io.scan(tmp_path / "s").collect()
    assert df["rank"].sort().to_list() == [1, 2]


def test_a_rerun_on_one_hardware_point_replaces_only_that_point(tmp_path):
    job(tmp_path, "n_gpus=[8]", "+search.grid.hbm_capacity=[80,96]")
    newer = job(tmp_path, "n_gpus=[8]", "system.hbm_capacity=96").files[0]
    df = io.scan(tmp_path / "s").collect()
    by_cap = dict(df.group_by("hbm_capacity").agg(pl.col("job_id").unique()).iter_rows())
    assert set(by_cap) == {80.0, 96.0} and by_cap[96.0] == [newer.stem] and by_cap[80.0] != [newer.stem]
    assert len(df) == 2 * TOP_K


def test_jobs_that_differ_in_host_link_keep_their_rows(tmp_path):
    """host_bandwidth (schema 9) is a hardware column of the row group: two jobs of one question
    on host links of 32 and 128 GB/s are two hardware points, both kept."""
    job(tmp_path, "n_gpus=[8]", "system.host_bandwidth=32")
    job(tmp_path, "n_gpus=[8]", "system.host_bandwidth=128")
    df = io.scan(tmp_path / "s").collect()
    assert sorted(df["host_bandwidth"].unique()) == [32.0, 128.0] and len(df) == 2 * TOP_K


def test_another_question_keeps_its_rows(tmp_path):
    """fp8 only and fp8-or-bf16 are both profile `default+custom`: different switches, different
    questions, both kept."""
    job(tmp_path, "n_gpus=[8]")
    job(tmp_path, "n_gpus=[8]", "profile.precision=fp8")
    df = io.scan(tmp_path / "s").collect()
    assert df["profile"].unique().to_list() == ["default+custom"]
    assert df["job_id"].n_unique() == 2 and len(df) == 2 * TOP_K


def test_a_file_from_before_the_upgrade_is_replaced_by_its_rerun(copy):
    """A schema-7 file (no close time stored: its modification time counts) and the current-schema file
    of the same question written after it: every group reads from the newer."""
    old = files(copy)[0]
    rows, meta = pl.read_parquet(old), io.read_metadata(old)
    rewrite(old, as_schema7(rows), version=7, keep_written=False)
    os.utime(old, ns=(10**18, 10**18))  # 2001
    new = io.write_file(old.with_name("0123456789abcdef.parquet"),
                        rows.with_columns(pl.lit("0123456789abcdef").alias("job_id")), meta)
    assert [io.inspect(p).version for p in files(copy)] == [io.SCHEMA_VERSION, 7]
    df = io.scan(copy).collect()
    assert df["job_id"].unique().to_list() == [new.stem] and len(df) == len(rows)


# --- D. one line naming the file -------------------------------------------------------------------

def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _random(p: Path):
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())


def _not_dse(p: Path):
    pl.DataFrame({"a": [1, 2]}).write_parquet(p)


def _schema(version: int):
    def damage(p: Path):
        rewrite(p, pl.read_parquet(p).drop("fp8_eff"), version=version)
    return damage


def _float_gpus(p: Path):
    rewrite(p, pl.read_parquet(p).with_columns(pl.col("n_gpus").cast(pl.Float64)))


def _missing(p: Path):
    rewrite(p, pl.read_parquet(p).drop("memory"))


def _extra(p: Path):
    rewrite(p, pl.read_parquet(p).with_columns(pl.lit(1).alias("speed")))


def _incomplete(p: Path):
    rewrite(p, pl.read_parquet(p), rows=999)


DAMAGE = {
    "truncated": (_truncate, "not a readable Parquet file"),
    "random bytes": (_random, "not a readable Parquet file"),
    "empty": (lambda p: p.write_bytes(b""), "not a readable Parquet file"),
    "not dse's": (_not_dse, "not a file of a dse dataset (no dse metadata); move it out of the dataset directory"),
    "schema 6": (_schema(6), "in dataset schema 6, which this dse no longer reads (schemas 7-11)"),
    "newer schema": (_schema(12), "written by a newer dse"),
    "column of another type": (_float_gpus, "column n_gpus is Float64, expected Int64"),
    "missing column": (_missing, "lacks column memory"),
    "extra column": (_extra, "has column speed not in schema 11"),
    "incomplete": (_incomplete, r"incomplete \(\d+ rows, 999 written\)"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_query_names_the_file_it_cannot_read(copy, capsys, kind):
    damage, what = DAMAGE[kind]
    bad = files(copy)[0].with_name("ffffffffffffffff.parquet")  # beside the good file
    shutil.copy(files(copy)[0], bad)
    damage(bad)
    assert cli(["query", str(copy), "summary"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"dse query: error: {bad}: ")
    assert re.search(what if kind == "incomplete" else re.escape(what), err)
    if kind != "not dse's":
        assert err.rstrip().endswith("; delete it and rerun the job that wrote it") or "upgrade dse" in err


def test_a_damaged_page_is_named_when_a_query_decodes_it(copy, capsys):
    """The footer reads, so the checks before a query pass; the query fails decoding a page and
    `diagnose` names the file."""
    path = files(copy)[0]
    col = next(pq.read_metadata(path).row_group(0).column(i) for i in range(90)
               if pq.read_metadata(path).row_group(0).column(i).path_in_schema == "iteration_time")
    data = bytearray(path.read_bytes())
    for i in range(col.data_page_offset, col.data_page_offset + col.total_compressed_size):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    assert io.inspect(path).version == io.SCHEMA_VERSION  # the footer alone says nothing
    with pytest.raises(io.DatasetError, match=f"^{path}: unreadable"):
        io.diagnose(copy)
    assert cli(["query", str(copy), "optimum"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dse query: error: {path}: unreadable") and err.count("\n") == 1


def test_report_names_the_file_it_cannot_read(copy, capsys, tmp_path):
    bad = files(copy)[0]
    _truncate(bad)
    assert cli(["report", "fig5", "--data", str(copy), "--out", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dse report: error: {bad}: not a readable Parquet file") and err.count("\n") == 1
    assert not (tmp_path / "f.png").exists()


def test_the_figure_callback_logs_the_file_and_goes_on(copy, caplog, tmp_path):
    bad = files(copy)[0]
    _random(bad)
    cfg = OmegaConf.create({"output": {"root": str(copy.parent)}, "study": copy.name})
    with caplog.at_level(logging.WARNING, logger="dse"):
        assert DrawFigures(["fig5"], out_dir=str(tmp_path)).draw(cfg) == []
    assert f"fig5 not drawn: {bad}: not a readable Parquet file" in caplog.text


def test_a_sound_dataset_passes_every_check(base):
    infos = [io.inspect(p) for p in files(base)]
    assert [i.version for i in infos] == [io.SCHEMA_VERSION] and io.diagnose(base) is None
    assert infos[0].written > 0 and len(infos[0].question) == 16
