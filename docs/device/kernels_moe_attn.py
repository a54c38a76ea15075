"""Two kernel families the engine prices with one number each, measured on this GPU with PyTorch:

* fused causal attention (`attention_eff` of the profiles: a fraction of the tensor peak), forward
  and forward + backward, through SDPA's flash and cuDNN backends; BF16, head widths 128 (Llama,
  Qwen, Mixtral) and 192/128 (DeepSeek-V3's latent attention: q and k 192 wide, v 128);
* the grouped GEMM of an MoE layer's local experts (`kernels.blocks` prices each expert as a GEMM
  of its tokens at compute_eff x K / (K + K_0)): torch._grouped_mm in BF16 and
  torch._scaled_grouped_mm in FP8 (rowwise scales) over G experts of M tokens each, at the expert
  shapes of DeepSeek-V3, Qwen3-30B-A3B and Mixtral 8x7B, and one expert's GEMM alone beside it.

FLOPs counted: attention forward 2 b h s^2 (d_qk + d_v) / 2 (its two matmuls, Q K^T and P V, over
the causal half), backward 2.5 times the forward (its five matmuls against two); a GEMM 2 M K N. Each the
median of 30 timed calls after 5 (CUDA events), after 2 s of large matmuls to raise the clock.
One JSON line a measurement, a machine line first. Usage: python docs/device/kernels_moe_attn.py"""
import json

import torch
import torch.nn.functional as F
from cuda_timing import attention_times, machine_line, timed, warm_clock

dev = torch.device("cuda")
machine_line(cudnn=torch.backends.cudnn.version())


def emit(row):
    print(json.dumps(row), flush=True)


warm_clock()

# ---- fused causal attention -------------------------------------------------------------------
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
except Exception as e:  # an older torch
    backends = {}
    emit({"kind": "attention", "error": repr(e)[:200]})

def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


for s, b, h, dqk, dv in ((4096, 2, 32, 128, 128), (8192, 1, 32, 128, 128), (8192, 1, 8, 128, 128),
                         (4096, 2, 16, 192, 128)):
    fwd_flops = 2.0 * b * h * s * s * (dqk + dv) / 2.0
    for name, be in backends.items():
        row = {"kind": "attention", "backend": name, "seq": s, "batch": b, "heads": h, "d_qk": dqk, "d_v": dv}
        try:
            q = torch.randn(b, h, s, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, h, s, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, h, s, dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
            dout = torch.randn(b, h, s, dv, device=dev, dtype=torch.bfloat16)
            with sdpa_kernel(be):
                row["fwd_s"], row["fwd_bwd_s"] = attention_times(causal, q, k, v, dout)
            row["fwd_tflops"] = fwd_flops / row["fwd_s"] / 1e12
            row["bwd_tflops"] = 2.5 * fwd_flops / (row["fwd_bwd_s"] - row["fwd_s"]) / 1e12
            row["fwd_bwd_tflops"] = 3.5 * fwd_flops / row["fwd_bwd_s"] / 1e12
        except Exception as e:
            row["error"] = repr(e)[:200]
        emit(row)

# ---- the grouped GEMM of an MoE layer's local experts -----------------------------------------
# (model, K, N) of each expert GEMM (forward): fc1 with gate and up fused, fc2
EXPERTS = [("deepseek_v3", 7168, 4096), ("deepseek_v3", 2048, 7168),
           ("qwen3_30b_a3b", 2048, 1536), ("qwen3_30b_a3b", 768, 2048),
           ("mixtral_8x7b", 4096, 28672), ("mixtral_8x7b", 14336, 4096)]
for model, k, n in EXPERTS:
    for g in (8, 32):
        for m in (128, 512, 2048, 8192):
            if g * m > 65536 or (model == "mixtral_8x7b" and g > 8):
                continue
            row = {"kind": "grouped_gemm", "model": model, "experts": g, "m": m, "k": k, "n": n}
            flops = 2.0 * g * m * k * n
            try:
                xa = torch.randn(g * m, k, device=dev, dtype=torch.bfloat16)
                w = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16)
                offs = (torch.arange(1, g + 1, device=dev, dtype=torch.int32) * m)
                try:  # the weights' transpose as a view (column-major per expert), else laid out
                    row["bf16_s"] = timed(lambda: torch._grouped_mm(xa, w.transpose(-2, -1), offs=offs))
                except Exception as e:
                    row["bf16_view_error"] = repr(e)[:200]
                    wt = w.transpose(-2, -1).contiguous()
                    row["bf16_s"] = timed(lambda: torch._grouped_mm(xa, wt, offs=offs))
                row["bf16_tflops"] = flops / row["bf16_s"] / 1e12
                w0 = w[0].contiguous()
                x0 = xa[:m].contiguous()
                row["bf16_one_s"] = timed(lambda: torch.matmul(x0, w0.t()))
                row["bf16_one_tflops"] = 2.0 * m * k * n / row["bf16_one_s"] / 1e12
            except Exception as e:
                row["bf16_error"] = repr(e)[:200]
            try:
                x8 = xa.to(torch.float8_e4m3fn)
                w8 = w.to(torch.float8_e4m3fn)
                sa = torch.ones(g * m, device=dev, dtype=torch.float32)
                sb = torch.ones(g, n, device=dev, dtype=torch.float32)
                row["fp8_s"] = timed(lambda: torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), sa, sb, offs=offs,
                                                                      out_dtype=torch.bfloat16))
                row["fp8_tflops"] = flops / row["fp8_s"] / 1e12
            except Exception as e:
                row["fp8_error"] = repr(e)[:200]
            emit(row)
            xa = w = x8 = w8 = None  # freed before the next shape's tensors are made
            torch.cuda.empty_cache()
