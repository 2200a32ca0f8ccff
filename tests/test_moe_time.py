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
    shape = _shape(checkpointing="full", recompute_share=1.0)
    assert E.moe_permute_bytes(_MODEL, shape) == pytest.approx(
        3 * 48 * F.moe_permute_bytes(4096, 8, 2048, 2.0, 16))


def test_no_moe_no_terms():
    dense = SimpleNamespace(is_moe=False, experts_per_token=0)
    assert E.moe_permute_bytes(dense, _shape()) == 0.0
    assert E.moe_dispatch_seconds(dense, _shape(), _gpu(), 8) == 0.0


# -- the flex dispatcher (DeepEP / HybridEP) and the EP A2A overlap ----------------------------

def test_groups_hit_is_the_hypergeometric_miss():
    # 128 experts over 4 nodes (32 each), k = 8: 4 x (1 - C(96, 8) / C(128, 8))
    want = 4 * (1 - math.comb(96, 8) / math.comb(128, 8))
    assert F.moe_groups_hit(128, 8, 4) == pytest.approx(want)
    assert 3.6 < want < 3.7
    # one group: always hit; a group per expert: k groups
    assert F.moe_groups_hit(128, 8, 1) == 1.0
    assert F.moe_groups_hit(128, 8, 128) == pytest.approx(8.0)


def test_flex_dispatch_inside_one_nvlink_domain():
    # DeepSeek-V3 on GB200 NVL72: 256 experts, k = 8, EP 32 in the 72-GPU domain; one copy per
    # destination rank: 32 x (1 - C(248, 8) / C(256, 8)) ~ 7.2 of alltoall's 8
    shard, bw = 4096 * 7168 * 2.0, 900e9
    copies = 32 * (1 - math.comb(248, 8) / math.comb(256, 8))
    got = F.flex_dispatch_seconds(shard, 256, 8, 32, 72, bw, 40e9)
    assert got == pytest.approx(31 / 32 * copies * shard / bw + INTRA_NODE_LATENCY_S * 5)
    assert 7.1 < copies < 7.3


def test_flex_dispatch_across_nodes_sends_once_per_remote_node():
    # Qwen3-235B-A22B on H100: 128 experts, k = 8, EP 32 over 4 nodes of 8; NVLink carries
    # 7/8 of the rank copies, the NIC the 3/4 remote share of the nodes hit
    shard, bw, nic = 2048 * 4096 * 2.0, 450e9, 36e9
    ranks_hit = 32 * (1 - math.comb(124, 8) / math.comb(128, 8))
    nodes_hit = 4 * (1 - math.comb(96, 8) / math.comb(128, 8))
    got = F.flex_dispatch_seconds(shard, 128, 8, 32, 8, bw, nic, inter_node=True)
    lat = F._latency_s(32, True) / 2
    want = max(7 / 8 * ranks_hit * shard / bw, 3 / 4 * nodes_hit * shard / nic) + lat
    assert got == pytest.approx(want)
    # alltoall sends 8 x 24/32 = 6 copies per token off the node, DeepEP ~2.72
    assert 3 / 4 * nodes_hit == pytest.approx(2.72, abs=0.01)


def test_dispatch_deepep_replaces_the_alltoall_and_expert_tp_gather():
    gpu = _gpu()
    bw = F.link_bytes_per_s(gpu, inter_node=False)
    nic = F.nic_bytes_per_s(gpu)
    # tp 2, expert_tp 2, ep 8: one flex group of 16 ranks over 2 nodes, no separate gather
    shape = _shape(tp=2, dp=8)
    shard = 2048 * 2048 * 2.0
    a2a = F.flex_dispatch_seconds(shard, 128, 8, 16, 8, bw, nic, expert_tp=2, inter_node=True)
    got = E.moe_dispatch_seconds(_MODEL, shape, gpu, 8, dispatcher="deepep")
    assert got == pytest.approx(2 * 48 * 2 * a2a)
    assert got < E.moe_dispatch_seconds(_MODEL, shape, gpu, 8)
    assert E.moe_dispatch_seconds(_MODEL, shape, gpu, 8, dispatcher="hybridep") == got
    assert E.moe_dispatch_seconds(_MODEL, shape, gpu, 8, dispatcher="alltoall") == \
        E.moe_dispatch_seconds(_MODEL, shape, gpu, 8)


