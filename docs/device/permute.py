"""The local reorders of an MoE block's routed copies on this GPU, as plain PyTorch runs them: the
permute (the tokens gathered into expert order, k copies each: out = x[index]) and the unpermute
(each copy weighted by its router probability and summed back into its token: index_add_), BF16,
forward only, at the shapes of the corpus's models. The engine charges each 2 V of HBM traffic
(every copy read once and written once; `kernels.layers.regroup`): the effective bandwidth printed
is 2 V over the time. Each the median of 30 calls after 5 (CUDA events). One JSON line a shape, a
machine line first. Usage: python docs/device/permute.py"""
import json

import torch
from cuda_timing import machine_line, timed

dev = torch.device("cuda")
machine_line()


# (model, hidden, top-k, experts, tokens on the GPU)
for model, e, k, experts, tokens in (("qwen3_30b_a3b", 2048, 8, 128, 16384), ("deepseek_v3", 7168, 8, 256, 4096),
                                     ("gpt_oss_120b", 2880, 4, 128, 16384), ("mixtral_8x7b", 4096, 2, 8, 8192)):
    row = {"model": model, "hidden": e, "top_k": k, "tokens": tokens}
    try:
        x = torch.randn(tokens, e, device=dev, dtype=torch.bfloat16)
        choice = torch.randint(0, experts, (tokens, k), device=dev)
        order = torch.argsort(choice.flatten(), stable=True)  # copies in expert order
        src = (order // k).contiguous()  # the token each copy is of
        probs = torch.rand(tokens * k, 1, device=dev, dtype=torch.bfloat16)
        copies = x[src]
        v = copies.numel() * 2  # bytes of the routed copies
        row["copies_gb"] = v / 1e9
        row["permute_s"] = timed(lambda: x[src])
        out = torch.zeros_like(x)

        def unpermute():
            out.zero_()
            out.index_add_(0, src, copies * probs)

        row["unpermute_s"] = timed(unpermute)
        for name in ("permute", "unpermute"):
            row[name + "_gbps_2v"] = 2 * v / row[name + "_s"] / 1e9
    except Exception as exc:
        row["error"] = repr(exc)[:200]
    print(json.dumps(row), flush=True)
