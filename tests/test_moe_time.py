"""MoE / expert-parallel step-time terms of time_roofline (issue 20): hand-derived values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from fmest.physics.time_constants import INTER_NODE_COLLECTIVE_EFFICIENCY, INTRA_NODE_LATENCY_S
from fmest_time_roofline import estimator as E
from fmest_time_roofline import formulas as F


def test_all_to_all_within_node_keeps_the_busbw_rule():
    # (n-1)/n * B / busbw + alpha * ceil(log2 n)
    got = F.all_to_all_seconds(8e6, 8, 100e9)
    assert got == pytest.approx(7 / 8 * 8e6 / 100e9 + INTRA_NODE_LATENCY_S * 3)


def test_all_to_all_across_nodes_is_nic_bound():
    # 16 ranks, 8 per node: 7/16 of the buffer over NVLink, 8/16 through the NIC at once
    b, nvl, nic = 16e6, 400e9, 40e9
    got = F.all_to_all_seconds(b, 16, nvl, True, ranks_per_node=8, nic_bytes_per_s=nic)
    lat = F._latency_s(16, True) / 2
    assert got == pytest.approx(max(7 / 16 * b / nvl, 8 / 16 * b / nic) + lat)
    assert got == pytest.approx(0.5 * b / nic + lat)


def test_moe_permute_bytes():
    # k = 8, h = 2048, bf16, 16 local experts, tp 1: (2*9 + 4*8) * T * h * 2
    assert F.moe_permute_bytes(1000, 8, 2048, 2.0, 16) == pytest.approx(50 * 1000 * 2048 * 2)
    # one local expert: no sort; tp 2: permute over the T/2 shard
    assert F.moe_permute_bytes(1000, 8, 2048, 2.0, 1, tp=2) == pytest.approx(
        18 * 500 * 2048 * 2)
    assert F.moe_permute_bytes(1000, 0, 2048, 2.0, 16) == 0.0


def test_nvlink_domain():
    assert F.nvlink_domain_gpus("GB200-186GB", 8) == 72
    assert F.nvlink_domain_gpus("H100-SXM-80GB", 8) == 8


def _shape(**kw):
    base = dict(tp=1, pp=1, cp=1, ep=8, dp=8, micro_batch=1, seq_len=4096, grad_accum=1,
                tokens=4096.0, act_bytes=2.0, linear_bytes=2.0, linear_dtype="bf16", full=True,
                checkpointing="none", stage_layers=48.0)
    base.update(kw)
    return E.StepShape(**base)


_MODEL = SimpleNamespace(is_moe=True, num_moe_layers=48, num_layers=48, experts_per_token=8,
                         hidden_size=2048, num_experts=128)


def _gpu(name="H100-SXM-80GB"):
    return SimpleNamespace(name=name, intra_node_bytes_per_s=450e9, pcie_bytes_per_s=64e9,
                           inter_node_bytes_per_s=50e9)


def test_dispatch_intra_node():
    gpu = _gpu()
    bw = F.link_bytes_per_s(gpu, inter_node=False)
    routed = 4096 * 8 * 2048 * 2.0
    a2a = 7 / 8 * routed / bw + INTRA_NODE_LATENCY_S * 3
    # forward + backward, dispatch + combine, 48 MoE layers
    assert E.moe_dispatch_seconds(_MODEL, _shape(), gpu, 8) == pytest.approx(2 * 48 * 2 * a2a)


def test_dispatch_tp_shards_tokens_and_spans_nodes():
    gpu = _gpu()
    shape = _shape(tp=2, dp=8)
    # SP shard T/2; EP ranks 2 apart: 8 ranks over 2 nodes, 4 per node
    routed = 2048 * 8 * 2048 * 2.0
    bw = F.link_bytes_per_s(gpu, inter_node=False)
    nic = 50e9 * INTER_NODE_COLLECTIVE_EFFICIENCY
    a2a = max(3 / 8 * routed / bw, 4 / 8 * routed / nic) + F._latency_s(8, True) / 2
    t_bw = F.link_bytes_per_s(gpu, inter_node=False, size=2)
    etp = 2 * F.reduce_scatter_seconds(routed * 2, 2, t_bw, False)
    assert E.moe_dispatch_seconds(_MODEL, shape, gpu, 8) == pytest.approx(
        2 * 48 * (2 * a2a + etp))


def test_dispatch_gb200_stays_on_nvlink():
    gpu = _gpu("GB200-186GB")
    shape = _shape(ep=64, dp=64)
    routed = 4096 * 8 * 2048 * 2.0
    bw = F.link_bytes_per_s(gpu, inter_node=False)
    a2a = 63 / 64 * routed / bw + INTRA_NODE_LATENCY_S * math.ceil(math.log2(64))
    assert E.moe_dispatch_seconds(_MODEL, shape, gpu, 8) == pytest.approx(2 * 48 * 2 * a2a)


def test_permute_bytes_of_a_micro_batch():
    # full checkpointing: forward, backward and the recompute's forward; 128/8 = 16 local
    shape = _shape(checkpointing="full")
    assert E.moe_permute_bytes(_MODEL, shape) == pytest.approx(
        3 * 48 * F.moe_permute_bytes(4096, 8, 2048, 2.0, 16))


def test_no_moe_no_terms():
    dense = SimpleNamespace(is_moe=False, experts_per_token=0)
    assert E.moe_permute_bytes(dense, _shape()) == 0.0
    assert E.moe_dispatch_seconds(dense, _shape(), _gpu(), 8) == 0.0
