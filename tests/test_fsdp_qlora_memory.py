"""FSDP + LoRA/QLoRA memory terms of memory_theory, each against a hand count from the code it
cites.

1. FSDP1 keeps every checkpointed block's input and its gradient to the end of backward when the
   blocks are frozen FSDP units run under reentrant checkpointing (the Hugging Face Trainer +
   PEFT + FSDP case; stacks.toml ``fsdp1_frozen_units_keep_ckpt_inputs`` on [hf-trainer]):
   ``_register_post_backward_reshard_only_hook`` in torch/distributed/fsdp/_runtime_utils.py
   (pytorch/pytorch PR 101982), transformers 4.48.1 ``gradient_checkpointing_enable``
   (use_reentrant=True), peft v0.13.2 ``fsdp_auto_wrap_policy``. Trace:
   scripts/trace_fsdp1_frozen_ckpt.py.
2. Under parameter sharding a QLoRA block is gathered in its packed 4-bit storage
   (``bnb_4bit_quant_storage`` = compute dtype: fms-acceleration 876e2ed6
   plugins/accelerated-peft framework_plugin_bnb.py ``model_loader``; transformers PR 29587),
   not as dequantized weights.
"""

from __future__ import annotations

import attrs
import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.stacks import load_profiles, resolve_stack
from fmest.testing import new_engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory import formulas as F

PLUGINS = ((memory_plugin, "memory_theory"),)
#: Llama-2-70B (NousResearch/Llama-2-70b-hf config.json)
H, L = 8192, 80
SEQ, MB = 4096, 2


def _job(technique="qlora", stack="hf-trainer", fsdp="full_shard", zero=0, ckpt="full",
         gpus=2, mb=MB):
    training = {"technique": technique, "stack": stack, "dtype": "bf16", "seq_len": SEQ,
                "micro_batch_size": mb, "lora_rank": 16,
                "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "activation_checkpointing": ckpt, "attention": "flash", "optimizer": "adamw"}
    if technique == "full":
        for key in ("lora_rank", "lora_target_modules"):
            training.pop(key)
    par: dict = {"dp": gpus}
    if gpus > 1:
        par.update({"fsdp": fsdp} if fsdp != "none" else {"zero_stage": zero})
    return job_from_dict({"model": "meta-llama/Llama-2-70b-hf", "training": training,
                          "parallelism": par,
                          "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": gpus}})


def _ctx(job, **profile_fields):
    ctx = new_engine(*PLUGINS).context(job)
    if not profile_fields:
        return ctx
    base = next(p for p in load_profiles() if p.name == ctx.transforms.stack.name)
    stack = resolve_stack(attrs.evolve(base, **profile_fields), job, reason="test")
    return attrs.evolve(ctx, transforms=attrs.evolve(ctx.transforms, stack=stack))


def _peak(job, **profile_fields) -> E.StagePeak:
    setup = E.job_setup(job, _ctx(job, **profile_fields))
    stage = E.Stage(name="all", layers=L, has_embedding=True, has_head=True, inflight=1)
    return E.stage_peak(setup, stage)


def _setup(job, **profile_fields):
    return E.job_setup(job, _ctx(job, **profile_fields))


def test_hf_trainer_profile_states_the_fsdp1_behaviour_with_its_source():
    prof = next(p for p in load_profiles() if p.name == "hf-trainer")
    assert prof.fsdp1_frozen_units_keep_ckpt_inputs
    assert "_register_post_backward_reshard_only_hook" in \
        prof.sources["fsdp1_frozen_units_keep_ckpt_inputs"]
    for other in ("pytorch", "lit-gpt", "litgpt", "torchtune", "torchtitan"):
        assert not next(p for p in load_profiles() if p.name == other) \
            .fsdp1_frozen_units_keep_ckpt_inputs, other


@pytest.mark.parametrize("technique", ["qlora", "lora"])
def test_kept_inputs_add_every_other_layers_input_gradient_at_the_end_of_backward(technique):
    """At the first block's backward FSDP1 still holds the other L - 1 blocks' inputs (already
    in saved_all: the stash is not freed) and their gradients: (L - 1) * tokens * h bf16."""
    job = _job(technique)
    on, off = _peak(job), _peak(job, fsdp1_frozen_units_keep_ckpt_inputs=False)
    kept = (L - 1) * MB * SEQ * H * 2
    setup = _setup(job)
    stage = E.Stage(name="all", layers=L, has_embedding=True, has_head=True, inflight=1)
    params = E.stage_params(setup, stage)
    state = E.model_state_terms(setup, params)
    buffers = E.framework_buffer_terms(setup, params, state, stage)
    acts = E.activation_terms(setup, params, state, buffers, stage)
    assert acts.kept_input_grads == pytest.approx(kept)
    # the end-of-backward moment now decides the backward peak: saved_all + kept + work
    assert on.phase == "backward"
    back = on.components
    assert back["activations"] == pytest.approx(acts.saved_all + kept + acts.work_layer)
    assert back["logits_and_loss"] == 0.0
    assert on.allocated > off.allocated + 0.9 * kept - acts.logits_held - acts.logits_bwd_extra


@pytest.mark.parametrize("change", [dict(technique="full"), dict(fsdp="none", zero=3),
                                    dict(ckpt="none"), dict(gpus=1, fsdp="none"),
                                    dict(stack="pytorch")])
def test_kept_inputs_need_fsdp_lora_reentrant_checkpointing_and_the_stack(change):
    """Full fine-tuning (trainable units: no reshard-only hook), DeepSpeed ZeRO-3 (its own
    hooks), no checkpointing (the inputs are not detached leaves), one GPU and a stack that
    checkpoints non-reentrantly inside the unit keep nothing."""
    assert not E.fsdp1_keeps_checkpoint_inputs(_setup(_job(**change)))


def test_qlora_block_is_gathered_in_its_packed_four_bit_storage():
    """FSDP_UNSHARDED_LAYERS gathered blocks: the quantized linears at 0.5 B/param (no
    QuantState constants: not parameters), the norms in bf16; LoRA: the whole block in bf16."""
    q, lo = _setup(_job("qlora")), _setup(_job("lora"))
    q_state = E.model_state_terms(q, E.stage_params(q, E.Stage(
        name="all", layers=L, has_embedding=True, has_head=True, inflight=1)))
    dims = q.dims
    quant = dims.quantizable_weight_params / L
    rest = dims.largest_layer_params - quant
    assert 0 < rest < 0.01 * quant                     # two RMSNorms per block
    assert E._gathered_layer_bytes(q, q_state) == pytest.approx(
        quant * F.NF4_BYTES_PER_PARAM + rest * 2)
    lo_state = E.model_state_terms(lo, E.stage_params(lo, E.Stage(
        name="all", layers=L, has_embedding=True, has_head=True, inflight=1)))
    assert E._gathered_layer_bytes(lo, lo_state) == pytest.approx(dims.largest_layer_params * 2)
