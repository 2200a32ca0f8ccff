"""Data-parallel traffic under expert parallelism (fmest.transforms.data_parallel_collectives).

Megatron-Core (megatron/core/parallel_state.py ``initialize_model_parallel``) reduces expert
gradients over the expert-data-parallel group of ``world / (etp * ep * pp)`` = ``dp * cp / ep``
ranks, and each rank holds ``experts / ep`` of the expert weights; dense weights are reduced
over the whole data x context parallel group
(megatron/core/distributed/distributed_data_parallel.py keeps the two in separate buffers)."""

from __future__ import annotations

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest.transforms import expert_data_parallel_size, transforms_of

MIXTRAL = "mixtral-8x7b-v0.1"
NODES_8 = {"gpu": "H100-SXM-80GB", "gpus_per_node": 8, "nodes": 8}


def _transforms(ep: int, sharding: str = "zero1", tp: int = 1):
    job = job_from_dict({"model": MIXTRAL, "training": {"dtype": "bf16"},
                         "parallelism": {"sharding": sharding, "ep": ep, "tp": tp},
                         "hardware": NODES_8})
    ctx = new_engine().context(job)
    return ctx, transforms_of(job, ctx)


def _grad_collectives(comm):
    return [coll for coll in comm.collectives if coll.what == "gradients"]


def test_ep8_gradient_bytes_are_dense_plus_experts_over_ep():
    """ep 8 on 64 GPUs: dense gradients over dp = 64 ranks, expert gradients (1/8 of them per
    rank) over 64 / 8 = 8 ranks strided by ep."""
    ctx, tr = _transforms(8)
    counts = ctx.model.param_counts()
    per_elem = tr.communication.grad_bytes_per_element
    grads = _grad_collectives(tr.communication)
    dense = [c for c in grads if not c.expert]
    expert = [c for c in grads if c.expert]
    assert len(dense) == 1 and len(expert) == 1
    dense_bytes = (counts.total - counts.experts) * per_elem
    expert_bytes = counts.experts * per_elem
    assert dense[0].payload_bytes == pytest.approx(dense_bytes)
    assert expert[0].payload_bytes == pytest.approx(expert_bytes / 8)
    assert sum(c.payload_bytes for c in grads) == pytest.approx(dense_bytes + expert_bytes / 8)
    assert (dense[0].group_size, dense[0].group_stride) == (64, 1)
    assert (expert[0].group_size, expert[0].group_stride) == (8, 8)
    assert expert_data_parallel_size(ctx.layout) == 8
    # ZeRO-1 shards expert optimizer states over the expert-data-parallel group only
    assert tr.sharding.optimizer_divisor == 64 and tr.expert_sharding.optimizer_divisor == 8


def test_ep1_unchanged_one_collective_of_every_parameter():
    """Without expert parallelism every parameter's gradient is in one all-reduce over dp."""
    ctx, tr = _transforms(1)
    counts = ctx.model.param_counts()
    grads = _grad_collectives(tr.communication)
    assert len(grads) == 1 and not grads[0].expert
    assert grads[0].payload_bytes == pytest.approx(counts.total
                                                   * tr.communication.grad_bytes_per_element)
    assert grads[0].group_size == 64
    assert tr.expert_sharding == tr.sharding


def test_ep_equal_to_dp_has_no_expert_reduction_and_less_dp_time():
    """ep = dp x cp leaves one rank per expert-data-parallel group: no expert collective; the
    time plugin prices the transform's collectives, so its DP time falls with ep."""
    job = job_from_dict({"model": MIXTRAL, "training": {"dtype": "bf16"},
                         "parallelism": {"sharding": "zero1", "ep": 8},
                         "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}})
    engine = new_engine((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))
    ctx = engine.context(job)
    tr = transforms_of(job, ctx)
    assert not [c for c in tr.communication.collectives if c.expert]
    dense_only = job_from_dict({"model": MIXTRAL, "training": {"dtype": "bf16"},
                                "parallelism": {"sharding": "zero1", "ep": 1},
                                "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}})
    with_ep = engine.estimate(job).time.breakdown["communication_dp"]
    without = engine.estimate(dense_only).time.breakdown["communication_dp"]
    assert 0 < with_ep < without


def test_zero1_expert_optimizer_states_shard_over_the_expert_data_parallel_group():
    """ZeRO-1 with ep 8 on 64 GPUs: each rank's optimizer states are its dense states / 64 plus
    its expert states (experts / 8) / 8, not everything / 64."""
    engine = new_engine((memory_plugin, "memory_theory"))
    comps = {}
    for ep in (1, 8):
        job = job_from_dict({"model": MIXTRAL, "training": {"dtype": "bf16"},
                             "parallelism": {"sharding": "zero1", "ep": ep},
                             "hardware": NODES_8})
        comps[ep] = engine.estimate(job, quantities=("memory",))
    counts = comps[1].context.model.param_counts()
    sizing = comps[8].context.transforms.optimizer
    per_param = sizing.states * sizing.state_bytes + sizing.master_bytes
    want = per_param * ((counts.total - counts.experts) / 64 + counts.experts / 8 / 8)
    key = next(k for k in comps[8].memory.components if "optim" in k)
    got = comps[8].memory.components[key] + comps[8].memory.components.get("master_weights", 0)
    assert got == pytest.approx(want, rel=0.02)
    # without expert parallelism every state shards over 64 ranks
    got1 = comps[1].memory.components[key] + comps[1].memory.components.get("master_weights", 0)
    assert got1 == pytest.approx(per_param * counts.total / 64, rel=0.02)
