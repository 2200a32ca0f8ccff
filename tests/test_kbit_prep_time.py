"""PEFT's k-bit preparation, fms-acceleration's fused kernels and LoRA in the DeepSpeed recipes
in the time model (issue 20): the fp32-stream bytes (time_roofline
``formulas.kbit_fp32_stream_bytes_per_token``, ``estimator.kbit_prep_elementwise_bytes``), the
fused LoRA bytes (``formulas.peft_lora_bytes_per_row(fused=True)``), a job's own fused kernels
(``fmest.stacks.resolve_stack``), the evidence mapping of the foak rows and the DeepSpeed
profile's ``lora_impl`` (docs/time_model.md §2)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fmest.physics.time_constants import (
    FUSED_LORA_BYTES_PER_FEATURE,
    FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE,
    KBIT_PREP_CAST_BYTES_PER_ELEMENT,
    KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT,
    KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE,
    KBIT_PREP_TRACED_BYTES_PER_ELEMENT,
)
from fmest.stacks import FUSIBLE, load_profiles, resolve_stack
from fmest_time_roofline import estimator as E
from fmest_time_roofline import formulas as F

ROOT = Path(__file__).resolve().parents[1]


def _profile(name: str):
    return {p.name: p for p in load_profiles()}[name]


def _resolved(name: str, **training):
    fields = dict(liger=False)
    fields.update(training)
    job = SimpleNamespace(training=SimpleNamespace(**fields), parallelism=SimpleNamespace())
    return resolve_stack(_profile(name), job, reason="test")


def _lin(name, i, o, kind, layers=2, active=1.0):
    return SimpleNamespace(name=name, in_features=i, out_features=o, kind=kind, layers=layers,
                           active_copies=active, copies=1)


def _llama(gated=True):
    """A 2-layer Llama-shaped model: hidden 8, 2 heads x 4, 1 kv head, intermediate 16."""
    linears = [_lin("q_proj", 8, 8, "attention"), _lin("k_proj", 8, 4, "attention"),
               _lin("v_proj", 8, 4, "attention"), _lin("o_proj", 8, 8, "attention"),
               _lin("gate_proj", 8, 16, "mlp"), _lin("up_proj", 8, 16, "mlp"),
               _lin("down_proj", 16, 8, "mlp"), _lin("lm_head", 8, 100, "head", layers=1)]
    return SimpleNamespace(hidden_size=8, qk_head_dim=None, head_dim=4, num_attention_heads=2,
                           num_kv_heads=1, intermediate_size=16, is_moe=False, gated_mlp=gated,
                           linears=linears, num_layers=2)


def test_the_fp32_input_linears_skip_the_attention_output_and_the_head():
    names = [lin.name for lin in F.kbit_fp32_input_linears(_llama())]
    assert names == ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]


def test_stream_bytes_hand_derived():
    t = KBIT_PREP_TRACED_BYTES_PER_ELEMENT
    cast = KBIT_PREP_CAST_BYTES_PER_ELEMENT["fwd"]
    fwd, bwd = F.kbit_fp32_stream_bytes_per_token(_llama(), stage_layers=2)
    # per layer: 2 resnorms x 8, rope on q+kv = 12, q/k/v flash-attn casts 8 + 2 x 4 = 16,
    # activation on 16; linears: casts in + out of q (8+8), k (8+4), v (8+4), gate (8+16),
    # up (8+16), down (16+8) = 112 elements
    per_layer_fwd = (2 * (t["resnorm_fp32_fwd"] - t["resnorm_bf16_fwd"]) * 8
                     + (t["rope_fp32_fwd"] - t["rope_bf16_fwd"]) * 12 + cast * 16
                     + (t["activation_fp32_fwd"] - t["activation_bf16_fwd"]) * 16 + cast * 112)
    assert fwd == pytest.approx(2 * per_layer_fwd)
    per_layer_bwd = (2 * (t["resnorm_fp32_bwd"] - t["resnorm_bf16_bwd"]) * 8
                     + (t["rope_fp32_bwd"] - t["rope_bf16_bwd"]) * 12 + cast * 16
                     + (t["activation_fp32_bwd"] - t["activation_bf16_bwd"]) * 16 + cast * 112
                     # q, k, v, gate, up read 2 inputs: 3 extra fp32 gradient sums of 8
                     + KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT * 3 * 8)
    assert bwd == pytest.approx(2 * per_layer_bwd)
    # PEFT's cast to the fp32 adapters is a no-op for the adapted fp32 inputs (q, v), not o
    adapted = frozenset({"q_proj", "v_proj", "o_proj"})
    f2, b2 = F.kbit_fp32_stream_bytes_per_token(_llama(), stage_layers=2, adapted=adapted)
    saved = KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE
    assert fwd - f2 == pytest.approx(saved["fwd"] * 2 * 8 * 2)
    assert bwd - b2 == pytest.approx(saved["bwd"] * 2 * 8 * 2)
    # two pipeline stages: half the layers each
    half = F.kbit_fp32_stream_bytes_per_token(_llama(), stage_layers=1, pp=2)
    assert half[0] == pytest.approx(fwd / 2) and half[1] == pytest.approx(bwd / 2)


def test_cast_constants_are_the_to_copy_bytes():
    # fp32 -> bf16: read 4, write 2; bf16 -> fp32: read 2, write 4; backward the opposite cast
    assert KBIT_PREP_CAST_BYTES_PER_ELEMENT == {"fwd": 4 + 2, "bwd": 2 + 4}
    assert KBIT_PREP_GRAD_SUM_EXTRA_BYTES_PER_ELEMENT == (4 + 4 + 4) - (2 + 2 + 2)
    # no fp32 copy of an fp32 input; backward: the cast down (6) goes, the add grows by 6
    assert KBIT_PREP_LORA_FP32_INPUT_SAVED_BYTES_PER_IN_FEATURE == {"fwd": 2 + 4,
                                                                    "bwd": (4 + 2) - 6}


def _families():
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from count_elementwise_bytes import eager_bytes  # type: ignore[import-not-found]
    from transformers.models.llama import modeling_llama as llama

    torch.manual_seed(0)
    # the shapes of count_elementwise_bytes.families() (RoPE's cos/sin reads depend on them)
    tokens, hidden, q_heads, kv_heads, head_dim, inter = 256, 512, 8, 2, 64, 1024
    bf, f32 = torch.bfloat16, torch.float32

    def leaf(*shape, dtype=bf, grad=True):
        return torch.randn(*shape, dtype=dtype).requires_grad_(grad)

    def resnorm(res, branch, weight):   # the residual add + LlamaRMSNorm.forward verbatim
        h = res + branch
        x = h.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-6)
        return h, weight * x.to(h.dtype)

    def rope(q_lin, k_lin, cos, sin):
        q = q_lin.view(1, tokens, q_heads, head_dim).transpose(1, 2)
        k = k_lin.view(1, tokens, kv_heads, head_dim).transpose(1, 2)
        return llama.apply_rotary_pos_emb(q, k, cos, sin)

    def swiglu(gate, up):
        return torch.nn.functional.silu(gate) * up

    cos, sin = torch.randn(1, tokens, head_dim, dtype=bf), torch.randn(1, tokens, head_dim,
                                                                        dtype=bf)
    n_h, n_r, n_i = tokens * hidden, tokens * (q_heads + kv_heads) * head_dim, tokens * inter

    def per(fn, inputs, elements):
        fwd, bwd = eager_bytes(fn, inputs)
        return fwd / elements, bwd / elements

    bf_norm = per(resnorm, [leaf(tokens, hidden), leaf(tokens, hidden),
                            leaf(hidden, grad=False)], n_h)
    fp_attn = per(resnorm, [leaf(tokens, hidden, dtype=f32), leaf(tokens, hidden),
                            leaf(hidden, dtype=f32, grad=False)], n_h)
    fp_mlp = per(resnorm, [leaf(tokens, hidden, dtype=f32), leaf(tokens, hidden, dtype=f32),
                           leaf(hidden, dtype=f32, grad=False)], n_h)
    return {
        "resnorm_bf16": bf_norm,
        "resnorm_fp32": tuple((a + b) / 2 for a, b in zip(fp_attn, fp_mlp, strict=True)),
        "rope_bf16": per(rope, [leaf(1, tokens, q_heads * head_dim),
                                leaf(1, tokens, kv_heads * head_dim), cos, sin], n_r),
        "rope_fp32": per(rope, [leaf(1, tokens, q_heads * head_dim, dtype=f32),
                                leaf(1, tokens, kv_heads * head_dim, dtype=f32), cos, sin], n_r),
        "activation_bf16": per(swiglu, [leaf(tokens, inter), leaf(tokens, inter)], n_i),
        "activation_fp32": per(swiglu, [leaf(tokens, inter, dtype=f32),
                                        leaf(tokens, inter, dtype=f32)], n_i),
    }


def test_trace_matches_the_traced_constants():
    """Re-trace the families on fp32 and bf16 tensors (benchmarks/count_elementwise_bytes.py's
    counter) and compare with ``KBIT_PREP_TRACED_BYTES_PER_ELEMENT``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    traced = _families()
    for family, (fwd, bwd) in traced.items():
        assert KBIT_PREP_TRACED_BYTES_PER_ELEMENT[f"{family}_fwd"] == pytest.approx(fwd, abs=0.3)
        assert KBIT_PREP_TRACED_BYTES_PER_ELEMENT[f"{family}_bwd"] == pytest.approx(bwd, abs=0.3)


