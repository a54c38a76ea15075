"""Parquet datasets of search results: schema, atomic writes, checked lazy scans.

A dataset is a directory of hive partitions `model=<m>/system=<s>/strategy=<t>/` holding one file
per job, named by a hash of everything that determines its rows (`job_id`). Files are written to a
temporary name in the same directory and renamed when complete. A file counts as complete only if
it verifies (`verify`): its footer reads, its row count equals the count stored in its metadata
when it was closed, and every row group decodes; a job whose file verifies is done and rerunning a
sweep skips it, any other file of the job is rebuilt (no row lost, none duplicated). The partition
columns are stored inside each file too, so any glob of the files (`pl.scan_parquet(
"outputs/data/x/**/*.parquet")`) has them.
Every other file dse writes (figures, traffic matrices) goes through the same rule (`atomic_path`).

Reading (`scan`) checks every file first, from its footer alone (`inspect`): a file that is not
Parquet, not dse's, incomplete, of an unreadable schema version or with a column of another type
is a `DatasetError` naming the file, what is wrong and what to do, in one line. Files of schema 7
(the candidate columns as integer codes) are read with their codes decoded. A damaged page that
only decoding finds is named by `diagnose` (every row group of every file decoded).

Reruns replace rows, never duplicate them. Two files answer the same *question* when their jobs
agree on the model, the system (by name), network, strategy, profile (name and switches), global
batch and economics (`question_id`); they may differ in GPU counts, NVS sizes, hardware grid, rows
kept (top-k, rows, keep), dse version and the contents of calibration or price files, so a rerun
after any of these changed replaces the older rows. Within one
question a row group is one GPU count on one hardware point (`ROW_GROUP`: n_gpus and every
hardware column, nvs_size included); every group is read from the newest file that holds it (the
time it was closed, `WRITTEN_KEY`; the file's modification time for files without one) and the
older files' rows of that group are left out. Files are never rewritten: `dse n_gpus=[64,128]`
then `dse n_gpus=[128,256]` into one study reads 64 from the first file and 128, 256 from the
second; rerunning the first job then skips it (its file is complete), and 128 still reads from the
second, the newer.

Schema (one row per configuration):

    model, system, strategy      str   partition columns (hive; also in the file, schema 6)
    job_id                       str   hash of the job's inputs (file name)
    profile                      str   lbnl | default (or "custom" with switches in the metadata)
    network                      str   network model (two_tier, rail_optimized, rail_only, any_to_any)
    global_batch, n_gpus         i64
    rank                         i64   1 = fastest of its group (null when every row is kept)
    n1 n2 n_p n_d microbatch     i64   parallel configuration (tp1d: n2 = 1)
    nvs1 nvs2 nvs_p nvs_d        i64   GPUs of each group inside one NVS domain
    n_b                          i64   SUMMA panels (1 for other strategies)
    interleave                   i64   model chunks per pipeline stage (interleaved 1F1B; lbnl: 1)
    recompute                    enum  activation recomputation: none | selective | full (schema 8;
                                       schema 7: i64 codes 0, 1, 2)
    seq_par                      bool  sequence parallelism on (schema 8; schema 7: i64 1 / 0)
    precision                    enum  matmul precision: bf16 | fp8 | nvfp4 (nvfp4 since schema 10;
                                       schema 8; schema 7: i64 codes 0, 1)
    zero                         i64   ZeRO stage: 0 none, 1 optimizer states, 2 + gradients,
                                       3 + parameters sharded over data parallelism (schema 4)
    ep                           i64   expert-parallel degree: experts sharded over ep data-parallel
                                       replicas (1 for dense models; schema 4)
    microbatches                 i64   m = global_batch / n_d / microbatch
    iteration_time               f64   s
    throughput                   f64   samples / s
    training_days                f64   days for the model's training set (null if none)
    memory                       f64   GB per GPU
    feasible                     bool  memory <= hbm_capacity
    t_compute t_memory t_tp_comm t_ep_comm t_dp_comm t_pp_comm t_bubble t_optimizer t_offload t_host
                                 f64   s, sum = iteration_time; t_ep_comm the MoE all-to-alls,
                                       t_offload CPU activation offloading's exposed copies
                                       (schema 9; null in files of schema 8 and before, whose
                                       t_tp_comm holds the all-to-alls), t_host the wait for the
                                       host to issue dropless MoE blocks (schema 11, null before)
    mem_weights mem_grads mem_optimizer mem_activations mem_reserved       f64  GB, sum = memory
    flops_per_gpu                f64   TFLOP per GPU per iteration
    <every SystemSpec field>     f64 / i64   the hardware of the row (nvs_size, hbm_capacity, ...;
                                             ib_bandwidth after the network's NIC link, if any;
                                             host_bandwidth since schema 9, matrix_flops_fp4
                                             and fp4_eff since 10, host_moe_time and
                                             fp8_rowwise_eff since 11,
                                             null before)
    network_tiers, network_switches, network_transceivers    i64   the NIC fabric of n_gpus GPUs
    network_cost, network_power  f64   USD and W of that fabric (the network's price set; NaN if none)
    error_band, error_band_max   f64   the profile's calibration: leave-one-model-out mean and max
                                       |predicted / measured - 1| (null without a calibration)
    compute_utilisation          f64   (t_compute + t_memory + t_optimizer) / iteration_time: the
                                       share of the iteration the GPUs run the model's kernels (schema 5)
    power_kw                     f64   kW the cluster draws from the grid: PUE x (GPUs x (idle + host
                                       + (TDP - idle) x compute_utilisation) + network_power) (schema 5)
    energy_per_run_mwh           f64   MWh of one run over the training set (power_kw x 24
                                       training_days / 1000; null without a training set) (schema 5)
    cluster_cost_usd             f64   USD to buy the cluster: n_gpus x GPU price + network_cost (schema 5)
    cost_per_run_usd             f64   USD of one run: ownership, the cluster amortised over its run
                                       hours plus electricity; rental, GPU-hours x price (schema 5;
                                       dse.results.economics; the prices are the job's `economics` config)

The ZeRO stage `zero` stays an integer: its stage number is its name (ZeRO-1, -2, -3).

File metadata (key `dse`): JSON with the schema version, the dse version, the profile and its
switches, the full resolved job config and the job's inputs; key `dse_rows`: the number of rows
written, and key `dse_written`: the time it was closed (ns since the epoch), both added at close.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import polars as pl

if TYPE_CHECKING:  # pyarrow is imported where a file is written or read (not by a search that prints)
    import pyarrow as pa
    import pyarrow.parquet as pq

from dse.results.economics import ECONOMY_COLUMNS
from dse.explore.space import COLUMNS
from dse.spec.specs import SpecError, SystemSpec
from kernels.params import PRECISIONS, RECOMPUTE, Metrics

#: 4: the `zero` column (ZeRO stage), the expert-parallel degree `ep` and the `fp8_weight_copies`
#: hardware column. 5: the cost, energy and power of a run (`dse.results.economics.ECONOMY_COLUMNS`). 6: the
#: partition columns inside each file, the row count in its metadata. 7: the `fp8_eff` hardware
#: column (FP8 matmuls' calibrated efficiency). 8: `recompute` and `precision` by name (Enum),
#: `seq_par` a bool (7 and before: integer codes); every file's close time in its metadata. 9: the
#: expert-parallel all-to-alls `t_ep_comm` apart from `t_tp_comm`, offloading's `t_offload`; the
#: `host_bandwidth` hardware column. 10: precision nvfp4; the `matrix_flops_fp4` and `fp4_eff` hardware columns.
#: 11: the host wait of dropless MoE blocks `t_host`; the `host_moe_time` and `fp8_rowwise_eff` hardware columns.
SCHEMA_VERSION = 11
#: The schema versions `scan` reads (older ones: a `DatasetError` saying to rerun).
READABLE = (7, 8, 9, 10, 11)
#: Float columns each schema version added, with the version: read as null from older files.
ADDED = {"t_ep_comm": 9, "t_offload": 9, "host_bandwidth": 9, "matrix_flops_fp4": 10, "fp4_eff": 10, "t_host": 11,
         "host_moe_time": 11, "fp8_rowwise_eff": 11}
PARTITIONS = ("model", "system", "strategy")
METRICS = tuple(Metrics._fields)
HARDWARE = tuple(f for f in SystemSpec.__dataclass_fields__ if f not in ("name", "generation", "status"))
INT_HARDWARE = ("nvs_size",)
#: Candidate columns stored by name: column -> its names, in the order of the kernels' codes.
CATEGORIES = {"recompute": tuple(RECOMPUTE), "precision": tuple(PRECISIONS)}
#: Candidate columns stored as booleans (the kernels' 0 / 1).
FLAGS = ("seq_par",)
#: Within one question (`question_id`), the columns of a row group: one GPU count on one hardware point.
ROW_GROUP = ("n_gpus", *HARDWARE)
#: Hardware columns a later schema added: null in an older file's rows, which then match any value
#: (the field did not exist, nothing depended on it), so a rerun's rows still replace them (`scan`).
ADDED_HARDWARE = tuple(h for h in HARDWARE if h in ADDED)


class DatasetError(SpecError):
    """A dataset file cannot be read: `<path>: <what is wrong>; <what to do>`, one line."""


def schema(version: int = SCHEMA_VERSION) -> dict[str, pl.DataType]:
    """Column name -> Polars dtype of a dataset file (the partition columns first), of schema
    `version` (the current one; 7: the categorical candidate columns as Int64 codes; before 9: no
    `t_ep_comm`, `t_offload` nor `host_bandwidth`)."""
    out: dict[str, pl.DataType] = {
        **{p: pl.Utf8 for p in PARTITIONS},
        "job_id": pl.Utf8,
        "profile": pl.Utf8,
        "network": pl.Utf8,
        "global_batch": pl.Int64,
        "n_gpus": pl.Int64,
        "rank": pl.Int64,
    }
    out.update({c: pl.Int64 for c in COLUMNS})
    out["microbatches"] = pl.Int64
    out.update({m: (pl.Boolean if m == "feasible" else pl.Float64) for m in METRICS if ADDED.get(m, 0) <= version})
    out["training_days"] = pl.Float64
    out.update({h: (pl.Int64 if h in INT_HARDWARE else pl.Float64) for h in HARDWARE if ADDED.get(h, 0) <= version})
    out.update({"network_tiers": pl.Int64, "network_switches": pl.Int64, "network_transceivers": pl.Int64,
                "network_cost": pl.Float64, "network_power": pl.Float64,
                "error_band": pl.Float64, "error_band_max": pl.Float64})
    out.update({c: pl.Float64 for c in ECONOMY_COLUMNS})
    if version >= 8:
        out.update({c: pl.Enum(names) for c, names in CATEGORIES.items()})
        out.update({c: pl.Boolean for c in FLAGS})
    return out


def decode(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """The categorical candidate columns as a dataset stores them: integer codes (the kernels',
    a search frame's, a schema-7 file's) become names (`CATEGORIES`, Enum) and booleans (`FLAGS`);
    columns already decoded, and frames without them, pass unchanged."""
    have = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    exprs = []
    for c, names in CATEGORIES.items():
        if c in have and have[c].is_integer():
            exprs.append(pl.col(c).replace_strict(list(range(len(names))), list(names), return_dtype=pl.Enum(names)))
        elif c in have and have[c] != pl.Enum(names):
            exprs.append(pl.col(c).cast(pl.Enum(names)))
    exprs += [pl.col(c).cast(pl.Boolean) for c in FLAGS if c in have and have[c] != pl.Boolean]
    return frame.with_columns(exprs) if exprs else frame


def value_name(column: str, value: Any) -> Any:
    """One value of a categorical candidate column as a dataset stores it: the name of a code (or
    the name itself), a flag as a boolean; a name the column does not have is a KeyError naming
    the valid ones. Other columns' values pass unchanged."""
    if column in FLAGS:
        return value in ("true", "on") if isinstance(value, str) else bool(value)
    names = CATEGORIES.get(column)
    if names is None:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if value not in names:
        raise KeyError(f"{column}={value!r}: not a value of {column}; valid: {', '.join(names)}")
    return value


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """Select and cast a frame to the dataset schema (columns in schema order; the categorical
    candidate columns decoded, `decode`)."""
    sch = schema()
    missing = [c for c in sch if c not in frame.columns]
    if missing:
        raise ValueError(f"dataset rows lack columns {missing}")
    return decode(frame).select([pl.col(c).cast(t) for c, t in sch.items()])


