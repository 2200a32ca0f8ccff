"""Megatron-Core's MoE dispatcher syncs host and GPU once per MoE layer forward (issue 20).

NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
megatron/core/transformer/moe/token_dispatcher.py (``_maybe_dtoh_and_synchronize``) and
fused_a2a.py (DeepEP's dispatch waits on the CPU): after each sync the GPU's queue is empty, so
a layer forward takes max(host, GPU) per segment (formulas.moe_sync_exposed_seconds with
``MEGATRON_MOE_LAYER_HOST_OPS``, traced by scripts/trace_megatron_moe_host_ops.py).
"""

from __future__ import annotations

import pytest

from fmest import to_job
from fmest.physics.time_constants import HOST_SECONDS_PER_EAGER_OP, MEGATRON_MOE_LAYER_HOST_OPS
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F

OP = HOST_SECONDS_PER_EAGER_OP
HOST_F = MEGATRON_MOE_LAYER_HOST_OPS["forward"] * OP
HOST_B = MEGATRON_MOE_LAYER_HOST_OPS["backward"] * OP
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def test_host_bound_forward_segments_show_per_layer():
    # GPU forward shorter than the host's ops: each of the 10 segments shows the difference,
    # though the pass's total host time (fwd + bwd) is below its total GPU time
    gf, gb = 0.5 * HOST_F, 4.0 * HOST_B
    assert 10 * (HOST_F + HOST_B) < 10 * (gf + gb)
    got = F.moe_sync_exposed_seconds(moe_layers=10, gpu_forward_per_layer=gf,
                                     gpu_backward_per_layer=gb)
    assert got == pytest.approx(10 * (HOST_F - gf))


def test_gpu_bound_layers_pay_one_dispatch_per_sync():
    got = F.moe_sync_exposed_seconds(moe_layers=10, gpu_forward_per_layer=1.0,
                                     gpu_backward_per_layer=2.0)
    assert got == pytest.approx(10 * OP)


def test_backward_without_recompute_has_no_sync():
    # the backward host time only shows above the backward GPU time, with no per-sync term
    got = F.moe_sync_exposed_seconds(moe_layers=4, gpu_forward_per_layer=1.0,
                                     gpu_backward_per_layer=0.5 * HOST_B)
    assert got == pytest.approx(4 * (OP + 0.5 * HOST_B))


def test_full_recompute_reruns_the_forward_sync_in_the_backward():
    gb = HOST_B
    plain = F.moe_sync_exposed_seconds(moe_layers=4, gpu_forward_per_layer=1.0,
                                       gpu_backward_per_layer=gb)
    full = F.moe_sync_exposed_seconds(moe_layers=4, gpu_forward_per_layer=1.0,
                                      gpu_backward_per_layer=gb, recompute_share=1.0)
    assert plain == pytest.approx(4 * OP)
    assert full == pytest.approx(4 * (OP + HOST_F))


def _job(stack: str, micro_batch: int, model: str = MIXTRAL, ep: int = 8):
    return to_job({"model": model, "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8,
                                                "nodes": 1},
                   "parallelism": {"dp": 8, "ep": ep},
                   "training": {"stack": stack, "seq_len": 512, "micro_batch_size": micro_batch,
                                "grad_accum_steps": 4, "dtype": "bf16"}})


def _overhead_per_token(engine, job):
    time = engine.estimate(job, quantities=("time",)).time
    tokens = job.training.micro_batch_size * job.training.seq_len * job.training.grad_accum_steps
    return time.breakdown["framework_overhead"] / tokens, time


def test_megatron_core_moe_pays_the_sync_and_says_so(engine):
    _, time = _overhead_per_token(engine, _job("megatron-core", 1))
    assert any("MoE dispatcher host syncs" in n for n in time.notes)
    # the overhead is above the stack's plain framework share
    busy = sum(v for k, v in time.breakdown.items() if k != "framework_overhead")
    assert time.breakdown["framework_overhead"] > busy * F.FRAMEWORK_OVERHEAD_FRACTION / (
        1.0 - F.FRAMEWORK_OVERHEAD_FRACTION) * 1.0001


def test_small_micro_batches_pay_more_per_token(engine):
    # the per-layer host time is fixed while the GPU time grows with the micro-batch
    small, _ = _overhead_per_token(engine, _job("megatron-core", 1))
    large, _ = _overhead_per_token(engine, _job("megatron-core", 8))
    assert small > large


def test_other_stacks_and_dense_models_have_no_sync(engine):
    for job in (_job("pytorch", 1), _job("megatron-core", 1, model="meta-llama/Llama-3.1-8B", ep=1)):
        time = engine.estimate(job, quantities=("time",)).time
        assert not any("MoE dispatcher host syncs" in n for n in time.notes)
