"""The 2024+ LitGPT profile (stacks.toml [litgpt], issue 21): its behaviour fields as read in
the litgpt package at Lightning-AI/litgpt 00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d (2024-09-27,
the commit of config_hub/finetune/README.md's tables), the evidence mapper's choice between it
and the 2023 ``lit-gpt`` profile (benchmarks/measured.py rule 12), and the direction each field
moves the memory estimate.

Sources (cited per field in [litgpt.sources]): litgpt/model.py (RMSNorm upcasts: ``x =
x.float()``; CausalSelfAttention splits the fused qkv by views), litgpt/lora.py
(LoRAQKVLinear.zero_pad ``index_copy_``), litgpt/utils.py (chunked_cross_entropy),
litgpt/finetune/lora.py (lora_dropout 0.05, ``lm_head_chunk_size=128``, FSDPStrategy), the
bitsandbytes 0.42.0 wheel (``MatMul4Bit`` keeps ``(A, B)``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.stacks import StackProfile, load_profiles, resolve_stack
from fmest.testing import new_engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory.layer import layer_activation_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import measured  # noqa: E402

PLUGINS = ((memory_plugin, "memory_theory"),)
COMMIT = "00af8b0d"
#: the fields read at 00af8b0d, with their values there
READ_2024 = {"fsdp_no_sync_accumulation": True, "fsdp_flat_param_grads": True,
             "quantize_head": True, "quant_saves_gemm_inputs": True,
             "norm_keeps_compute_dtype": False, "fused_qkv_views": True, "lora_dropout": 0.05,
             "lora_qkv_zero_pad": True, "chunked_loss_keeps_log_probs": True,
             "loss_in_compute_dtype": True, "output_logits_held": True}


def _profile(name: str) -> StackProfile:
    return next(p for p in load_profiles() if p.name == name)


def _job(technique="lora", gpus=1, accum=16, loss="chunked", stack="litgpt"):
    training = {"technique": technique, "stack": stack, "dtype": "bf16", "precision": "pure",
                "seq_len": 512, "micro_batch_size": 2, "grad_accum_steps": accum,
                "lora_rank": 32, "lora_alpha": 16, "lora_target_modules": ["q_proj", "v_proj"],
                "activation_checkpointing": "full" if gpus > 1 else "none", "loss": loss}
    if technique == "qlora":
        training["quantization_bits"] = 4
    par = {"fsdp": "full_shard"} if gpus > 1 else {}
    return job_from_dict({"model": "meta-llama/Llama-2-7b-hf", "training": training,
                          "parallelism": par,
                          "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": gpus}})


def _ctx(job, profile: StackProfile):
    ctx = new_engine(*PLUGINS).context(job)
    stack = resolve_stack(profile, job, reason="test: litgpt field toggled")
    return attrs.evolve(ctx, transforms=attrs.evolve(ctx.transforms, stack=stack))


def _row(**over) -> dict:
    """A synthetic evidence row (not from any data file): a 1xA10G LoRA fine-tune."""
    row = {"id": "synthetic", "source": "synthetic", "kind": "memory",
           "model": "meta-llama/Llama-2-7b-hf", "params_b": "6.74", "gpu": "A10G",
           "num_gpus": "1", "dtype": "bf16", "technique": "lora", "lora_rank": "32",
           "optimizer": "adamw", "seq_len": "512", "micro_batch": "2", "grad_accum": "8",
           "global_batch": "16", "dp": "1", "tp": "1", "pp": "1", "cp": "1", "ep": "1",
           "zero_or_fsdp": "none", "activation_checkpointing": "none",
           "flash_attention": "true", "stack": "litgpt", "stack_version": "", "oom": "",
           "suspect": "", "other": "", "measured_value": "19.77", "unit": "GB",
           "measure_type": "max_memory_allocated", "source_url": "", "source_quote": "",
           "date_read": "2026-11-27"}
    row.update(over)
    return row


# --- the profile -----------------------------------------------------------------------------

def test_litgpt_profile_loads_the_fields_read_at_00af8b0d():
    profile = _profile("litgpt")
    for name, value in READ_2024.items():
        assert getattr(profile, name) == value, name
        assert COMMIT in profile.sources[name], name
    # the 2023 profile differs where the code changed: RMSNorm's fp32 upcast
    assert _profile("lit-gpt").norm_keeps_compute_dtype
    assert not profile.norm_keeps_compute_dtype


# --- benchmarks/measured.py rule 12 ----------------------------------------------------------

@pytest.mark.parametrize("over,profile", [
    ({"stack_version": "Lit-GPT commit 8641822; PyTorch 2.1.0+cu121; bitsandbytes 0.41.1",
      "source_url": "https://github.com/Lightning-AI/litgpt/blob/"
                    "4839345a97a0a90bc5f2361664b04d665c9a0e89/tutorials/resource-tables.md"},
     "lit-gpt"),
    ({"other": "script=finetune/lora.py (Lit-GPT commit 8641822)"}, "lit-gpt"),
    ({}, "lit-gpt"),
    ({"source_url": "https://github.com/Lightning-AI/litgpt/blob/"
                    "00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d/config_hub/finetune/README.md"},
     "litgpt"),
    ({"stack_version": "litgpt commit 00af8b0d"}, "litgpt"),
    ({"other": "config=config_hub/finetune/llama-2-7b/lora.yaml"}, "litgpt"),
    ({"other": "script=litgpt/finetune/lora.py"}, "litgpt"),
    ({"other": "command: litgpt finetune lora --config lora.yaml"}, "litgpt"),
    ({"stack_version": "litgpt 0.4.13"}, "litgpt"),
    # a stated 2023 commit wins over a 2024 blob URL
    ({"stack_version": "Lit-GPT commit 8641822",
      "source_url": "https://github.com/Lightning-AI/litgpt/blob/00af8b0d/config_hub/x.md"},
     "lit-gpt"),
])
def test_rule12_picks_the_package_the_row_states(over, profile):
    job, why = measured.row_to_job(_row(**over))
    assert job is not None, why
    assert job["training"]["stack"] == profile
    # rule 11: LoRA still chunks the head at 128 tokens in both packages
    assert job["training"]["loss"] == "chunked"


def test_in_repo_litgpt_rows_keep_their_package_profile():
    """The 2023 resource tables run the lit-gpt profile; the 2024 config-hub tables (pinned
    to litgpt 00af8b0d) the litgpt one."""
    rows = [r for r in measured.load_rows("memory") if r["stack"] == "litgpt"]
    old = [r for r in rows if r["source"] == "litgpt-resource-tables-2023-10"]
    new = [r for r in rows if r["source"] == "litgpt-config-hub-finetune-2024-09"]
    assert old and new and len(old) + len(new) == len(rows)
    for row, profile in [(r, "lit-gpt") for r in old] + [(r, "litgpt") for r in new]:
        assert measured.litgpt_package_2024(row) == (profile == "litgpt"), row["id"]
        job, _ = measured.row_to_job(row)
        if job is not None:
            assert job["training"]["stack"] == profile, row["id"]


# --- one memory direction per field ----------------------------------------------------------

def _activations(job, profile):
    setup = E.job_setup(job, _ctx(job, profile))
    return layer_activation_bytes(setup.model, setup.dims, setup.lora, E._layer_inputs(setup))[0]


def test_rmsnorm_upcast_saves_more_than_lit_gpt_2023():
    """litgpt/model.py RMSNorm at 00af8b0d keeps an fp32 copy of its input; lit_gpt/rmsnorm.py
    at 8641822 kept the bf16 input: the 2024 block saves more."""
    job = _job()
    assert _activations(job, _profile("litgpt")) > _activations(job, _profile("lit-gpt"))


@pytest.mark.parametrize("field,off", [
    ("fused_qkv_views", False), ("lora_dropout", 0.0), ("lora_qkv_zero_pad", False)])
def test_layer_behaviours_add_saved_bytes(field, off):
    job = _job()
    on = _activations(job, _profile("litgpt"))
    assert on > _activations(job, attrs.evolve(_profile("litgpt"), **{field: off}))


def test_bnb_042_matmul4bit_keeps_its_input():
    job = _job(technique="qlora")
    on = _activations(job, _profile("litgpt"))
    assert on > _activations(job, attrs.evolve(_profile("litgpt"),
                                               quant_saves_gemm_inputs=False))


def _total(job, profile, component=None):
    result = E.estimate_bytes(job, _ctx(job, profile))
    return result.components[component] if component else result.total_bytes


def test_quantized_head_holds_fewer_weight_bytes():
    """The NF4 head holds fewer weight bytes (its fp16 + bf16 dequantized copies at the start
    of backward may still raise the peak: test_litgpt_stack.py)."""
    job = _job(technique="qlora")
    assert _total(job, _profile("litgpt"), "weights") < _total(
        job, attrs.evolve(_profile("litgpt"), quantize_head=False), "weights")


@pytest.mark.parametrize("field", ["fsdp_no_sync_accumulation", "fsdp_flat_param_grads"])
def test_fsdp1_no_sync_accumulation_adds_bytes(field):
    job = _job(gpus=2)
    assert _total(job, _profile("litgpt")) > _total(
        job, attrs.evolve(_profile("litgpt"), **{field: False}))


def test_chunked_loss_keeps_log_probs():
    job = _job()
    off = attrs.evolve(_profile("litgpt"), chunked_loss_keeps_log_probs=False)
    assert _total(job, _profile("litgpt"), "logits_and_loss") > _total(
        job, off, "logits_and_loss")


def test_standard_loss_on_bf16_logits_held_by_the_loop():
    """A standard loss (the scripts' validate: chunk_size=0) on the bf16 logits: fewer bytes
    than an fp32 upcast; the loop's ``logits`` local adds the held logits."""
    job = _job(loss="standard")
    profile = _profile("litgpt")
    bf16 = _total(job, attrs.evolve(profile, output_logits_held=False), "logits_and_loss")
    fp32 = _total(job, attrs.evolve(profile, output_logits_held=False,
                                    loss_in_compute_dtype=False), "logits_and_loss")
    assert bf16 < fp32
    assert _total(job, profile, "logits_and_loss") > bf16
