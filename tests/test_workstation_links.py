"""Intra-node collective bandwidth of workstation GPUs without NVLink (issue 20): GeForce
RTX 3090/4090 have no PCIe peer-to-peer with the stock driver, so NCCL stages through host
memory (docs/time_model.md §3). Values derived by hand from the GPU table's PCIe link
(Gen4 x16 = 32 GB/s per direction) and the two constants' sources."""

from __future__ import annotations

import math

import pytest

import fmest.transforms as fmest_transforms
from fmest.physics import time_constants as tc
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F


def _gpus():
    return {g.name: g for g in new_engine(entrypoints=True).registries.gpus.values()}


@pytest.fixture(scope="module")
def gpus():
    return _gpus()


def test_geforce_cards_have_no_p2p_and_pro_cards_keep_it():
    assert tc.pcie_p2p_disabled("RTX4090-24GB")
    assert tc.pcie_p2p_disabled("RTX3090-24GB")
    assert tc.pcie_p2p_disabled("rtx4090-24gb")      # prefix match is case-insensitive
    for name in ("RTX-A6000-48GB", "RTX-A5000-24GB", "RTX6000-ADA-48GB", "L40S-48GB",
                 "A100-SXM-80GB", "H100-SXM-80GB"):
        assert not tc.pcie_p2p_disabled(name), name


def test_host_staged_ratio_is_the_published_pair():
    # NVIDIA/nccl issue #1603: 4x RTX 4090, all-reduce busbw 18 GB/s (SHM) vs 22 GB/s (P2P)
    assert tc.HOST_STAGED_TO_P2P_BUSBW_RATIO == pytest.approx(18 / 22, abs=5e-4)


def test_rtx4090_pair_busbw_is_pcie_times_ring_times_host_staging(gpus):
    g = gpus["RTX4090-24GB"]
    assert g.pcie_bytes_per_s == 32e9 and g.intra_node_bytes_per_s == 32e9
    # 32 GB/s x 0.78 x 0.818 = 20.42 GB/s
    bw = F.link_bytes_per_s(g, inter_node=False, size=2, nodes=1)
    assert bw == pytest.approx(32e9 * 0.78 * 0.818)
    assert bw == pytest.approx(20.418e9, rel=1e-4)
    assert F.link_bytes_per_s(gpus["RTX3090-24GB"], inter_node=False) == pytest.approx(bw)


def test_workstation_cards_with_p2p_and_nvlink_parts_are_unchanged(gpus):
    # RTX A6000: PCIe Gen4 x16 at the ring efficiency, 32 x 0.78 = 24.96 GB/s
    a6000 = gpus["RTX-A6000-48GB"]
    assert F.link_bytes_per_s(a6000, inter_node=False) == pytest.approx(24.96e9)
    # A100 SXM: NVLink3 300 GB/s x 0.78; H100 SXM: NVLink4 450 x 0.82
    assert F.link_bytes_per_s(gpus["A100-SXM-80GB"], inter_node=False) == pytest.approx(234e9)
    assert F.link_bytes_per_s(gpus["H100-SXM-80GB"], inter_node=False) == pytest.approx(369e9)


def test_fsdp_gather_of_a_7b_bf16_model_on_two_rtx4090(gpus):
    """FULL_SHARD over 2 GPUs gathers the other half of 6.74e9 bf16 parameters per pass:
    (n-1)/n x 13.48 GB / 20.418 GB/s = 0.3301 s, plus one half latency step (3.4 us)."""
    g = gpus["RTX4090-24GB"]
    bw = F.link_bytes_per_s(g, inter_node=False, size=2, nodes=1)
    t = F.all_gather_seconds(6.74e9 * 2, 2, bw)
    assert t == pytest.approx(0.5 * 13.48e9 / 20.418e9 + 3.4e-6, rel=1e-4)
    assert t == pytest.approx(0.3301, abs=5e-4)


def test_planner_reads_the_same_intra_node_rate(gpus):
    from fmest.plan.planner import _intra_bw

    for name in ("RTX4090-24GB", "RTX3090-24GB", "RTX-A6000-48GB", "H100-SXM-80GB"):
        g = gpus[name]
        assert math.isclose(_intra_bw(g), F.link_bytes_per_s(g, inter_node=False),
                            rel_tol=1e-12), name


def test_step_time_of_a_two_gpu_fsdp_job_grows_only_by_the_exposed_gather(gpus):
    """End to end: the same 2 x RTX 4090 FSDP LoRA job is slower with host staging than with
    the P2P rate, and the difference is bounded by the unhidden gather time."""
    from fmest.convert import job_from_dict

    engine = new_engine(entrypoints=True)
    job = job_from_dict({
        "model": "meta-llama/Llama-2-7b-hf",
        "hardware": {"gpu": "RTX4090-24GB", "gpus_per_node": 2, "nodes": 1},
        "training": {"dtype": "bf16", "precision": "pure", "technique": "lora",
                     "lora_rank": 64, "seq_len": 512, "micro_batch_size": 1,
                     "activation_checkpointing": "full", "attention": "flash",
                     "stack": "pytorch"},
        "parallelism": {"dp": 2, "fsdp": "full_shard"},
    })
    slow = engine.estimate(job, quantities=("time",)).time
    saved = tc.HOST_STAGED_TO_P2P_BUSBW_RATIO
    try:
        tc.HOST_STAGED_TO_P2P_BUSBW_RATIO = 1.0
        # resolved transforms (and the collectives priced on them) are memoised per job:
        # a constant patched at run time needs them resolved again
        fmest_transforms._RESOLVED.clear()
        fast = engine.estimate(job, quantities=("time",)).time
    finally:
        tc.HOST_STAGED_TO_P2P_BUSBW_RATIO = saved
    comm = slow.breakdown["communication_dp"] - fast.breakdown["communication_dp"]
    assert comm > 0
    # 2 gathers (fwd, bwd) of 6.74 GB each: 6.74e9 / 20.418e9 - 6.74e9 / 24.96e9 = 0.060 s each
    bound = 2 * (6.74e9 / 20.418e9 - 6.74e9 / 24.96e9)
    assert comm <= bound * 1.01
    # the framework overhead is a fixed fraction of the busy time (FRAMEWORK_OVERHEAD_FRACTION)
    step = slow.step_seconds - fast.step_seconds
    assert step == pytest.approx(comm / (1 - F.FRAMEWORK_OVERHEAD_FRACTION), rel=1e-6)
