"""Grace-hosted GPUs (GB200, GH200) dispatch host ops slower than x86 hosts: the Megatron-Core
MoE dispatcher syncs' host time scales by ``HOST_OP_TIME_FACTOR_BY_GPU`` (NVIDIA/
TransformerEngine issue #2053), in the time plugin and in the planner's mirror."""

from __future__ import annotations

import numpy as np
import pytest

from fmest.physics import time_constants as tc
from fmest.plan import vector
from fmest_time_roofline import formulas as F


def test_factor_is_the_published_ratio():
    assert tc.HOST_OP_TIME_FACTOR_BY_GPU["GB200"] == pytest.approx(37.08 / 13.48)
    assert tc.HOST_OP_TIME_FACTOR_BY_GPU["GH200"] == pytest.approx(33.17 / 13.48)
    assert tc.host_seconds_per_op("GB200-186GB") == pytest.approx(
        tc.HOST_SECONDS_PER_EAGER_OP * 37.08 / 13.48)
    # x86-hosted parts keep the plain per-op time; B200 is not a prefix match of GB200
    for name in ("B200-SXM-180GB", "H100-SXM-80GB", "A100-SXM-80GB"):
        assert tc.host_seconds_per_op(name) == tc.HOST_SECONDS_PER_EAGER_OP


def test_sync_wait_grows_on_grace_when_host_bound():
    kw = dict(moe_layers=10.0, gpu_forward_per_layer=0.5e-3, gpu_backward_per_layer=1.0e-3)
    x86 = F.moe_sync_exposed_seconds(**kw)
    grace = F.moe_sync_exposed_seconds(**kw, op_seconds=tc.host_seconds_per_op("GB200"))
    assert x86 == F.moe_sync_exposed_seconds(**kw, op_seconds=tc.HOST_SECONDS_PER_EAGER_OP)
    assert grace > x86 > 0.0
    # forward segment: max(137 c, c + g_f) - g_f per layer, c the Grace per-op time
    c = tc.host_seconds_per_op("GB200")
    host_b = tc.MEGATRON_MOE_LAYER_HOST_OPS["backward"] * c
    fwd = max(tc.MEGATRON_MOE_LAYER_HOST_OPS["forward"] * c, c + 0.5e-3) - 0.5e-3
    assert grace == pytest.approx(10.0 * (fwd + max(0.0, host_b - 1.0e-3)))


def test_planner_mirror_uses_the_same_per_op_time():
    cfg = {"layers": np.array([48.0]), "pp": np.array([1.0]), "fwd_share": np.array([1 / 3]),
           "moe_layers": np.array([48.0]), "ckpt_full": np.array([False]),
           "ckpt_share": np.array([0.0]), "host_op_s": tc.host_seconds_per_op("GB200")}
    gpu_mb = np.array([48 * 1.5e-3])
    got = vector.moe_sync_wait_seconds(cfg, gpu_mb)
    want = F.moe_sync_exposed_seconds(moe_layers=48.0, gpu_forward_per_layer=0.5e-3,
                                      gpu_backward_per_layer=1.0e-3,
                                      op_seconds=tc.host_seconds_per_op("GB200"))
    assert float(got[0]) == pytest.approx(want)