def test_a2a_overlap_hides_the_traffic_under_the_window():
    from fmest.physics.time_constants import OVERLAP_INTERFERENCE_FRACTION as frac

    gpu = _gpu()
    plain = E.moe_dispatch_seconds(_MODEL, _shape(), gpu, 8)
    # a window longer than the traffic: only the interference share stays
    assert E.moe_dispatch_seconds(_MODEL, _shape(), gpu, 8, overlap_window=10 * plain) == \
        pytest.approx(frac * plain)
    # a shorter one: what does not fit, plus the share of what does
    assert E.moe_dispatch_seconds(_MODEL, _shape(), gpu, 8, overlap_window=plain / 2) == \
        pytest.approx(plain / 2 + frac * plain / 2)
    # Megatron refuses the overlap with full recompute: not applied
    full = _shape(checkpointing="full", recompute_share=1.0)
    assert E.moe_dispatch_seconds(_MODEL, full, gpu, 8, overlap_window=10 * plain) == \
        E.moe_dispatch_seconds(_MODEL, full, gpu, 8)


def test_vector_mirror_of_the_flex_dispatcher():
    import numpy as np

    from fmest.plan import vector as V

    for tp, ep, domain in ((1, 8, 8), (1, 32, 8), (2, 8, 8), (1, 32, 72)):
        gpu = _gpu("GB200-186GB" if domain == 72 else "H100-SXM-80GB")
        cfg = dict(tp=np.array([float(tp)]), etp=np.array([float(tp)]), ep=np.array([float(ep)]),
                   pp=np.array([1.0]), experts_per_token=8.0, hidden=2048.0, act_bytes=2.0,
                   nvlink_domain=float(domain), nic_bw=50e9, ckpt_full=np.array([False]),
                   moe_layers=48.0, intra_bw=F.link_bytes_per_s(gpu, inter_node=False),
                   moe_flex=True, num_experts=128.0)
        got = V.moe_dispatch_seconds(cfg, 4096.0, 8.0)[0]
        want = E.moe_dispatch_seconds(_MODEL, _shape(tp=tp, ep=ep, dp=ep), gpu, 8,
                                      dispatcher="deepep")
        assert got == pytest.approx(want, rel=1e-6)


def test_megatron_arguments_set_the_dispatcher_and_overlap(tmp_path):
    from fmest.configs import load_configs

    args = tmp_path / "train.args"
    args.write_text("--expert-model-parallel-size 8 --moe-token-dispatcher-type flex "
                    "--moe-flex-dispatcher-backend hybridep --overlap-moe-expert-parallel-comm "
                    "--bf16\n")
    par = load_configs([str(args)]).data["parallelism"]
    assert par["moe_dispatcher"] == "hybridep" and par["moe_a2a_overlap"] is True
    # flex alone: DeepEP, Megatron's default backend; --moe-enable-deepep the older spelling
    args.write_text("--moe-token-dispatcher-type flex --moe-enable-deepep --bf16\n")
    assert load_configs([str(args)]).data["parallelism"]["moe_dispatcher"] == "deepep"
    args.write_text("--moe-token-dispatcher-type alltoall --bf16\n")
    assert load_configs([str(args)]).data["parallelism"]["moe_dispatcher"] == "alltoall"


def test_cli_flags_and_row_text_reach_the_job():
    import sys
    from pathlib import Path

    from fmest.flags import JOB_FLAGS

    paths = {f.path: f for f in JOB_FLAGS}
    assert "--moe-dispatcher" in paths["parallelism.moe_dispatcher"].names
    assert "--moe-a2a-overlap" in paths["parallelism.moe_a2a_overlap"].names
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import measured

    assert measured._moe_settings({"dispatcher": "DeepEP"}, "notes=+1f1b overlap") == {
        "moe_dispatcher": "deepep", "moe_a2a_overlap": True}
    assert measured._moe_settings({"dispatcher": "A2A"}, "") == {"moe_dispatcher": "alltoall"}
    assert measured._moe_settings({}, "") == {}
