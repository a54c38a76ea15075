"""Fused causal attention's rate against its head width and head count: SDPA's cuDNN and flash
backends, BF16, forward and forward + backward, at head widths 64 (GPT-OSS), 128 (Llama, Qwen,
Mixtral) and 192 (Nemotron-4), at 4,096 and 8,192 tokens, 8 to 64 heads; and a 128-token sliding
window beside full causal attention through torch's flex attention (compiled), GPT-OSS's shape.
FLOPs are the causal half of 4 b h s^2 d (forward) and 2.5 times that backward; a window's are
counted from its mask's own (query, key) pairs. Each the median of 30 calls after 5 (CUDA events),
after 2 s of large matmuls to raise the clock. One JSON line a shape and backend, a machine line first.
Usage: python docs/device/attention_dims.py"""
import json

import torch
import torch.nn.functional as F
from cuda_timing import attention_times, machine_line, warm_clock
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = torch.device("cuda")
machine_line(cudnn=torch.backends.cudnn.version())
warm_clock()


def rates(attend, q, k, v, dout, fwd_flops):
    f, fb = attention_times(attend, q, k, v, dout)
    return {"fwd_s": f, "fwd_bwd_s": fb, "fwd_tflops": fwd_flops / f / 1e12,
            "bwd_tflops": 2.5 * fwd_flops / max(fb - f, 1e-9) / 1e12, "fwd_bwd_tflops": 3.5 * fwd_flops / fb / 1e12}


def qkvo(b, h, s, d):
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
for s in (4096, 8192):
    for d in (64, 128, 192):
        for h in (8, 32, 64):
            b = max(1, 64 * 8192 // (h * s))  # 64 heads x 8,192 tokens of work in each
            fwd_flops = 2.0 * b * h * s * s * d
            q, k, v, dout = qkvo(b, h, s, d)
            for name, be in backends.items():
                row = {"kind": "attention", "backend": name, "seq": s, "batch": b, "heads": h, "d": d}
                try:
                    with sdpa_kernel(be):
                        row.update(rates(causal, q, k, v, dout, fwd_flops))
                except Exception as e:
                    row["error"] = repr(e)[:200]
                print(json.dumps(row), flush=True)
            del q, k, v, dout

# a 128-token sliding window against full causal attention, flex attention compiled (GPT-OSS: 64 heads of 64)
try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    for s, b in ((4096, 4), (8192, 2)):
        h, d = 64, 64
        q, k, v, dout = qkvo(b, h, s, d)
        for window in (None, 128):
            if window is None:
                def mask(bi, hi, qi, ki):
                    return qi >= ki
                pairs = s * (s + 1) / 2
            else:
                def mask(bi, hi, qi, ki, w=window):
                    return (qi >= ki) & (qi - ki < w)
                pairs = sum(min(i + 1, window) for i in range(s))
            bm = create_block_mask(mask, None, None, s, s, device="cuda")
            fwd_flops = 4.0 * b * h * pairs * d
            row = {"kind": "window", "backend": "flex", "seq": s, "batch": b, "heads": h, "d": d, "window": window}
            try:
                row.update(rates(lambda q, k, v, m=bm: flex(q, k, v, block_mask=m), q, k, v, dout, fwd_flops))
            except Exception as e:
                row["error"] = repr(e)[:200]
            print(json.dumps(row), flush=True)
except Exception as e:
    print(json.dumps({"kind": "window", "error": repr(e)[:200]}), flush=True)