def _job(**training):
    from fmest.convert import job_from_dict

    base = {"technique": "qlora", "lora_rank": 16, "seq_len": 2048, "micro_batch_size": 2,
            "stack": "hf-trainer", "activation_checkpointing": "full", "attention": "flash",
            "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    base.update(training)
    return job_from_dict({"model": "mistralai/Mistral-7B-v0.1", "training": base,
                          "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 1,
                                       "nodes": 1}})


def test_engine_charges_the_prepared_stream_to_memory_bound():
    """End to end: the prepared 4-bit job minus the unprepared one is the stream's bytes,
    forward twice (full checkpointing) and backward once, at HBM_EFFICIENCY."""
    from fmest.engine import Engine
    from fmest.physics.counting import lora_modules

    engine = Engine()
    prepared = engine.estimate(_job(kbit_prep="peft_bf16_head"), quantities=("time",)).time
    plain = engine.estimate(_job(kbit_prep="none"), quantities=("time",)).time
    ctx = engine.context(_job())
    adapted = frozenset(m.name for m in lora_modules(ctx.model, _job().training))
    fwd, bwd = F.kbit_fp32_stream_bytes_per_token(ctx.model, stage_layers=ctx.model.num_layers,
                                                  adapted=adapted)
    expected = (2 * fwd + bwd) * 2 * 2048 / (ctx.gpu.hbm_bytes_per_s * F.HBM_EFFICIENCY)
    delta = prepared.breakdown["memory_bound"] - plain.breakdown["memory_bound"]
    assert delta == pytest.approx(expected, rel=1e-6)
    assert prepared.step_seconds > plain.step_seconds


