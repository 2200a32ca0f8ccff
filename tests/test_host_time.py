"""Host-bound step time (issue 20): eager op dispatch plus DeepSpeed ZeRO-3's per-module hooks.

Hand-derived values from the constants' definitions in
plugins/time_roofline/fmest_time_roofline/formulas.py and core/fmest/physics/time_constants.py:
forward ops (EAGER_FORWARD_OPS_*: 77 / 70 per layer without / with checkpointing, 14 per LoRA
module, 31 outside) at HOST_SECONDS_PER_FORWARD_OP = 21.7 us, backward ops
(EAGER_BACKWARD_OPS_*: 142 / 268, 10.25 / 23.25 per LoRA module, 34 outside) at
HOST_SECONDS_PER_BACKWARD_OP = 13.8 us; ZeRO-3's hook op-equivalents
(ZERO3_HOOK_OPS_PER_LAYER) at HOST_SECONDS_PER_EAGER_OP = 10 us."""

from __future__ import annotations

import pytest

import fmest_time_roofline.plugin as plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F

FWD, BWD, HOOK = 21.7e-6, 13.8e-6, 10e-6


def _plain(layers: int, ckpt: bool, lora_modules: int = 0) -> float:
    """One micro-batch's eager dispatch seconds, by hand."""
    fwd = layers * (70 if ckpt else 77) + 31 + layers * lora_modules * 14
    bwd = layers * (268 if ckpt else 142) + 34 + layers * lora_modules * (23.25 if ckpt else 10.25)
    return fwd * FWD + bwd * BWD


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
    24 x 70 + 31 = 1711 forward and 24 x 268 + 34 = 6466 backward per micro-batch ->
    8 x (1711 x 19.5 + 6466 x 10.3) us = 0.7997 s; ZeRO-3 adds 660 op-equivalents per layer at
    10 us: + 8 x 24 x 660 x 10 us = 1.2672 s."""
    plain = F.host_dispatch_seconds(layers=24, checkpointing="full", lora_modules_per_layer=0,
                                    micro_batches=8)
    zero3 = F.host_dispatch_seconds(layers=24, checkpointing="full", lora_modules_per_layer=0,
                                    micro_batches=8, zero3_hooks=True)
    assert plain == pytest.approx(8 * (1711 * FWD + 6466 * BWD), rel=1e-12)
    assert plain == pytest.approx(8 * _plain(24, True), rel=1e-12)
    assert zero3 == pytest.approx(plain + 8 * 24 * 660 * HOOK, rel=1e-12)
    # without recompute: 2 layers of 77 + 142 ops, the hooks 440 per layer
    none = F.host_dispatch_seconds(layers=2, checkpointing="none", lora_modules_per_layer=0,
                                   micro_batches=1, zero3_hooks=True)
    assert none == pytest.approx(_plain(2, False) + 2 * 440 * HOOK, rel=1e-12)
    # LoRA adapters keep their own eager ops on top (4 modules x (14 + 23.25) with recompute)
    lora = F.host_dispatch_seconds(layers=1, checkpointing="full", lora_modules_per_layer=4,
                                   micro_batches=1, zero3_hooks=True)
    assert lora == pytest.approx(_plain(1, True, 4) + 660 * HOOK, rel=1e-12)
    assert _plain(1, True, 4) - _plain(1, True) == pytest.approx(4 * (14 * FWD + 23.25 * BWD))


def test_zero3_on_one_gpu_is_host_bound_at_short_sequences(engine):
    """A 256-token full fine-tune under DeepSpeed ZeRO-3 on one A100 is the host's time:
    32 checkpointed layers' eager ops plus 660 hook op-equivalents each, 8 micro-batches, then
    the optimizer step (its kernels follow the host's last dispatch)."""
    got = engine.estimate(_job(3), quantities=("time",)).time
    host = 8 * (_plain(32, True) + 32 * 660 * HOOK)
    opt = got.breakdown["optimizer_step"]
    assert opt > 0
    assert got.step_seconds == pytest.approx(host + opt, rel=1e-9)
    assert any("host-bound" in n for n in got.notes)
    # ZeRO-2 runs no per-module hooks: its host floor is the eager ops alone
    z2 = engine.estimate(_job(2), quantities=("time",)).time
    assert z2.step_seconds < got.step_seconds


def test_zero3_hooks_do_not_bind_long_sequences(engine):
    """At 8192 tokens the GPU's work exceeds the hook time: the step is the roofline's."""
    got = engine.estimate(_job(3, seq_len=8192), quantities=("time",)).time
    assert not any("host-bound" in n for n in got.notes)
    assert got.step_seconds > 8 * (_plain(32, True) + 32 * 660 * HOOK)
