"""DeepSpeed's ZeRO step copies take new segments on top of what the backward left cached
(memory_theory ``_carried_reserve``; issue 21).

The rule is checked against a replay through fmest's caching-allocator simulator
(``fmest.allocator.replay``, the rules of PyTorch's ``CUDACachingAllocator.cpp``): a step whose
flat gradient copies are larger than every block the backward freed maps new segments, so the
reserved peak is the backward's reserved bytes plus the copies; a step whose temporaries fit
into the cached blocks reuses them.
"""

from __future__ import annotations

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.allocator import replay
from fmest.convert import job_from_dict
from fmest.testing import new_engine

MIB = 1 << 20
PLUGINS = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))


def _step_events(layers: int, act_block: int, step_blocks: list[int], state: int):
    """Persistent state, a forward that saves one block per layer and a backward that frees
    them, then the step's temporaries (allocated together, then freed)."""
    ev = [("m", "state", state)]
    ev += [("m", f"a{i}", act_block) for i in range(layers)]
    ev += [("f", f"a{i}") for i in reversed(range(layers))]
    ev += [("m", f"t{i}", size) for i, size in enumerate(step_blocks)]
    ev += [("f", f"t{i}") for i in range(len(step_blocks))]
    return ev


def test_replay_flat_copies_larger_than_cached_blocks_map_new_segments():
    act, layers, state = 64 * MIB, 40, 4096 * MIB
    flat = [2048 * MIB, 4096 * MIB]          # the bf16 flat copy and its fp32 cast
    res = replay(_step_events(layers, act, flat, state))
    backward_reserved = state + layers * act
    # nothing cached is as large as a copy: the reserved peak is the backward's plus both
    assert res.max_memory_reserved == backward_reserved + sum(flat)
    # allocated peaks at the step (state + copies), below what is reserved
    assert res.max_memory_allocated == state + sum(flat)
    # temporaries no larger than the cached blocks reuse them: no new segment
    small = replay(_step_events(layers, act, [act] * 4, state))
    assert small.max_memory_reserved == backward_reserved


def _recompute_events(layers: int, saved: int, work: list[int], flat: list[int], state: int):
    """A checkpointed backward: each layer re-allocates its working set as separate tensors
    and frees them (and its checkpoint) before the next layer's; then the step's copies."""
    ev = [("m", "state", state)] + [("m", f"s{i}", saved) for i in range(layers)]
    for i in reversed(range(layers)):
        ev += [("m", f"w{i}_{j}", size) for j, size in enumerate(work)]
        ev += [("f", f"w{i}_{j}") for j in range(len(work))] + [("f", f"s{i}")]
    ev += [("m", f"t{k}", size) for k, size in enumerate(flat)]
    ev += [("f", f"t{k}") for k in range(len(flat))]
    return ev


def test_replay_a_working_set_larger_than_the_copy_gives_it_no_block():
    """A layer's working set larger in total than the copy, made of tensors each smaller than
    it: every request above 10 MiB maps a segment of its own size and blocks of different
    segments never merge, so the copies still map new segments (the rule compares the copy
    with the largest single tensor, memory_theory ``largest_freed_tensors``)."""
    work = [134 * MIB, 117 * MIB, 352 * MIB, 58 * MIB, 58 * MIB, 117 * MIB, 176 * MIB,
            400 * MIB, 200 * MIB]
    flat = [1100 * MIB, 2200 * MIB]
    assert sum(work) > flat[0] > max(work)
    with_copies = replay(_recompute_events(12, 56 * MIB, work, flat, 20000 * MIB))
    without = replay(_recompute_events(12, 56 * MIB, work, [], 20000 * MIB))
    assert with_copies.max_memory_reserved - without.max_memory_reserved == sum(flat)
    # one tensor as large as the copy is reused by it
    big = replay(_recompute_events(12, 56 * MIB, work + [1100 * MIB], flat[:1], 20000 * MIB))
    big_without = replay(_recompute_events(12, 56 * MIB, work + [1100 * MIB], [], 20000 * MIB))
    assert big.max_memory_reserved == big_without.max_memory_reserved


