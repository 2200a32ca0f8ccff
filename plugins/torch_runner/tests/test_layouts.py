"""The traced answer per layout (issue 21): what a single-process trace does not execute is
added from the framework's code (DDP's gradient buckets) or follows the stack's launcher (the
allocator replay under torchtitan's ``expandable_segments:True``), and layouts it only scales
are flagged ``scaled`` so that hybrid prefers theory there."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fmest.convert import job_from_dict  # noqa: E402
from fmest.testing import (
    TINY_LLAMA_CONFIG,  # noqa: E402
    new_engine,  # noqa: E402
)
from fmest_torch_runner import plugin as tr_plugin  # noqa: E402
from fmest_torch_runner import traced  # noqa: E402

TINY = TINY_LLAMA_CONFIG



def _job(parallelism=None, **training):
    tr = {"dtype": "fp32", "seq_len": 128, "micro_batch_size": 2, **training}
    return job_from_dict({"model": "tiny-llama", "model_config": dict(TINY), "training": tr,
                          "parallelism": parallelism or {},
                          "options": {"method": "traced"}})


def _est(job):
    engine = new_engine((tr_plugin, "torch_runner"))
    return engine.estimate_memory(job, engine.context(job)).chosen, engine.context(job)


def test_ddp_buckets_hold_one_copy_of_the_gradients():
    one, _ = _est(_job())
    ddp, _ = _est(_job({"dp": 4}))
    assert "framework_buffers" not in one.components
    # full fine-tuning in fp32: the gradients are as large as the parameters (512-B rounded)
    assert ddp.components["framework_buffers"] == pytest.approx(one.components["params"],
                                                                rel=0.01)
    assert ddp.provenance.scaled is False
    assert any("DDP gradient buckets" in n for n in ddp.notes)


def test_ddp_buckets_follow_lora_and_skip_megatron_buffers():
    lora, _ = _est(_job({"dp": 4}, technique="lora"))
    assert 0 < lora.components["framework_buffers"] < 2 * 2**20  # adapters only
    mc, _ = _est(_job({"dp": 4}, stack="megatron-core"))
    assert "framework_buffers" not in mc.components


def test_torchtitan_replays_with_expandable_segments():
    job = _job(stack="torchtitan")
    engine = new_engine((tr_plugin, "torch_runner"))
    assert traced.stack_alloc_conf(job, engine.context(job)) == "expandable_segments:True"
    assert traced.stack_alloc_conf(_job(), engine.context(_job())) == ""
    est = engine.estimate_memory(job).chosen
    assert est.provenance.basis == "traced"


def test_scaled_layouts_are_flagged():
    tp, _ = _est(_job({"tp": 2}))
    assert tp.provenance.scaled is True
    zero2, _ = _est(_job({"dp": 4, "zero_stage": 2}))
    assert zero2.provenance.scaled is True
