"""LitGPT 2024's own model code as traced by scripts/trace_litgpt2024.py (the litgpt package at
Lightning-AI/litgpt 00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d on fake tensors, issue 21): the two
[litgpt] fields the trace showed missing.

* ``mlp_activation_one_op``: litgpt/model.py GptNeoxMLP runs ``F.gelu(approximate=...)``, so
  phi-2 (HF ``hidden_act = gelu_new``) keeps the fc output only (trace: 20480 B/token/layer
  for the MLP, 2 x 10240), not transformers' three extra eager tensors.
* ``unties_embeddings``: litgpt's ``GPT.lm_head`` is its own parameter even for a tied HF
  checkpoint (gemma-2b), so full fine-tuning trains, and AdamW keeps states for, a second
  vocabulary x hidden weight (trace: gemma-2b full, micro-batch 1, seq 512: 22.823 GiB over the
  weights at the optimizer step, which fmest now matches).

The 2023 ``lit-gpt`` profile sets neither field (its behaviour is unchanged).
"""

from __future__ import annotations

import attrs
import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.stacks import load_profiles, resolve_stack
from fmest.testing import new_engine

PLUGINS = ((memory_plugin, "memory_theory"),)


def _memory(model: str, technique: str, stack: str, off: str = "", **extra):
    training = {"technique": technique, "stack": stack, "dtype": "bf16", "precision": "pure",
                "seq_len": 512, "micro_batch_size": 1, "grad_accum_steps": 1,
                "loss": "standard" if technique == "full" else "chunked", **extra}
    job = job_from_dict({"model": model, "training": training,
                         "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 1}})
    engine = new_engine(*PLUGINS)
    if not off:
        _, _, mem = engine.memory_answer(job)
        assert mem is not None
        return mem
    base = next(p for p in load_profiles() if p.name == stack)
    profile = attrs.evolve(base, **{off: False})  # type: ignore[arg-type]
    ctx = engine.context(job)
    ctx = attrs.evolve(ctx, transforms=attrs.evolve(
        ctx.transforms, stack=resolve_stack(profile, job, reason="test: field off")))
    return engine.estimate_memory(job, ctx).chosen


def test_fields_set_for_litgpt_only():
    profiles = {p.name: p for p in load_profiles()}
    assert profiles["litgpt"].mlp_activation_one_op and profiles["litgpt"].unties_embeddings
    assert "00af8b0d" in profiles["litgpt"].sources["mlp_activation_one_op"]
    assert "00af8b0d" in profiles["litgpt"].sources["unties_embeddings"]
    assert not profiles["lit-gpt"].mlp_activation_one_op
    assert not profiles["lit-gpt"].unties_embeddings


def test_phi2_gelu_is_one_op_under_litgpt():
    """phi-2 LoRA (q, v): the litgpt estimate drops gelu_new's 3 extra intermediate tensors
    per layer: 3 x 10240 x 2 B x 512 tokens x 32 layers."""
    lora = {"lora_rank": 8, "lora_target_modules": ["q_proj", "v_proj"]}
    own = _memory("microsoft/phi-2", "lora", "litgpt", **lora).components["activations"]
    hf = _memory("microsoft/phi-2", "lora", "litgpt", off="mlp_activation_one_op",
                 **lora).components["activations"]
    assert hf - own == pytest.approx(3 * 10240 * 2 * 512 * 32, rel=0.02)


def test_gemma_head_untied_in_full_finetune():
    """gemma-2b (tied in HF): litgpt keeps a separate lm_head; full fine-tuning in bf16-true
    has 2 B weights + 2 B gradient + 4 B AdamW states per head parameter more
    (256000 x 2048)."""
    head = 256000 * 2048
    own = _memory("google/gemma-2b", "full", "litgpt").components
    tied = _memory("google/gemma-2b", "full", "lit-gpt").components
    assert own["weights"] - tied["weights"] == pytest.approx(2 * head, rel=1e-6)
    assert own["optimizer_states"] - tied["optimizer_states"] == pytest.approx(4 * head, rel=1e-6)


def test_planner_counts_litgpt_untied_head():
    """The planner's arrays give a tied checkpoint under the litgpt stack its own head weight
    (stacks.toml unties_embeddings), as the memory plugin does: gemma-2b (tied, 256k vocabulary)
    plans agree with the engine's memory at the median (8 % apart without it)."""
    import numpy as np

    from fmest import to_job
    from fmest.plan.planner import Constraints
    from fmest.testing import new_engine, planner_engine_errors

    engine = new_engine(entrypoints=True)
    job = to_job({"model": "google/gemma-2b", "training": {"stack": "litgpt", "seq_len": 512},
                  "workload": {"dataset_tokens": 1e8}, "options": {"fit_confidence": 0.5}})
    drawn = planner_engine_errors(engine, job, Constraints(gpus="A100-80GB", max_gpus=4,
                                                           objective="time"), n=30)
    assert float(np.median([abs(mem) for _, mem, _ in drawn])) <= 0.05
