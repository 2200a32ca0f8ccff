"""DeepSpeed runtime costs read from its code (issue 20): the PipelineEngine's blocking p2p and
TP-partitioned activations, and ZeRO-3's host/GPU serialization over more than one rank
(time_roofline ``estimator.apply_deepspeed_runtime``; constants in
``fmest.physics.time_constants``). Expected values are derived by hand from the formulas'
definitions, not from the engine's output."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fmest_time_roofline.estimator as E
from fmest import to_job
from fmest.physics import time_constants as tc
from fmest.plan.planner import Constraints, config_job, evaluate_space
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def test_transfers_per_micro_batch_follow_train_schedule():
    # TrainSchedule: a middle stage exchanges with both neighbours (recv act + send grad on
    # forward steps, send act + recv grad on backward steps); pp = 2 has end stages only
    assert F.deepspeed_pipe_transfers(1) == 0
    assert F.deepspeed_pipe_transfers(2) == 2
    assert F.deepspeed_pipe_transfers(3) == 4
    assert F.deepspeed_pipe_transfers(12) == 4
    assert tc.DEEPSPEED_PIPE_PARTITION_GATHERS == 3


def test_pipe_extra_seconds_by_hand():
    # BLOOM-like stage boundary: micro-batch 1 x 2048 tokens x h 14336 in bf16, TP 8, PP 12
    act = 1 * 2048 * 14336 * 2.0
    p2p_bw, tp_bw = 18e9, 234e9
    got = F.deepspeed_pipe_extra_seconds(pp=12, tp=8, activation_bytes=act,
                                         p2p_bytes_per_s=p2p_bw, p2p_inter_node=True,
                                         tp_bytes_per_s=tp_bw, tp_inter_node=False)
    # 2 transfers beyond the 2 every pipeline pays, each 1/8 of the activation + 14 us;
    # 3 all-gathers of the full activation over 8 ranks: 7/8 x bytes / busbw + 3 x 3.4 us
    two_more = 2 * (act / 8 / p2p_bw + 14e-6)
    gathers = 3 * (7 / 8 * act / tp_bw + 3.4e-6 * math.ceil(math.log2(8)))
    assert got == pytest.approx(two_more + gathers, rel=1e-12)
    # no TP: no partitioned tensor, no gathers; pp = 2: no transfers beyond the two
    assert F.deepspeed_pipe_extra_seconds(pp=12, tp=1, activation_bytes=act,
                                          p2p_bytes_per_s=p2p_bw, p2p_inter_node=True,
                                          tp_bytes_per_s=tp_bw, tp_inter_node=False) \
        == pytest.approx(2 * (act / p2p_bw + 14e-6), rel=1e-12)
    assert F.deepspeed_pipe_extra_seconds(pp=2, tp=1, activation_bytes=act,
                                          p2p_bytes_per_s=p2p_bw, p2p_inter_node=True,
                                          tp_bytes_per_s=tp_bw, tp_inter_node=False) == 0.0
    assert F.deepspeed_pipe_extra_seconds(pp=1, tp=8, activation_bytes=act,
                                          p2p_bytes_per_s=p2p_bw, p2p_inter_node=True,
                                          tp_bytes_per_s=tp_bw, tp_inter_node=False) == 0.0


def _breakdown(engine, job_dict, runtime=True):
    job = to_job(job_dict)
    report = engine.estimate(job, quantities=("memory", "time"))
    if runtime:
        return job, report.time
    saved = E.apply_deepspeed_runtime
    E.apply_deepspeed_runtime = lambda *a, **k: (a[5], [])
    try:
        return job, engine.estimate(job, quantities=("memory", "time")).time
    finally:
        E.apply_deepspeed_runtime = saved


PIPE_JOB = {"model": "meta-llama/Llama-2-70b-hf",
            "training": {"stack": "megatron-deepspeed", "seq_len": 2048, "micro_batch_size": 1,
                         "grad_accum_steps": 16, "activation_checkpointing": "full"},
            "parallelism": {"tp": 8, "pp": 4, "dp": 1},
            "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8, "nodes": 4}}


def test_pipeline_engine_adds_transfers_and_gathers(engine):
    job, with_ds = _breakdown(engine, PIPE_JOB)
    _, without = _breakdown(engine, PIPE_JOB, runtime=False)
    # per micro-batch: 2 more transfers of 2048 x 8192 x 2 B / 8 over the inter-node hop
    # (stages of 8 GPUs = one node each) and 3 TP all-gathers of the full activation
    act = 2048 * 8192 * 2.0
    ctx_gpu = engine.estimate(to_job(PIPE_JOB), quantities=("time",)).context.gpu
    hop = F.link_bytes_per_s(ctx_gpu, inter_node=True, size=2, nodes=2)
    intra = F.link_bytes_per_s(ctx_gpu, inter_node=False)
    per_mb = 2 * (act / 8 / hop + tc.INTER_NODE_LATENCY_S) \
        + 3 * (7 / 8 * act / intra + tc.INTRA_NODE_LATENCY_S * 3)
    added = with_ds.breakdown["communication_pp"] - without.breakdown["communication_pp"]
    assert added == pytest.approx(16 * per_mb, rel=1e-9)
    # the bubble scales the scheduled micro-batch: (pp - 1) / m of the added seconds
    bubble = with_ds.breakdown["pipeline_bubble"] - without.breakdown["pipeline_bubble"]
    assert bubble == pytest.approx(3 / 16 * 16 * per_mb, rel=1e-9)
    assert with_ds.step_seconds > without.step_seconds


ZERO3_JOB = {"model": "meta-llama/Llama-2-7b-hf",
             "training": {"stack": "deepspeed", "seq_len": 256, "micro_batch_size": 1,
                          "grad_accum_steps": 8, "activation_checkpointing": "full",
                          "dtype": "bf16"},
             "parallelism": {"zero_stage": 3, "dp": 2},
             "hardware": {"gpu": "A100-80GB", "gpus_per_node": 2, "nodes": 1}}


def test_zero3_hooks_serialize_over_two_ranks(engine):
    job, t = _breakdown(engine, ZERO3_JOB)
    _, plain = _breakdown(engine, ZERO3_JOB, runtime=False)
    # hooks: 32 layers x 660 op-equivalents (full recompute) x 8 micro-batches x 10 us
    hooks = 32 * 660 * 8 * 10e-6
    ctx = engine.estimate(job, quantities=("time",)).context
    shape = E.step_shape(job, ctx.model, ctx.layout)
    assert E.zero3_hook_host_seconds(job, ctx.model, shape, None) == pytest.approx(hooks)
    # eager dispatch per micro-batch: 32 x 70 + 31 forward ops at 21.7 us and 32 x 268 + 34
    # backward ops at 13.8 us (formulas.host_dispatch_seconds), x 8
    dispatch = ((32 * 70 + 31) * 21.7e-6 + (32 * 268 + 34) * 13.8e-6) * 8
    busy = sum(v for k, v in plain.breakdown.items() if k != "framework_overhead")
    gpu = busy / (1 - F.FRAMEWORK_OVERHEAD_FRACTION)
    # the optimizer's kernels follow the host's last dispatch on a host-bound step
    opt = plain.breakdown["optimizer_step"]
    assert plain.step_seconds == pytest.approx(max(gpu, dispatch + hooks + opt), rel=1e-9)
    assert t.step_seconds == pytest.approx(max(gpu, dispatch + opt) + hooks, rel=1e-9)


def test_zero3_single_rank_keeps_the_larger(engine):
    one = {**ZERO3_JOB, "parallelism": {"zero_stage": 3, "dp": 1},
           "hardware": {"gpu": "A100-80GB", "gpus_per_node": 1, "nodes": 1}}
    _, t = _breakdown(engine, one)
    _, plain = _breakdown(engine, one, runtime=False)
    assert t.step_seconds == pytest.approx(plain.step_seconds, rel=1e-12)


def test_planner_mirrors_deepspeed_runtime(engine):
    """The planner's array formulas agree with the engine on DeepSpeed-stack configurations
    (ZeRO-3 over several ranks, PipelineEngine stages), as tests/test_plan_vector.py checks
    stack-less ones."""
    job = to_job({"model": "meta-llama/Llama-2-7b-hf",
                  "training": {"stack": "deepspeed", "seq_len": 1024},
                  "workload": {"dataset_tokens": 1e8}, "options": {"fit_confidence": 0.5}})
    res, evaluated, _, _, ctx = evaluate_space(
        job, Constraints(gpus="A100-80GB", max_gpus=8, objective="time"), engine=engine)
    n = len(res["mb"])
    assert n > 20
    rows = [i for i in range(n) if res["pp"][i] > 1][:6]
    sharded = [i for i in range(n) if ctx["shardings"][int(res["hidx"][i])][0] == "zero3"
               and res["dp"][i] > 1][:6]
    assert rows and sharded
    for i in rows + sharded:
        j = config_job(job, res, int(i), ctx["shardings"], method="theory")
        report = engine.estimate(j, quantities=("time",))
        err = res["step"][i] / report.time.step_seconds - 1
        assert abs(err) <= 0.05, (j.parallelism, j.training.micro_batch_size, err)
    assert np.all(np.isfinite(res["step"]))