def test_engine_compares_the_copy_with_single_tensors_not_the_working_set():
    """BLOOM-like Megatron-DeepSpeed ZeRO-1 stage (hidden 14336, tp 8, pp 12, full
    checkpointing, micro-batch 2): one layer's working set exceeds the compute-dtype flat copy,
    every single tensor (and the embedding's gradient) is smaller, so the step's copies sit on
    top of the backward's reserved bytes."""
    from fmest_memory_theory import estimator as E

    job = job_from_dict({
        "model": "bloom-like", "model_config": {
            "architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 14336,
            "n_layer": 72, "num_attention_heads": 64, "vocab_size": 250880},
        "training": {"dtype": "bf16", "seq_len": 2048, "micro_batch_size": 2,
                     "grad_accum_steps": 256, "activation_checkpointing": "full",
                     "attention": "eager", "main_grads_dtype": "compute",
                     "stack": "megatron-deepspeed"},
        "parallelism": {"dp": 4, "tp": 8, "pp": 12, "zero_stage": 1},
        "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 8, "nodes": 48}})
    eng = new_engine(*PLUGINS)
    job = eng.resolve_job(job)
    ctx = eng.context(job)
    setup = E.job_setup(job, ctx)
    stage = E.pipeline_stages(72, 12, "1f1b", 256, 1)[0]
    peak = E.stage_peak(setup, stage)
    state = E.model_state_terms(setup, E.stage_params(setup, stage))
    copy_block = state.flat_temps * 2 / (2 + 4)       # the bf16 flat copy, then its fp32 cast
    assert peak.layer_block > copy_block > max(peak.largest_layer_tensor,
                                               peak.largest_grad_tensor, peak.transient_block)
    assert peak.step_new_segments == state.flat_temps
    m = eng.estimate(job, quantities=("memory",)).memory
    backward = m.metrics["allocated_bytes_backward"]
    reserved = m.total_bytes - m.components["cuda_context"]
    assert reserved >= backward + state.flat_temps


def _job(zero: int, dtype: str = "fp16", stack: str = "megatron-deepspeed"):
    return job_from_dict({
        "model": "llama-2-13b",
        "training": {"dtype": dtype, "seq_len": 2048, "micro_batch_size": 1,
                     "grad_accum_steps": 8, "activation_checkpointing": "full",
                     "stack": stack},
        "parallelism": {"tp": 2, "zero_stage": zero},
        "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 8}})


def test_engine_carries_the_backward_cache_under_the_zero_step_copy():
    """ZeRO-1 fp16 (the ZeRO optimizer's flat copy of the gradient partition): the reserve is
    at least the backward's cached activations plus the copy over the allocated peak; the
    allocated figure (max_memory_allocated) is unchanged by the rule."""
    from fmest.estimates import memory_counters

    eng = new_engine(*PLUGINS)
    report = eng.estimate(_job(1))
    m = report.memory
    counters = memory_counters(m)
    temps = m.components["optimizer_temporaries"]
    assert m.phase == "optimizer" and temps > 0
    backward = m.metrics["allocated_bytes_backward"]
    assert backward + temps > m.metrics["allocated_bytes_optimizer"]
    # reserved = the backward's allocated (+ its reserve) + the copies
    assert counters["reserved_bytes"] >= backward + temps
    assert counters["allocated_bytes"] == pytest.approx(
        m.total_bytes - m.components["allocator_reserve"] - m.components["cuda_context"],
        rel=1e-6)


def test_no_carry_without_a_flat_copy():
    """BF16_Optimizer's fp32 gradient buffer (megatron-deepspeed bf16): no step copy, so no
    carried reserve; the reserve stays the two-term rule's."""
    eng = new_engine(*PLUGINS)
    m = eng.estimate(_job(1, dtype="bf16")).memory
    assert m.components["optimizer_temporaries"] == 0
    assert m.components["allocator_reserve"] < 2 * 2**30
