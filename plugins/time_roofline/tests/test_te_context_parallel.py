"""Transformer Engine's p2p context parallelism (formulas.te_p2p_ring_attention_costs) and the
Blackwell SM count of the GEMM wave term."""
import pytest

from fmest_time_roofline import formulas as F

ARGS = dict(cp=4, tokens=4096.0, q_heads=16.0, head_dim=128.0, act_bytes=2.0,
            fwd_seconds=4e-3, bwd_seconds=1e-2, recompute=False)


def _te(kv_heads: float, **kw) -> dict:
    args = {**ARGS, **kw}
    return F.te_p2p_ring_attention_costs(kv_heads=kv_heads, p2p_bytes_per_s=50e9,
                                         p2p_inter_node=True, **args)


def test_te_ring_sends_gqa_heads_not_expanded():
    # K,V at their own head count: a GQA model (2 KV heads for 16 query heads) sends 1/8
    gqa, mha = _te(2.0), _te(16.0)
    assert gqa["comm_seconds"] < mha["comm_seconds"] / 4
    assert gqa["exposed_seconds"] <= mha["exposed_seconds"]


def test_te_ring_comm_volume_follows_the_code():
    # forward cp-1 KV sends, backward cp-1 sends of KV+dKV and the last dKV alone
    kv_bytes = 2.0 * ARGS["tokens"] * 2.0 * ARGS["head_dim"] * ARGS["act_bytes"]
    kv = F.p2p_seconds(kv_bytes, 50e9, True)
    kv2 = F.p2p_seconds(2 * kv_bytes, 50e9, True)
    steps = ARGS["cp"] - 1
    assert _te(2.0)["comm_seconds"] == pytest.approx(steps * kv + steps * kv2 + kv)
    # a recomputed forward repeats the forward sends
    assert _te(2.0, recompute=True)["comm_seconds"] == pytest.approx(
        2 * steps * kv + steps * kv2 + kv)


def test_te_ring_without_cp_costs_nothing():
    assert _te(2.0, cp=1) == {"memory_bytes": 0.0, "exposed_seconds": 0.0, "comm_seconds": 0.0}


def test_te_ring_cheaper_than_torch_ring_for_gqa():
    torch_ring = F.ring_attention_costs(gather_bytes_per_s=50e9, p2p_bytes_per_s=50e9,
                                        gather_inter_node=True, p2p_inter_node=True, **ARGS)
    assert _te(2.0)["exposed_seconds"] < torch_ring["exposed_seconds"]


def test_b200_sm_count_and_no_borrowed_gb200_figure():
    assert F.sm_count("B200-SXM-180GB") == 148
    assert F.sm_count("GB200-186GB") is None
