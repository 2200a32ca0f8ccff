"""Host-bound step time (issue 20): eager op dispatch plus DeepSpeed ZeRO-3's per-module hooks.

Hand-derived values from the constants' definitions in
plugins/time_roofline/fmest_time_roofline/formulas.py (EAGER_OPS_*, ZERO3_HOOK_OPS_PER_LAYER,
HOST_SECONDS_PER_EAGER_OP = 10 us)."""

from __future__ import annotations

import pytest

import fmest_time_roofline.plugin as plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F


@pytest.fixture(scope="module")
def engine():
    return new_engine((plugin, "time_roofline"))


def _job(zero_stage: int, seq_len: int = 256):
    return job_from_dict({
        "model": "meta-llama/Llama-2-7b-hf",
        "training": {"seq_len": seq_len, "micro_batch_size": 1, "grad_accum_steps": 8,
                     "activation_checkpointing": "full", "stack": "deepspeed"},
        "parallelism": {"zero_stage": zero_stage},
        "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 1, "nodes": 1}})


def test_zero3_hook_ops_by_hand():
    """24 checkpointed layers, 8 micro-batches (the Qwen-1.8B shape): eager ops
    24 x 338 + 65 = 8177 per micro-batch -> 0.65416 s; ZeRO-3 adds 660 per layer:
    24 x 998 + 65 = 24017 -> 1.92136 s."""
    plain = F.host_dispatch_seconds(layers=24, checkpointing="full", lora_modules_per_layer=0,
                                    micro_batches=8)
    zero3 = F.host_dispatch_seconds(layers=24, checkpointing="full", lora_modules_per_layer=0,
                                    micro_batches=8, zero3_hooks=True)
    assert plain == pytest.approx(8177 * 8 * 10e-6, rel=1e-12)
    assert zero3 == pytest.approx(24017 * 8 * 10e-6, rel=1e-12)
    # without recompute: 2 x (219 + 440) + 65 = 1383 ops for one micro-batch of 2 layers
    none = F.host_dispatch_seconds(layers=2, checkpointing="none", lora_modules_per_layer=0,
                                   micro_batches=1, zero3_hooks=True)
    assert none == pytest.approx(1383 * 10e-6, rel=1e-12)
    # LoRA adapters keep their own eager ops on top (4 modules x 37 with recompute)
    lora = F.host_dispatch_seconds(layers=1, checkpointing="full", lora_modules_per_layer=4,
                                   micro_batches=1, zero3_hooks=True)
    assert lora == pytest.approx((338 + 4 * 37 + 660 + 65) * 10e-6, rel=1e-12)


def test_zero3_on_one_gpu_is_host_bound_at_short_sequences(engine):
    """A 256-token full fine-tune under DeepSpeed ZeRO-3 on one A100 is the host's time:
    32 layers x (338 + 660) + 65 ops per micro-batch, 8 micro-batches, at 10 us."""
    got = engine.estimate(_job(3), quantities=("time",)).time
    host = (32 * (338 + 660) + 65) * 8 * 10e-6
    assert got.step_seconds == pytest.approx(host, rel=1e-9)
    assert any("host-bound" in n for n in got.notes)
    # ZeRO-2 runs no per-module hooks: its host floor is the eager ops alone
    z2 = engine.estimate(_job(2), quantities=("time",)).time
    assert z2.step_seconds < got.step_seconds


def test_zero3_hooks_do_not_bind_long_sequences(engine):
    """At 8192 tokens the GPU's work exceeds the hook time: the step is the roofline's."""
    got = engine.estimate(_job(3, seq_len=8192), quantities=("time",)).time
    assert not any("host-bound" in n for n in got.notes)
    assert got.step_seconds > (32 * (338 + 660) + 65) * 8 * 10e-6
