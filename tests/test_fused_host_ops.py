"""Kernel chains fused on an eager stack (Liger, ``training.fused_kernels``) shorten its host
dispatch by the ops they replace, counted from transformers' own code; a stack whose own code
fuses (Megatron-Core) keeps no eager host floor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fmest
from fmest.engine import Engine
from fmest_time_roofline import formulas as F
from fmest_time_roofline.estimator import eager_host_seconds, stack_fuses_its_code

ROOT = Path(__file__).resolve().parents[1]


def test_replaced_ops_come_off_the_per_layer_counts():
    base = F.host_dispatch_seconds(layers=32, checkpointing="full", lora_modules_per_layer=0,
                                   micro_batches=2)
    fused = F.host_dispatch_seconds(layers=32, checkpointing="full", lora_modules_per_layer=0,
                                    micro_batches=2, fused=("norm", "rope", "residual"))
    cut = 32 * 2 * ((10 + 14) * F.HOST_SECONDS_PER_FORWARD_OP
                    + (54 + 32) * F.HOST_SECONDS_PER_BACKWARD_OP)
    assert base - fused == pytest.approx(cut)        # residual: not counted, removes none
    # without checkpointing the "none" counts apply (selective reads them too)
    sel = F.host_dispatch_seconds(layers=1, checkpointing="selective", lora_modules_per_layer=0,
                                  micro_batches=1, fused=("activation",))
    plain = F.host_dispatch_seconds(layers=1, checkpointing="selective",
                                    lora_modules_per_layer=0, micro_batches=1)
    assert plain - sel == pytest.approx(F.HOST_SECONDS_PER_FORWARD_OP
                                        + F.HOST_SECONDS_PER_BACKWARD_OP)


def _host(data):
    engine = Engine()
    job = engine.resolve_job(fmest.to_job(data))
    ctx = engine.context(job)
    from fmest.transforms import transforms_of
    from fmest_time_roofline.estimator import step_shape
    stack = transforms_of(job, ctx).stack
    shape = step_shape(job, ctx.model, ctx.layout, stack)
    return eager_host_seconds(job, ctx.model, shape, stack, ()), stack


def test_liger_and_job_kernels_shorten_the_host_floor_megatron_keeps_none():
    job = {"model": "Qwen/Qwen2.5-0.5B", "hardware": {"gpu": "H100-SXM-80GB"},
           "training": {"stack": "hf-trainer", "seq_len": 512, "activation_checkpointing": "full"}}
    eager, stack = _host(job)
    assert eager > 0 and not stack_fuses_its_code(stack)
    rope, _ = _host({**job, "training": {**job["training"], "fused_kernels": ["rope"]}})
    liger, liger_stack = _host({**job, "training": {**job["training"], "liger": True}})
    assert 0 < liger < rope < eager                  # Liger fuses norm, rope, activation, loss
    assert not stack_fuses_its_code(liger_stack)
    megatron, mstack = _host({**job, "training": {**job["training"], "stack": "megatron-core"}})
    assert megatron == 0.0 and stack_fuses_its_code(mstack)


@pytest.mark.slow
def test_replaced_counts_are_the_traced_ones():
    """``benchmarks/count_eager_ops.py --fused`` on transformers' Llama gives the table."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import count_eager_ops as C

    for ckpt, mode in ((False, "none"), (True, "full")):
        eager = C.per_layer(lora=False, checkpointing=ckpt)
        for chain in C.FUSED_CHAINS:
            fused = C.per_layer(lora=False, checkpointing=ckpt, fused=chain)
            assert eager[0] - fused[0] == F.EAGER_FORWARD_OPS_REPLACED_BY_FUSED[f"{chain}_{mode}"]
            assert eager[1] - fused[1] == F.EAGER_BACKWARD_OPS_REPLACED_BY_FUSED[f"{chain}_{mode}"]
