"""Issue 20: torch.compile enters through the traced bytes of Inductor's kernels, the
elementwise backward traffic is per op family, and the collective latencies, PCIe efficiency
and overlap interference carry their sources (docs/time_model.md §9)."""

from __future__ import annotations

import pytest

import fmest_time_roofline.plugin as plugin
from fmest.convert import job_from_dict
from fmest.physics import time_constants as tc
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F


@pytest.fixture
def model():
    engine = new_engine((plugin, "time_roofline"))
    return engine.resolve_model(job_from_dict({"model": "meta-llama/Llama-2-7b-hf"}))


def test_compiled_bytes_are_below_eager_for_every_family(model):
    eager = {"norm": F.NORM_BYTES_PER_ELEMENT + F.RESIDUAL_BYTES_PER_ELEMENT,
             "rope": F.ROPE_BYTES_PER_ELEMENT, "activation": F.GATED_ACT_BYTES_PER_ELEMENT,
             "gelu": F.ACT_BYTES_PER_ELEMENT}
    for op, fwd in eager.items():
        factor = F.ELEMENTWISE_BACKWARD_FACTOR.get(op, 2.0)
        assert sum(F.compiled_bytes_per_element(op)) < fwd * (1 + factor), op
    assert sum(F.compiled_bytes_per_element("loss")) < F.CE_BYTES_PER_LOGIT["standard"]
    assert set(F.COMPILED_FWD_BYTES_PER_ELEMENT) == set(F.COMPILED_BWD_BYTES_PER_ELEMENT)


def test_eager_elementwise_bytes_follow_the_per_family_backward_factors(model):
    fwd, bwd = F.elementwise_bytes_fwd_bwd(model)
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    want_fwd = (2 * F.NORM_BYTES_PER_ELEMENT * h + 2 * F.RESIDUAL_BYTES_PER_ELEMENT * h
                + F.ROPE_BYTES_PER_ELEMENT * (q + kv)
                + F.LAYOUT_BYTES_PER_ELEMENT * (2 * q + 2 * kv)
                + F.GATED_ACT_BYTES_PER_ELEMENT * i)
    b = F.ELEMENTWISE_BACKWARD_FACTOR
    want_bwd = (2 * F.NORM_BYTES_PER_ELEMENT * h * b["norm"]
                + 2 * F.RESIDUAL_BYTES_PER_ELEMENT * h * b["residual"]
                + F.ROPE_BYTES_PER_ELEMENT * (q + kv) * b["rope"]
                + F.LAYOUT_BYTES_PER_ELEMENT * (2 * q + 2 * kv) * b["layout"]
                + F.GATED_ACT_BYTES_PER_ELEMENT * i * b["activation"])
    assert fwd == pytest.approx(want_fwd)
    assert bwd == pytest.approx(want_bwd)
    assert F.elementwise_bytes_per_token_per_layer(model) == pytest.approx(fwd + bwd)


def test_compiled_elementwise_bytes_are_the_inductor_kernels(model):
    fwd, bwd = F.elementwise_bytes_fwd_bwd(model, compiled=True)
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    c_fwd, c_bwd = F.COMPILED_FWD_BYTES_PER_ELEMENT, F.COMPILED_BWD_BYTES_PER_ELEMENT
    for side, table in ((fwd, c_fwd), (bwd, c_bwd)):
        want = (2 * table["norm"] * h + table["rope"] * (q + kv) + table["layout"] * q
                + table["activation"] * i)
        assert side == pytest.approx(want)
    # a stack's smaller fused figure wins over Inductor's
    fused = F.elementwise_bytes_per_token_per_layer(model, compiled=True,
                                                    per_element=lambda op, eager: 0.0)
    assert fused == 0.0


def test_memory_bound_time_has_no_compile_divisor():
    assert F.memory_bound_seconds(1e9, 1e12, compiled=True) == \
        F.memory_bound_seconds(1e9, 1e12)
    assert not hasattr(tc, "COMPILE_MEMORY_BOUND_SPEEDUP")


def test_fp8_cast_bytes_eager_compiled_and_fused():
    assert F.fp8_cast_bytes_per_element() == F.FP8_CAST_BYTES_PER_ELEMENT == 33.0
    assert F.fp8_cast_bytes_per_element(compiled=True) == 5.0
    assert F.fp8_cast_bytes_per_element(1.0, compiled=True) == 1.0   # TE fused cast


def test_loss_and_scores_under_compile():
    assert F.loss_bytes_per_token(1000, compiled=True) == pytest.approx(8.0 * 1000)
    assert F.loss_bytes_per_token(1000, "chunked", compiled=True) == pytest.approx(8.0 * 1000)
    eager = F.eager_attention_bytes_per_token_per_layer(8, 512)
    assert eager == pytest.approx(F.EAGER_SCORE_BYTES_PER_ELEMENT * 1.93 * 8 * 512)
    assert F.eager_attention_bytes_per_token_per_layer(8, 512, compiled=True) < eager


def test_sourced_link_constants():
    # NVIDIA/nccl src/graph/tuning.cc hwLatencies, ring Simple: NVLink 3.4 us, NET 14 us
    assert tc.INTRA_NODE_LATENCY_S == pytest.approx(3.4e-6)
    assert tc.INTER_NODE_LATENCY_S == pytest.approx(14e-6)
    # nvbandwidth: A100 Gen4 25.13/32, H100 Gen5 52.77/64
    assert tc.PCIE_EFFICIENCY == pytest.approx((25.13 / 32 + 52.77 / 64) / 2, abs=0.01)
    # Lee et al. 2025 (arXiv:2507.03114): 18.9 % average compute slowdown under overlap
    assert tc.OVERLAP_INTERFERENCE_FRACTION == pytest.approx(0.189)