def job_id(inputs: Mapping[str, Any]) -> str:
    """A stable 16-hex-digit hash of a job's inputs (canonical JSON)."""
    text = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def partition_dir(root: str | Path, model: str, system: str, strategy: str) -> Path:
    return Path(root) / f"model={model}" / f"system={system}" / f"strategy={strategy}"


def file_path(root: str | Path, model: str, system: str, strategy: str, job: str) -> Path:
    return partition_dir(root, model, system, strategy) / f"{job}.parquet"


def _metadata(meta: Mapping[str, Any]) -> dict[bytes, bytes]:
    return {b"dse": json.dumps({"schema_version": SCHEMA_VERSION, **meta}, default=str).encode()}


def temporary_beside(path: Path) -> Path:
    """A fresh temporary name in `path`'s directory: `.<name>.tmp-<8 hex digits>` (hidden, and
    recognisable as left over by a killed writer)."""
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Write a file atomically: the block writes the yielded temporary path, which is renamed to
    `path` when the block ends normally and removed when it raises.

        with atomic_path("out/figure.png") as tmp:
            fig.savefig(tmp, format="png")
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class AtomicParquetWriter:
    """Write row groups to a temporary file beside `path` (`temporary_beside`), rename it to `path`
    on `close()`; `abort()` removes it. Use as a context manager: an exception aborts."""

    def __init__(self, path: str | Path, meta: Mapping[str, Any], partitions: Mapping[str, str] | None = None):
        self.path = Path(path)
        #: the partition columns' values (model, system, strategy), added to every row
        self.partitions = dict(partitions or {})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temporary_beside(self.path)
        self.meta = _metadata(meta)
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None

    def write(self, frame: pl.DataFrame) -> None:
        import pyarrow.parquet as pq

        frame = frame.with_columns(pl.lit(v, dtype=pl.Utf8).alias(k) for k, v in self.partitions.items())
        table = conform(frame).to_arrow()
        if self._writer is None:
            self._schema = table.schema.with_metadata(self.meta)
            self._writer = pq.ParquetWriter(self.tmp, self._schema, compression="zstd")
        self._writer.write_table(table.cast(self._schema))
        self.rows += table.num_rows

    def close(self) -> Path:
        import pyarrow.parquet as pq

        if self._writer is None:  # no rows: still write a file with the schema
            empty = pl.DataFrame(schema=schema())
            self._schema = empty.to_arrow().schema.with_metadata(self.meta)
            self._writer = pq.ParquetWriter(self.tmp, self._schema, compression="zstd")
        self._writer.add_key_value_metadata({ROWS_KEY: str(self.rows), WRITTEN_KEY: str(time.time_ns())})
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_file(path: str | Path, frame: pl.DataFrame, meta: Mapping[str, Any],
               partitions: Mapping[str, str] | None = None) -> Path:
    """Write a whole frame atomically."""
    with AtomicParquetWriter(path, meta, partitions) as w:
        if len(frame):
            w.write(frame)
    return Path(path)


