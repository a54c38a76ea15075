"""Sliding-window attention (`model.window`, `model.window_layers`; `kernels.attention.causal`): the fused
kernel's score work against a brute-force count of the (query, key) pairs the mask keeps, the average
block of a model whose blocks alternate, the specification's refusals, and the entry points."""

from __future__ import annotations

import numpy as np
import pytest

import dse
from dse.cli import main
from dse.spec.specs import SpecError, load_model
from kernels import layers as L
from kernels.attention import causal
from kernels.params import Workload


def kept_pairs(rows, seq: int, window: int | None) -> int:
    """(query i, key j) pairs of `rows` a causal mask keeps, within `window` keys of i (itself included)."""
    i = np.asarray(list(rows))[:, None]
    j = np.arange(seq)[None, :]
    keep = j <= i
    if window is not None:
        keep &= j > i - window
    return int(keep.sum())


def work(seq: int, window: int = 0, share: float = 0.0, shards=None, cp=None) -> float:
    """The fraction of a GPU's L_q l scores `causal` keeps (the layer's forward FLOPs over the unmasked ones):
    one sequence, contiguous `shards`, or tp1d's `cp` load-balanced ranks."""
    w = Workload(seq_len=np.float64(seq), hidden=64.0, heads=1.0, depth=2.0, ffn=256.0, global_batch=1.0,
                 causal=1.0, window=np.float64(window), window_share=np.float64(share))
    parts = shards or cp or 1
    core = L.flash_attention("fusedla", 1, 1, seq // parts, seq, 64, 1.0, parts, 1, 2.0)
    masked = causal(core, w, None if shards is None else np.float64(shards), None if cp is None else np.float64(cp))
    return float(masked.flops_f / core.flops_f)


@pytest.mark.parametrize("seq, window", [(64, 8), (64, 1), (64, 63), (96, 40), (50, 7)])
def test_a_windowed_block_keeps_the_pairs_its_mask_keeps(seq, window):
    assert work(seq, window, 1.0) == pytest.approx(kept_pairs(range(seq), seq, window) / seq**2, rel=1e-12)


@pytest.mark.parametrize("seq, window, shards", [(64, 8, 4), (96, 40, 3), (96, 40, 8), (120, 50, 2)])
def test_the_busiest_contiguous_shard_sets_a_windowed_block_s_pace(seq, window, shards):
    """tp2d's and SUMMA's contiguous sequence shards: the fraction of the busiest shard's scores, counted."""
    lam = seq // shards
    busiest = max(kept_pairs(range(k * lam, (k + 1) * lam), seq, window) for k in range(shards))
    assert work(seq, window, 1.0, shards) == pytest.approx(busiest / (lam * seq), rel=1e-12)


@pytest.mark.parametrize("seq, window, cp", [(64, 8, 4), (64, 8, 1), (96, 40, 3), (128, 60, 2), (128, 20, 8),
                                             (96, 200, 4)])
def test_the_busiest_load_balanced_rank_sets_a_windowed_block_s_pace(seq, window, cp):
    """tp1d's context parallelism: 2 cp chunks, rank i holding chunks i and 2 cp - 1 - i, balance causal
    work but not a window's; the busiest rank's share of its scores, counted."""
    c = seq // (2 * cp)
    ranks = [kept_pairs([*range(i * c, (i + 1) * c), *range((2 * cp - 1 - i) * c, (2 * cp - i) * c)], seq, window)
             for i in range(cp)]
    assert work(seq, window, 1.0, cp=cp) == pytest.approx(max(ranks) / (2 * c * seq), rel=1e-12)
    if window < seq:  # the rank holding chunk 0 does less than the others
        assert min(ranks) < max(ranks) or cp == 1


def test_a_window_as_long_as_the_sequence_or_on_no_block_is_causal_attention():
    causal_share = kept_pairs(range(64), 64, None) / 64**2
    for window, share in ((0, 1.0), (64, 1.0), (500, 1.0), (8, 0.0)):
        assert work(64, window, share) == pytest.approx(causal_share, rel=1e-12)
    mixed = 0.25 * kept_pairs(range(64), 64, 8) / 64**2 + 0.75 * causal_share  # a quarter of the blocks windowed
    assert work(64, 8, 0.25) == pytest.approx(mixed, rel=1e-12)


def test_gpt_oss_windows_half_its_blocks_and_its_fused_attention_does_that_share_less_work():
    """The preset's 18 windowed blocks of 36 (128 keys, config.json): the engine's fused attention layer
    keeps (F_causal + F_window) / 2 of the scores of the same model without a window."""
    from dse.explore.engine import profile_of
    from kernels.iteration import layer_table
    from kernels.params import Candidates

    m = load_model("gpt_oss_120b")
    assert (m.window, m.window_layers, m.window_share) == (128, 18, 0.5)
    plain = load_model(m, window=None, window_layers=None)
    system = dse.load_system("dgx_h100").params()
    c = Candidates(*(np.int64(1) for _ in Candidates._fields))
    fused = {name: layer_table("tp1d", c, spec.workload(64), system, profile_of("default"), moe=spec.arch)["fusedla"]
             for name, spec in (("window", m), ("plain", plain))}
    seq = m.seq_len
    want = 0.5 * (1.0 + kept_pairs(range(seq), seq, 128) / kept_pairs(range(seq), seq, None))
    assert float(fused["window"]["flops_f"] / fused["plain"]["flops_f"]) == pytest.approx(want, rel=1e-9)
    assert float(fused["window"]["flops_b"] / fused["plain"]["flops_b"]) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("changes, fragment", [
    (dict(window_layers=4), "model.window_layers = 4: needs model.window"),
    (dict(window=16, causal=False), "model.window = 16: a sliding window is modelled for causal attention only"),
    (dict(window=16, window_layers=99), "model.window_layers = 99: must be <= model.depth = 32"),
    (dict(window=0), "model.window = 0"),
])
def test_a_window_the_engine_cannot_model_is_refused_in_one_line(changes, fragment):
    with pytest.raises(SpecError, match=None) as err:
        load_model("llama3_8b", **changes)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_window_is_a_model_field_of_every_entry_point(capsys):
    """`model.window` and `model.window_layers` as overrides of `dse eval` (a windowed Llama 3 8B is
    faster than the causal one, nothing else changed) and a bad value refused before any compute."""
    args = ["model=llama3_8b", "system=dgx_h100", "strategy=tp1d", "n_d=8", "nvs_d=8", "global_batch=64",
            "microbatch=1", "--json"]
    import json

    assert main(["eval", *args]) == 0
    causal_run = json.loads(capsys.readouterr().out)
    assert main(["eval", *args, "model.window=512", "model.window_layers=16"]) == 0
    windowed = json.loads(capsys.readouterr().out)
    assert windowed["iteration_time"] < causal_run["iteration_time"]
    assert windowed["memory"] == causal_run["memory"]
    assert main(["eval", *args, "model.window_layers=16"]) == 2
    assert "model.window_layers = 16: needs model.window" in capsys.readouterr().err
