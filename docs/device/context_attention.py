"""Context parallelism's attention on one GPU: the work one rank of a load-balanced ring does, timed
kernel by kernel, against full causal attention over the whole sequence divided by the ranks.
torchtitan's Llama 3.1 8B context-parallel rows (32 heads of 128, K and V repeated to every head,
SDPA's flash backend, BF16): sequence 65,536 over 2 ranks and 131,072 over 4. A rank holds L = S/cp
tokens (two chunks of S/(2 cp), the ring's load balance) and runs one causal block of L x L (its
own chunks) and cp - 1 full blocks of L x L/2 (the others' K and V, half of them or half of its
queries), and after each block merges its output and log-sum-exp statistics with the running ones
(float32, elementwise). FLOPs: a causal block the causal half of 4 h s^2 d, a full block 4 h q k d,
forward; the backward 2.5 times that. Times are medians of CUDA events (3 calls after 1 for the
long sequences). One JSON line a measurement, a machine line first.
Usage: python docs/device/context_attention.py"""
import json

import torch
import torch.nn.functional as F
from cuda_timing import machine_line, timed, warm_clock
from torch.nn.attention import SDPBackend, sdpa_kernel

dev, H, D = torch.device("cuda"), 32, 128
machine_line()
warm_clock()


def tensors(q_len, kv_len):
    q = torch.randn(1, H, q_len, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, H, kv_len, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    return q, k, v, torch.randn(1, H, q_len, D, device=dev, dtype=torch.bfloat16)


def block(q_len, kv_len, is_causal, n):
    """(forward s, forward + backward s, forward FLOPs) of one flash block."""
    q, k, v, dout = tensors(q_len, kv_len)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    def both():
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v), dout)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        f, fb = timed(fwd, n=n, warm=1), timed(both, n=n, warm=1)
    flops = (2.0 if is_causal else 4.0) * H * q_len * kv_len * D
    del q, k, v, dout
    torch.cuda.empty_cache()
    return f, fb, flops


def merge_time(q_len, n=20):
    """One merge of a block's output and statistics into the running ones, float32."""
    out, bout = (torch.randn(1, H, q_len, D, device=dev, dtype=torch.float32) for _ in range(2))
    lse, blse = (torch.randn(1, H, q_len, 1, device=dev, dtype=torch.float32) for _ in range(2))

    def merge():
        o = out - torch.sigmoid(blse - lse) * (out - bout)
        return o, lse - F.logsigmoid(lse - blse)
    return timed(merge, n=n, warm=3)


def line(**kv):
    print(json.dumps(kv), flush=True)


for s in (8192, 16384, 32768, 65536, 131072):
    n = 10 if s <= 32768 else 3
    f, fb, flops = block(s, s, True, n)
    line(kind="causal", seq=s, heads=H, d=D, fwd_s=f, fwd_bwd_s=fb, fwd_tflops=flops / f / 1e12,
         fwd_bwd_tflops=3.5 * flops / fb / 1e12)

for s, cp in ((65536, 2), (131072, 4)):
    L = s // cp
    fd, fbd, fl_d = block(L, L, True, 5)
    fo, fbo, fl_o = block(L, L // 2, False, 5)
    m = merge_time(L)
    steps = cp - 1
    rank_f, rank_fb = fd + steps * (fo + m), fbd + steps * (fbo + 2.0 * m)  # a merge forward, one backward
    line(kind="cp_rank", seq=s, cp=cp, local=L, diag_fwd_s=fd, diag_fwd_bwd_s=fbd,
         diag_fwd_bwd_tflops=3.5 * fl_d / fbd / 1e12, off_fwd_s=fo, off_fwd_bwd_s=fbo,
         off_fwd_bwd_tflops=3.5 * fl_o / fbo / 1e12, merge_s=m, rank_fwd_s=rank_f, rank_fwd_bwd_s=rank_fb,
         rank_fwd_bwd_tflops=3.5 * (fl_d + steps * fl_o) / rank_fb / 1e12)