#: The metadata keys of the row count a file was closed with and of the time it was closed (ns).
ROWS_KEY = b"dse_rows"
WRITTEN_KEY = b"dse_written"


def verify(path: str | Path) -> str | None:
    """None when the dataset file at `path` is complete, else why not (one line): the footer must
    read, the row count must equal the one stored at close (`ROWS_KEY`), and every row group must
    decode (a corrupted page fails here, not in a later query)."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_metadata(path)
        stored = (md.metadata or {}).get(ROWS_KEY)
        if stored is None:
            return "no stored row count (written by another version or not closed)"
        if int(stored) != md.num_rows:
            return f"{md.num_rows} rows, {int(stored)} written"
        pf = pq.ParquetFile(path)
        rows = sum(pf.read_row_group(i).num_rows for i in range(pf.num_row_groups))
        if rows != md.num_rows:
            return f"row groups hold {rows} rows, the footer says {md.num_rows}"
    except Exception as err:  # any damage: unreadable footer, bad page, wrong magic bytes
        return f"unreadable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
    return None


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The `dse` metadata of one dataset file."""
    import pyarrow.parquet as pq

    md = pq.read_schema(path).metadata or {}
    return json.loads(md.get(b"dse", b"{}"))


#: The job inputs (`dse.interface.app.Job.inputs`) that make a question (module docstring).
QUESTION = ("model", "network", "strategy", "profile", "global_batch", "economics")


