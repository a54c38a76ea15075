"""The unit of every numeric column of a dataset, as tables and figure axes print it.

One place for what `dse.results.io`'s schema says of each column: times in seconds per iteration,
memory in GB per GPU, the hardware fields in their preset units (conf/system/*.yaml), the economy
columns in the unit their name ends with. `header` is a column's table header: its name and unit,
`iteration_time (s)`, except where the name already says it (`cost_per_run_usd`) or counts what
the configuration is made of (`PLAIN`: n1, n_d, nvs1, ...: `dse eval` takes them by that name).
"""

from __future__ import annotations

#: Column -> its unit (a count's unit names what it counts).
UNITS = {
    # the job and the configuration
    "global_batch": "samples per iteration", "n_gpus": "GPUs", "rank": "1 = fastest of its group",
    "n1": "GPUs", "n2": "GPUs", "n_p": "GPUs", "n_d": "GPUs", "ep": "GPUs", "microbatch": "samples",
    "nvs1": "GPUs per NVS domain", "nvs2": "GPUs per NVS domain", "nvs_p": "GPUs per NVS domain",
    "nvs_d": "GPUs per NVS domain", "n_b": "SUMMA panels", "interleave": "model chunks per stage",
    "zero": "ZeRO stage", "microbatches": "microbatches per iteration",
    # what the kernels compute
    "iteration_time": "s", "throughput": "samples/s", "memory": "GB per GPU", "training_days": "days",
    "flops_per_gpu": "TFLOP per GPU per iteration",  # the time terms t_* and memory terms mem_*: `unit`
    # the hardware of the row (dse.spec.specs.SystemSpec)
    "matrix_flops": "TFLOP/s", "matrix_flops_fp8": "TFLOP/s", "matrix_flops_fp4": "TFLOP/s", "vector_flops": "TFLOP/s",
    "hbm_bandwidth": "GB/s", "hbm_capacity": "GB", "nvlink_bandwidth": "GB/s", "ib_bandwidth": "GB/s",
    "host_bandwidth": "GB/s", "nvlink_latency": "s", "ib_latency": "s", "flop_latency": "s", "host_moe_time": "s",
    "nvs_size": "GPUs", "nic_factor": "NICs per GPU", "element_size": "GB per element",
    "mask_element_size": "GB per element", "matmul_knee": "machine balances", "fp8_weight_copies": "copies",
    **{e: "fraction" for e in ("nvlink_eff", "ib_eff", "compute_eff", "hbm_eff", "fp8_eff", "fp4_eff",
                               "fp8_rowwise_eff")},
    # the NIC fabric, the calibration's error band, the economy (dse.results.economics)
    "network_tiers": "switch tiers", "network_switches": "switches", "network_transceivers": "transceivers",
    "network_cost": "USD", "network_power": "W", "error_band": "fraction", "error_band_max": "fraction",
    "compute_utilisation": "fraction of the iteration", "power_kw": "kW", "energy_per_run_mwh": "MWh",
    "cluster_cost_usd": "USD", "cost_per_run_usd": "USD",
}

#: Columns a table prints under their bare name: what a configuration is made of and where it runs,
#: each a count its name already says (the names `dse eval` and `--where` take).
PLAIN = frozenset({"n_gpus", "rank", "n1", "n2", "n_p", "n_d", "ep", "microbatch", "nvs1", "nvs2", "nvs_p",
                   "nvs_d", "n_b", "interleave", "zero", "nvs_size", "cp", "nvs_cp"})


def unit(col: str) -> str | None:
    """The unit of column `col` (`UNITS`; any other t_* in seconds, mem_* in GB per GPU); None for
    a column without one (a name, a flag)."""
    return UNITS.get(col) or ("s" if col.startswith("t_") else "GB per GPU" if col.startswith("mem_") else None)


def label(col: str) -> str:
    """`col (unit)`, or `col` for a column without a unit."""
    u = unit(col)
    return f"{col} ({u})" if u else col


def header(col: str) -> str:
    """A table's header for column `col`: `label`, but the bare name for `PLAIN` columns and for
    those whose name ends with their unit (training_days, power_kw, cost_per_run_usd)."""
    u = unit(col)
    if u is None or col in PLAIN or col.lower().endswith("_" + u.lower()):
        return col
    return f"{col} ({u})"
