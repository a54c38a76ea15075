"""XLA settings that `dse` applies when it is imported, before JAX starts its CPU backend.

* One XLA host device per core (`--xla_force_host_platform_device_count`), so that the search
  engine splits each chunk over the cores. `DSE_CPU_DEVICES=N` sets the count.
* On x86 CPUs, no FMA (`--xla_cpu_max_isa=AVX`). LLVM contracts a*b + c into one fused multiply-add
  in some loops and not in others, so a candidate evaluated alone (a scalar program) and the same
  candidate inside a vectorized batch would differ in the last bit. Without FMA, and with the
  habits of `kernels.numerics`, they agree bit for bit; the kernels run as fast either way
  (`dse bench`). This applies to the whole process: other JAX CPU code imported alongside loses
  AVX2/FMA too. `DSE_ALLOW_FMA=1` keeps them (batches then still agree with each other exactly,
  and with single evaluations to about 1e-15).

Flags already present in XLA_FLAGS are left as they are. If JAX's CPU backend started before
`dse` was imported, none of this takes effect (JAX reads XLA_FLAGS once).
"""

from __future__ import annotations

import os
import platform


def configure() -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    extra = []
    if "xla_force_host_platform_device_count" not in flags:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        cores = int(os.environ.get("DSE_CPU_DEVICES", cores))
        extra.append(f"--xla_force_host_platform_device_count={max(cores, 1)}")
    fma_ok = os.environ.get("DSE_ALLOW_FMA", "0") not in ("", "0")
    if (not fma_ok and "xla_cpu_max_isa" not in flags
            and platform.machine().lower() in ("x86_64", "amd64")):
        extra.append("--xla_cpu_max_isa=AVX")
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags] + extra).strip()
