"""Megatron's fused scale-mask-softmax: when its kernel runs, and the eager fp32 chain's cost
when it does not (issue 20).

The kernel rule is bigscience-workshop/Megatron-DeepSpeed @8387ae17 megatron/model/
fused_softmax.py ``is_kernel_available`` with scaled_masked_softmax.h ``get_batch_per_block``;
the BigScience prequel rows ran the fork before its 2022-03-06 kernel sync, whose
``get_batch_per_block`` received its arguments in the wrong order (541b967f lines 146, 189).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.convert import job_from_dict
from fmest.physics.megatron_softmax import batches_per_block, fused_softmax_available
from fmest.testing import new_engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import measured  # noqa: E402  benchmarks/measured.py

PLUGINS = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))


@pytest.mark.parametrize("keys, per_block", [(2048, 4), (4096, 4), (128, 8), (64, 8),
                                             (16, 16), (8, 32), (4, 64), (2, 128)])
def test_batches_per_block_follows_the_kernel_helper(keys, per_block):
    # warp = min(next_pow2(keys), 32); two rows a warp up to 128 keys; 128 threads a block
    assert batches_per_block(keys) == per_block


def test_fused_kernel_constraints():
    ok = dict(micro_batch=1, heads_per_rank=4, seq_len=2048, max_seq=4096)
    assert fused_softmax_available(**ok)
    assert not fused_softmax_available(**{**ok, "heads_per_rank": 3})     # b*np % 4
    assert not fused_softmax_available(**{**ok, "seq_len": 8192})         # sk > max_seq
    assert not fused_softmax_available(**{**ok, "seq_len": 16})           # 16 < sk
    assert not fused_softmax_available(**{**ok, "max_seq": 1024})


def _job(**training):
    return job_from_dict({
        "model": "llama-2-7b",
        "training": {"seq_len": 2048, "micro_batch_size": 1, "attention": "eager",
                     "stack": "megatron-deepspeed", "activation_checkpointing": "full",
                     **training},
        "parallelism": {"tp": 8}, "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 8}})


def _memory_bound(job) -> float:
    return new_engine(*PLUGINS).estimate(job).time.breakdown["memory_bound"]


def test_unfused_softmax_costs_the_fp32_chain():
    """--no-masked-softmax-fusion, and a shape the kernel refuses (keys beyond its 4096), move
    the fp32 chain's 40 + 48 bytes a score instead of the kernel's 8 + 14: the difference is
    exactly those bytes over the same HBM rate."""
    fused = _memory_bound(_job())
    off = _memory_bound(_job(masked_softmax_fusion=False))
    assert off > fused
    # 32 heads / TP 8 = 4 heads a rank, s = 2048: the kernel runs at seq 2048, not at 8192
    long_fused = _memory_bound(_job(seq_len=8192))
    long_off = _memory_bound(_job(seq_len=8192, masked_softmax_fusion=False))
    assert long_fused == pytest.approx(long_off)
    # full recompute runs the forward chain twice: fused 2*8 + 14 = 30, eager 2*40 + 48 = 128
    # bytes a score; at one HBM rate the extra time scales with the scores, heads x s^2 a
    # sequence: half the sequence, a quarter of the extra
    short = _memory_bound(_job(seq_len=1024, masked_softmax_fusion=False)) \
        - _memory_bound(_job(seq_len=1024))
    assert short / (off - fused) == pytest.approx(0.25, rel=1e-6)
    assert long_off == pytest.approx(_memory_bound(_job(seq_len=8192, masked_softmax_fusion=True)))


def test_bounds_names_the_stacks_with_the_kernel():
    from fmest.bounds import FUSED_SOFTMAX_STACKS
    from fmest.stacks import load_profiles

    assert set(FUSED_SOFTMAX_STACKS) == {p.name for p in load_profiles()
                                         if p.fused_softmax_max_seq}


def test_oddity_when_the_flag_cannot_apply():
    job = job_from_dict({"model": "llama-2-7b",
                         "training": {"attention": "flash", "stack": "megatron-deepspeed",
                                      "masked_softmax_fusion": False},
                         "hardware": {"gpu": "A100-SXM-80GB"}})
    warnings = new_engine(*PLUGINS).estimate(job).warnings
    assert any(w.startswith("training.masked_softmax_fusion: ignored") for w in warnings)
    quiet = new_engine(*PLUGINS).estimate(_job(masked_softmax_fusion=False)).warnings
    assert not any("masked_softmax_fusion" in w for w in quiet)


def _prequel_row(date: str) -> dict:
    return {"stack": "megatron-deepspeed",
            "stack_version": "bigscience Megatron-DeepSpeed fork, Feb 2022", "other": "",
            "source_quote": f"| 48 | 181B | 4 | 8 | 12 | 1 | 2048 | 29GB | 143.31 | 112.49 | {date} |"}


@pytest.mark.parametrize("micro_batch, heads, fused", [
    (1, 64, False),   # np 8: the swapped helper's "keys" = 8 -> 32 rows a block; 8 % 32
    (2, 64, False),   # 16 % 32
    (4, 64, True),    # 32 % 32
    (4, 32, False),   # np 4 -> 64 rows a block; 16 % 64
    (4, 128, True),   # np 16 -> 16 rows a block; 64 % 16
    (4, 112, False),  # np 14 -> 16 rows a block; 56 % 16 (the prequel's slow 112-head run)
])
def test_prequel_fork_swapped_block_rule(micro_batch, heads, fused):
    training = {"micro_batch_size": micro_batch, "seq_len": 2048}
    cfg = {"num_attention_heads": heads}
    assert measured.bigscience_fused_softmax_before_sync(
        _prequel_row("02-21"), training, {"tp": 8}, cfg) is fused
    # after the 2022-03-06 sync the fork's own rule (fmest's) decides: not the mapper
    assert measured.bigscience_fused_softmax_before_sync(
        _prequel_row("03-07"), training, {"tp": 8}, cfg) is True
