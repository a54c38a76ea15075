"""Refit the corpus calibration under a variant of the engine that was tried and not kept, and print
the summary `dse calibrate` prints (no GPU; 3-9 minutes a variant on 2 cores):

    python3 docs/experiments/refit_variants.py VARIANT [--out FILE.yaml]

VARIANT, each a change made in this process only (the shipped engine is untouched):

* `knee_cublas`: the GEMM knee held at 1.4 machine balances, the value run 14's cuBLAS GEMMs give on
  an H100 (docs/gpu.md), instead of fitted;
* `knee_fp8_unscaled`: an FP8 GEMM's knee not scaled by FP8's speed-up (its per-tile cost taken as a
  BF16 GEMM's in time divided by the speed-up), `kernels.roofline.compute_time`'s other readings as
  they are;
* `flop_latency`: `flop_latency`, the fixed time of every layer and direction (seed 001's 20 us),
  fitted with the other fields (0 to 200 us);
* `nvlink_eff`: `nvlink_eff`, the achieved share of NVLink bandwidth of every collective inside a
  domain (the presets' 0.7, seed 001's value), fitted with the other fields (0.4 to 1).

The fit is `dse calibrate --csv corpus --csv nvidia_perf_moe --steps 800 --fold-steps 300 --name
corpus2026`, the shipped calibration's; the figures are quoted in docs/accuracy.md (matmul efficiency).
"""

from __future__ import annotations

import argparse
import tempfile


def knee_cublas() -> None:
    from dse.truth.calibration import FIELDS

    FIELDS["matmul_knee"] = (1.399, 1.401)  # the fit's sigmoid range: held at 1.4


def knee_fp8_unscaled() -> None:
    import kernels.block_time as bt
    from kernels.roofline import compute_time, fp8_speedup

    def unscaled(flops, tensor, system, gemm_dim=None, fp8=None, eff=None):
        if fp8 is not None and gemm_dim is not None and eff is None:  # compute_time scales the knee by it
            system = system._replace(matmul_knee=system.matmul_knee / fp8_speedup(system, fp8))
        return compute_time(flops, tensor, system, gemm_dim, fp8, eff)

    bt.compute_time = unscaled


def fitted_too(field: str, bounds: tuple[float, float]) -> None:
    """A system field fitted with the calibrated ones (placed before `host_moe_time`, the MoE runs'
    own field, as the fit orders its parameters)."""
    from dse.truth.calibration import FIELDS

    fields = list(FIELDS.items())
    FIELDS.clear()
    for k, v in fields:
        if k == "host_moe_time":
            FIELDS[field] = bounds
        FIELDS[k] = v


def flop_latency() -> None:
    fitted_too("flop_latency", (0.0, 2e-4))


def nvlink_eff() -> None:
    fitted_too("nvlink_eff", (0.4, 1.0))


VARIANTS = {"knee_cublas": knee_cublas, "knee_fp8_unscaled": knee_fp8_unscaled, "flop_latency": flop_latency,
            "nvlink_eff": nvlink_eff}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variant", choices=sorted(VARIANTS))
    p.add_argument("--out", help="where the fitted calibration is written (default: a temporary file)")
    args = p.parse_args()
    VARIANTS[args.variant]()
    from dse.cli import main as dse

    out = args.out or tempfile.NamedTemporaryFile(suffix=".yaml", delete=False).name
    return dse(["calibrate", "--csv", "corpus", "--csv", "nvidia_perf_moe", "--steps", "800", "--fold-steps", "300",
                "--name", "corpus2026", "--out", out])


if __name__ == "__main__":
    raise SystemExit(main())