@pytest.mark.parametrize("training", [
    {"technique": "lora"},                                   # no 4-bit base
    {"quantization_method": "gptq"},                         # PEFT skips the cast for GPTQ
    {"quantization_bits": 8},                                # 8-bit path: not traced
    {"compile": True},                                       # Inductor fuses the casts
])
def test_no_stream_bytes_where_no_fp32_stream_is_modelled(training):
    job = _job(kbit_prep="peft", **training)
    shape = SimpleNamespace(tokens=4096, stage_layers=32, pp=1)
    assert E.kbit_prep_elementwise_bytes(job.training, None, shape, None, ()) == (0.0, 0.0)


def test_kbit_prep_rule_follows_memory_theory():
    from fmest_memory_theory.estimator import kbit_prep_of

    for training in ({"kbit_prep": "peft"}, {"kbit_prep": "none"}, {},
                     {"kbit_prep": "peft", "quantization_method": "gptq"},
                     {"kbit_prep": "peft_bf16_head", "technique": "lora"}):
        t = _job(**training).training
        assert E.kbit_prep_of(t, None) == kbit_prep_of(t, None)


def test_fused_lora_bytes_hand_derived():
    # fms-acceleration matmul_lora: forward the in-place add per out feature (r2 r2 w2),
    # compute-dtype dropout (r2, w2 + mask 1); backward the != 0 compare (r2 w1), the multiply
    # (r1 r2 w2) and the in-place add (r2 r2 w2) per in feature
    assert FUSED_LORA_BYTES_PER_FEATURE == {"fwd_in": 0.0, "fwd_out": 2 + 2 + 2,
                                            "bwd_in": 3 + 5 + 6, "bwd_out": 0.0}
    assert FUSED_LORA_DROPOUT_BYTES_PER_IN_FEATURE == {"fwd": 2 + 2 + 1, "bwd": 0.0}
    assert F.peft_lora_bytes_per_row(4096, 1024, dropout=True, fused=True) == (
        5 * 4096 + 6 * 1024, 14 * 4096)
    fused = F.peft_lora_bytes_per_row(4096, 4096, dropout=True, fused=True)
    peft = F.peft_lora_bytes_per_row(4096, 4096, dropout=True)
    assert sum(fused) < sum(peft)


