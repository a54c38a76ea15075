"""Parquet datasets of search results: schema, atomic writes, lazy scans.

A dataset is a directory of hive partitions `model=<m>/system=<s>/strategy=<t>/` holding one file
per job, named by a hash of everything that determines its rows (`job_id`). Files are written to a
temporary name in the same directory and renamed when complete. A file counts as complete only if
it verifies (`verify`): its footer reads, its row count equals the count stored in its metadata
when it was closed, and every row group decodes; a job whose file verifies is done and rerunning a
sweep skips it, any other file of the job is rebuilt (no row lost, none duplicated). The partition
columns are stored inside each file too, so any glob of the files (`pl.scan_parquet(
"outputs/data/x/**/*.parquet")`) has them.
Every other file dse writes (figures, traffic matrices) goes through the same rule (`atomic_path`).

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
    recompute                    i64   activation recomputation: 0 none, 1 selective, 2 full
    seq_par                      i64   sequence parallelism on (1) or off (0)
    precision                    i64   matmul precision: 0 bf16, 1 fp8
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
    t_compute t_memory t_tp_comm t_dp_comm t_pp_comm t_bubble t_optimizer   f64  s, sum = iteration_time
    mem_weights mem_grads mem_optimizer mem_activations mem_reserved       f64  GB, sum = memory
    flops_per_gpu                f64   TFLOP per GPU per iteration
    <every SystemSpec field>     f64 / i64   the hardware of the row (nvs_size, hbm_capacity, ...;
                                             ib_bandwidth after the network's NIC link, if any)
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

File metadata (key `dse`): JSON with the dse version, the profile and its switches, and the full
resolved job config; key `dse_rows`: the number of rows written, added when the file is closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import polars as pl

if TYPE_CHECKING:  # pyarrow is imported where a file is written or read (not by a search that prints)
    import pyarrow as pa
    import pyarrow.parquet as pq

from dse.results.economics import ECONOMY_COLUMNS
from dse.explore.space import COLUMNS
from dse.spec.specs import SystemSpec
from kernels.params import Metrics

#: 4: the `zero` column (ZeRO stage), the expert-parallel degree `ep` and the `fp8_weight_copies`
#: hardware column. 5: the cost, energy and power of a run (`dse.results.economics.ECONOMY_COLUMNS`). 6: the
#: partition columns inside each file, the row count in its metadata. 7: the `fp8_eff` hardware
#: column (FP8 matmuls' calibrated efficiency).
SCHEMA_VERSION = 7
PARTITIONS = ("model", "system", "strategy")
METRICS = tuple(Metrics._fields)
HARDWARE = tuple(f for f in SystemSpec.__dataclass_fields__ if f not in ("name", "generation"))
INT_HARDWARE = ("nvs_size",)


def schema() -> dict[str, pl.DataType]:
    """Column name -> Polars dtype of a dataset file (the partition columns first)."""
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
    out.update({m: (pl.Boolean if m == "feasible" else pl.Float64) for m in METRICS})
    out["training_days"] = pl.Float64
    out.update({h: (pl.Int64 if h in INT_HARDWARE else pl.Float64) for h in HARDWARE})
    out.update({"network_tiers": pl.Int64, "network_switches": pl.Int64, "network_transceivers": pl.Int64,
                "network_cost": pl.Float64, "network_power": pl.Float64,
                "error_band": pl.Float64, "error_band_max": pl.Float64})
    out.update({c: pl.Float64 for c in ECONOMY_COLUMNS})
    return out


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """Select and cast a frame to the dataset schema (columns in schema order)."""
    sch = schema()
    missing = [c for c in sch if c not in frame.columns]
    if missing:
        raise ValueError(f"dataset rows lack columns {missing}")
    return frame.select([pl.col(c).cast(t) for c, t in sch.items()])


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
        self._writer.add_key_value_metadata({ROWS_KEY: str(self.rows)})
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


def scan(root: str | Path) -> pl.LazyFrame:
    """Lazy scan of a dataset directory (hive partitions model/system/strategy)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset {str(root)!r}: no such directory")
    files = sorted(str(p) for p in root.glob("model=*/system=*/strategy=*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"dataset {str(root)!r}: no Parquet files under model=*/system=*/strategy=*/")
    return pl.scan_parquet(files, hive_partitioning=True, hive_schema={p: pl.Utf8 for p in PARTITIONS})


#: The metadata key of the row count a file was closed with.
ROWS_KEY = b"dse_rows"


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