def question_id(inputs: Mapping[str, Any] | None) -> str | None:
    """A hash of the question a file's rows answer: its job's inputs less the GPU counts, NVS
    sizes, hardware grid, rows kept and versions (`QUESTION`, the system by name and generation);
    None without inputs (a file not written by a job)."""
    if not isinstance(inputs, Mapping) or "model" not in inputs:
        return None
    system = inputs.get("system") or {}
    key = {k: inputs.get(k) for k in QUESTION}
    key["system"] = [system.get("name"), system.get("generation")] if isinstance(system, Mapping) else system
    return job_id(key)


@dataclass(frozen=True)
class FileInfo:
    """What `inspect` read from one dataset file's footer."""

    path: Path
    version: int
    question: str
    written: int
    model: tuple[str, str] | None = None  # (name, hash of the model's fields): `model_key`


def model_key(inputs: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(name, hash of every field) of the model a file's job searched; None without inputs."""
    model = inputs.get("model") if isinstance(inputs, Mapping) else None
    if not isinstance(model, Mapping) or "name" not in model:
        return None
    return str(model["name"]), job_id(model)


def model_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The first field in which two models' fields differ, said as "depth 32 and 16"."""
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return f"{k} {a.get(k)!r} and {b.get(k)!r}"
    return "no field"


def check_model_name(root: str | Path, study: str, model: Mapping[str, Any]) -> None:
    """Before a job writes `model` (its fields, a dict) into the study at `root`: rows are grouped by
    the model's name, so a model that differs from the one the study's files already hold under
    that name (`model.depth=16` beside llama3_8b's own rows) is one SpecError line, before any
    compute, saying how to keep them apart."""
    from dse.spec.specs import SpecError

    part = Path(root) / f"model={model['name']}"
    if not part.is_dir():
        return
    mine = model_key({"model": model})
    for path in sorted(part.glob("system=*/strategy=*/*.parquet")):
        try:
            inputs = read_metadata(path).get("inputs")
        except Exception:  # an unreadable file: the rerun or the reader says so
            continue
        if model_key(inputs) not in (None, mine):
            raise SpecError(f"model.name = {model['name']!r}: study {study!r} ({root}) holds another model of that "
                            f"name (they differ in {model_difference(inputs['model'], model)}); give this one a "
                            "name of its own (model.name=...) or another study (study=...)")


def check_model_names(infos: Sequence[FileInfo], root: str | Path) -> None:
    """Rows are grouped by the model's name, so two different models written under one name would
    be read as one (a study run with `model.depth=16` and without): one `DatasetError` line naming
    the two files and a field they differ in."""
    first: dict[str, FileInfo] = {}
    for info in infos:
        if info.model is None:
            continue
        name, key = info.model
        seen = first.setdefault(name, info)
        if seen.model[1] != key:
            diff = model_difference(read_metadata(seen.path)["inputs"]["model"],
                                    read_metadata(info.path)["inputs"]["model"])
            raise DatasetError(f"{root}: model {name!r} names two different models ({seen.path.name} and "
                               f"{info.path.name} differ in {diff}); queries group rows by the model's name, so "
                               "move one job's files to a study of their own (or rerun it with model.name=...)")


REDO = "delete it and rerun the job that wrote it"


def reason(err: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _dtype_name(dtype: pl.DataType) -> str:
    return "Enum" if isinstance(dtype, pl.Enum) else str(dtype)


def inspect(path: str | Path) -> FileInfo:
    """Check a dataset file from its footer alone (no row read): Parquet, written by dse, of a
    readable schema version (`READABLE`), complete (the row count stored at close), every column
    of the schema present with its type and no other. Else a one-line `DatasetError`:
    `<path>: <what is wrong>; <what to do>`."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        md = pq.read_metadata(path)
    except Exception as err:  # truncated, not Parquet, unreadable
        raise DatasetError(f"{path}: not a readable Parquet file ({reason(err)}); {REDO}") from None
    kv = md.metadata or {}
    try:
        meta = json.loads(kv[b"dse"])
        version = int(meta["schema_version"])
    except (KeyError, TypeError, ValueError):
        raise DatasetError(f"{path}: not a file of a dse dataset (no dse metadata); move it out of the "
                           "dataset directory") from None
    if version > SCHEMA_VERSION:
        raise DatasetError(f"{path}: written by a newer dse ({meta.get('dse_version', '?')}, dataset schema "
                           f"{version}; this dse reads schemas {READABLE[0]}-{READABLE[-1]}); upgrade dse, or {REDO}")
    if version not in READABLE:
        raise DatasetError(f"{path}: written by dse {meta.get('dse_version', '?')} in dataset schema {version}, "
                           f"which this dse no longer reads (schemas {READABLE[0]}-{READABLE[-1]}); {REDO}")
    stored = kv.get(ROWS_KEY)
    if stored is None or int(stored) != md.num_rows:
        what = "no row count stored at close" if stored is None else f"{md.num_rows} rows, {int(stored)} written"
        raise DatasetError(f"{path}: incomplete ({what}); {REDO}")
    try:
        have = pl.read_parquet_schema(path)
    except Exception as err:
        raise DatasetError(f"{path}: unreadable schema ({reason(err)}); {REDO}") from None
    want = schema(version)
    missing = [c for c in want if c not in have]
    extra = [c for c in have if c not in want]
    wrong = [f"{c} is {_dtype_name(have[c])}, expected {_dtype_name(t)}" for c, t in want.items()
             if c in have and have[c] != t]
    if missing or extra or wrong:
        what = (f"lacks column{'s' * (len(missing) > 1)} {', '.join(missing)}" if missing else
                f"has column{'s' * (len(extra) > 1)} {', '.join(extra)} not in schema {version}" if extra else
                "column " + "; ".join(wrong))
        raise DatasetError(f"{path}: {what} (not as dse writes schema {version}); {REDO}")
    written = kv.get(WRITTEN_KEY)
    return FileInfo(path=path, version=version, question=question_id(meta.get("inputs")) or f"file:{path}",
                    written=int(written) if written is not None else path.stat().st_mtime_ns,
                    model=model_key(meta.get("inputs")))


def dataset_files(root: str | Path) -> list[Path]:
    """The Parquet files of a dataset directory (FileNotFoundError: no directory, or no files)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset {str(root)!r}: no such directory")
    files = sorted(root.glob("model=*/system=*/strategy=*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"dataset {str(root)!r}: no Parquet files under model=*/system=*/strategy=*/")
    return files


def _scan_files(infos: list[FileInfo]) -> pl.LazyFrame:
    """Files of one schema version as one lazy frame of the current schema (columns a later schema
    added, `ADDED`, null)."""
    lf = pl.scan_parquet([str(i.path) for i in infos], hive_partitioning=False)
    version = infos[0].version
    lf = lf.with_columns([pl.lit(None, dtype=pl.Float64).alias(c) for c, v in ADDED.items() if v > version])
    return decode(lf).select(list(schema()))


ORDER = "__dse_file_order"


def scan(root: str | Path) -> pl.LazyFrame:
    """Lazy scan of a dataset directory (hive partitions model/system/strategy; the partition
    columns are read from inside the files). Every file is checked first (`inspect`: one line
    naming the first that cannot be read), schema-7 files are decoded, and a row group that newer
    files of the same question hold again is read from the newest only (module docstring)."""
    infos = [inspect(p) for p in dataset_files(root)]
    check_model_names(infos, root)
    by_question: dict[str, list[FileInfo]] = defaultdict(list)
    for i in infos:
        by_question[i.question].append(i)
    single = [g[0] for g in by_question.values() if len(g) == 1]
    parts = [_scan_files([i for i in single if i.version == v]) for v in READABLE
             if any(i.version == v for i in single)]
    for group in (g for g in by_question.values() if len(g) > 1):
        group = sorted(group, key=lambda i: (i.written, i.path.name))
        both = pl.concat([_scan_files([i]).with_columns(pl.lit(k, dtype=pl.Int64).alias(ORDER))
                          for k, i in enumerate(group)])
        # an added hardware column's null (an older file) takes the newest file's value of its row group
        base = [c for c in ROW_GROUP if c not in ADDED_HARDWARE]
        newest = pl.col(ORDER) == pl.col(ORDER).max().over(base)
        keys = [pl.col(h).fill_null(pl.col(h).filter(newest).first().over(base)).alias(f"{ORDER}_{h}")
                for h in ADDED_HARDWARE]
        both = both.with_columns(keys)
        group_by = base + [f"{ORDER}_{h}" for h in ADDED_HARDWARE]
        parts.append(both.filter(pl.col(ORDER) == pl.col(ORDER).max().over(group_by))
                     .drop(ORDER, *(f"{ORDER}_{h}" for h in ADDED_HARDWARE)))
    return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")


def diagnose(root: str | Path) -> None:
    """Decode every row group of every file of the dataset (`verify`); a `DatasetError` naming the
    first damaged file, else nothing. For a reader whose query failed: was it the data?"""
    for path in dataset_files(root):
        damage = verify(path)
        if damage is not None:
            raise DatasetError(f"{path}: {damage}; {REDO}")