def test_a_jobs_own_fused_kernels_join_the_stack():
    assert "lora" in FUSIBLE
    plain = _resolved("hf-trainer")
    assert not plain.fuses("norm") and not plain.fuses("lora")
    foak = _resolved("hf-trainer", fused_kernels=("norm", "rope", "loss", "lora", "bogus"))
    assert all(foak.fuses(op) for op in ("norm", "rope", "loss", "lora"))
    assert not foak.fuses("activation") and not foak.fuses("bogus")
    assert foak.bytes_per_element("norm", 36.0) == 6.0
    assert foak.bytes_per_element("rope", 20.0) == 4.0
    # the fused LoRA replaces PEFT's bytes in the time model
    training = SimpleNamespace(technique="lora", lora_dropout=0.1)
    shape = SimpleNamespace(tokens=1024, pp=1)
    mods = (_lin("q_proj", 4096, 4096, "attention", layers=32),)
    fused = E.lora_elementwise_bytes(training, shape, foak, mods)
    assert fused == pytest.approx(tuple(
        1024 * 32 * b for b in F.peft_lora_bytes_per_row(4096, 4096, dropout=True, fused=True)))
    assert sum(fused) < sum(E.lora_elementwise_bytes(training, shape, plain, mods))


def test_foak_rows_map_to_what_the_plugin_fuses():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measured  # type: ignore[import-not-found]

    fk = measured._foak_fused_kernels
    assert fk("foak-fast-kernels", "mistralai/Mistral-7B-v0.1") == ("norm", "rope", "loss")
    assert fk("accelerated-peft-bnb-foak", "mistralai/Mistral-7B-v0.1") == (
        "norm", "rope", "loss", "lora")
    assert fk("accelerated-peft-autogptq-foak", "TheBloke/Llama-2-70B-GPTQ")[-1] == "lora"
    assert fk("accelerated-peft-bnb-foak", "bigcode/gpt_bigcode-santacoder") == ("loss",)
    for config in ("none", "accelerated-peft-bnb", "baseline-peft-bnb", ""):
        assert fk(config, "mistralai/Mistral-7B-v0.1") == ()


def test_deepspeed_recipes_run_peft_lora():
    profile = _profile("deepspeed")
    assert profile.lora_impl == "peft"
    assert "finetune.py" in profile.sources["lora_impl"]
    assert "xtuner/model/sft.py" in profile.sources["lora_impl"]


def test_a_job_states_its_fused_kernels_and_only_known_ones():
    import fmest
    from fmest.errors import InputError

    base = {"model": "mistralai/Mistral-7B-v0.1",
            "training": {"technique": "lora", "seq_len": 4096, "micro_batch_size": 4,
                         "activation_checkpointing": "full", "stack": "hf-trainer"},
            "hardware": {"gpu": "A100-SXM-80GB"}}
    plain = fmest.estimate(base, quantities=("memory", "time"))
    foak = fmest.estimate({**base, "training": {**base["training"],
                                                "fused_kernels": ["norm", "rope", "loss"]}},
                          quantities=("memory", "time"))
    assert foak.job.training.fused_kernels == ("norm", "rope", "loss")
    # fused norm and RoPE move fewer bytes; the stated loss kernel keeps the standard loss's
    # logits (memory) and bytes (time)
    assert foak.time.step_seconds < plain.time.step_seconds
    assert foak.time.breakdown["memory_bound"] < plain.time.breakdown["memory_bound"]
    assert foak.memory.components["logits_and_loss"] == plain.memory.components[
        "logits_and_loss"]
    with pytest.raises(InputError, match="fused_kernels") as exc:
        fmest.estimate({**base, "training": {**base["training"], "fused_kernels": ["rmsnorm"]}})
    assert "norm" in str(exc.value) and "rmsnorm" in str(exc.value)


def test_the_fused_kernels_flag_reaches_the_job():
    from fmest.cli import main

    assert main(["estimate", "--model", "gpt2", "--technique", "lora",
                 "--fused-kernels", "norm,rope", "lora", "--format", "json"]) == 0


def test_the_jobs_fused_kernel_names_are_the_stacks():
    from fmest.job import FUSED_KERNEL_OPS

    # job.py cannot import fmest.stacks (stacks reads jobs); the two lists must not drift
    assert FUSED_KERNEL_OPS == FUSIBLE
