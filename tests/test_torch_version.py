"""``hardware.torch_version`` (``--torch-version``): the behaviours that changed between PyTorch
releases. SDPA runs cuDNN attention first on sm90/sm100 from 2.11 (and 2.10 built with CUDA 13),
FlashAttention-2 first otherwise and when unstated; FSDP2 kept its reduce-scatter input in the
reduce-scatter stream's pool before 2.5 (pytorch/pytorch PR #129721)."""

from __future__ import annotations

import pytest

import fmest
from fmest.errors import InputError
from fmest.physics.device_terms import fsdp2_rs_input_in_side_pool
from fmest_time_roofline.formulas import sdpa_prefers_cudnn

BASE = {"model": "meta-llama/Llama-3.1-8B", "training": {"seq_len": 16384},
        "hardware": {"gpu": "H100-SXM"}}


def _job(**hardware):
    return fmest.to_job({**BASE, "hardware": {**BASE["hardware"], **hardware}})


@pytest.mark.parametrize("value", ["2.4", "2.11", "2.11.0", "2.11.0+cu130", "1.13"])
def test_accepted_versions(value):
    assert _job(torch_version=value).hardware.torch_version == value


@pytest.mark.parametrize("key", ["torch_version", "cuda_version"])
def test_a_number_is_refused_not_misread(key):
    """``torch_version: 2.10`` in a YAML job file is the float 2.1: refused with the reason
    rather than read as release 2.1."""
    with pytest.raises(InputError) as err:
        _job(**{key: 2.10})
    assert f"hardware.{key}" in str(err.value) and "string" in str(err.value)


@pytest.mark.parametrize("value", ["3", "2", "2.x", "11.5", "latest"])
def test_refused_versions_name_the_field(value):
    with pytest.raises(InputError) as err:
        _job(torch_version=value)
    assert "hardware.torch_version" in str(err.value)


@pytest.mark.parametrize("torch,cuda,cc,expected", [
    (None, None, "9.0", False),        # unstated: FlashAttention-2 first
    ("2.9", None, "9.0", False),
    ("2.10", "12.8", "9.0", False),    # the cu128 wheel loads cuDNN 9.10
    ("2.10", "13.0", "9.0", True),     # the cu130 wheel loads cuDNN 9.15.1
    ("2.11", None, "9.0", True),
    ("2.13.0+cu130", None, "10.0", True),
    ("2.11", None, "8.0", False),      # A100: not sm90/sm100
    ("2.5", None, "9.0", False),       # 2.5.0 did, 2.5.1 reverted: not said by MAJOR.MINOR
])
def test_sdpa_backend_by_release(torch, cuda, cc, expected):
    assert sdpa_prefers_cudnn(torch, cuda, cc) is expected


def test_sdpa_on_recent_torch_runs_at_cudnn_rates():
    """cuDNN attention is faster than FA2 on H100 at long sequences (FlashAttention-3 paper
    Fig. 5-6 rows of fmest/data/attention_kernels.csv): the step is shorter and says why; the
    flash-attn package (``attention: flash``) is FA2 whatever the release."""
    from fmest.engine import Engine

    eng = Engine()
    old = eng.estimate(_job(), quantities=("memory", "time")).time
    new = eng.estimate(_job(torch_version="2.11"), quantities=("memory", "time")).time
    assert new.step_seconds < 0.95 * old.step_seconds
    assert any("cuDNN attention" in n for n in new.notes)
    flash = fmest.to_job({**BASE, "training": {**BASE["training"], "attention": "flash"},
                          "hardware": {"gpu": "H100-SXM", "torch_version": "2.11"}})
    same = eng.estimate(flash, quantities=("memory", "time")).time
    assert not any("cuDNN attention" in n for n in same.notes)


def test_fsdp2_before_2_5_reserves_the_root_reduce_scatter_input():
    """torchtitan (FSDP2) on 8 GPUs, amp: before 2.5 the root unit's fp32 reduce-scatter input
    (embedding + head, 2 x 32000 x 4096 x 4 B / 1 = 0.98 GiB) sits in the reduce-scatter
    stream's pool on top; 2.5 and unstated: not."""
    assert fsdp2_rs_input_in_side_pool("2.3") and not fsdp2_rs_input_in_side_pool("2.5")
    assert not fsdp2_rs_input_in_side_pool(None)
    from fmest.engine import Engine

    def total(version):
        job = fmest.to_job({"model": "meta-llama/Llama-2-7b-hf",
                            "training": {"micro_batch_size": 8, "seq_len": 2048,
                                         "activation_checkpointing": "full",
                                         "stack": "torchtitan"},
                            "parallelism": {"fsdp": "full_shard"},
                            "hardware": {"gpu": "H100-SXM-96GB", "gpus_per_node": 8,
                                         "torch_version": version}})
        return Engine().estimate(job, quantities=("memory",)).memory

    root = 2 * 32000 * 4096 * 4
    old, new = total("2.3"), total("2.5")
    assert old.total_bytes - new.total_bytes == pytest.approx(root, rel=0.02)
    assert total(None).total_bytes == new.total_bytes
    # the answer says why; the others say nothing of it
    assert any("PR #129721" in n for n in old.notes)
    assert not any("PR #129721" in n for n in new.notes)
