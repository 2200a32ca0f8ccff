"""LLaMA-Adapter and Adapter-v2 as Lit-GPT trains them (techniques ``adapter``, ``adapter_v2``
and their quantized-base forms ``qadapter``, ``qadapter_v2``): what is trainable, what one
layer saves for backward, the extra FLOPs, and how the evidence rows map.

Sources: lit_gpt/adapter.py, lit_gpt/adapter_v2.py, finetune/adapter.py and adapter_v2.py at
Lightning-AI/litgpt 8641822b3249bb94f068c254aa5d13decbc9f0a0 (the commit of Lit-GPT's resource
tables, tutorials/resource-tables.md at 4839345a97a0a90bc5f2361664b04d665c9a0e89, which print
the trainable parameter counts checked here). The per-layer byte checks are a fake-tensor trace
of that code (lit_gpt's own GPT, bf16, ``model(x, lm_head_chunk_size=128)``,
``chunked_cross_entropy``, backward; the trace method of scripts/trace_litgpt_lora.py run on
lit_gpt.adapter / lit_gpt.adapter_v2): the bytes one more adapter layer saves per token.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.job import TECHNIQUES, Training
from fmest.physics.counting import (
    ADAPTER_PROMPT_LENGTH,
    ADAPTER_START_LAYER,
    adapter_new_params,
    quantized_base,
    total_params,
    trainable_params,
)
from fmest.testing import new_engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory.layer import layer_activation_bytes
from fmest_time_roofline import formulas as TF

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import measured  # noqa: E402

PLUGINS = ((memory_plugin, "memory_theory"),)
#: the longest Alpaca sample under each tokenizer (resource-tables.md)
T_LLAMA, T_STABLELM = 1304, 1034
ROW = "r1-litgpt-{model}-{tech}-none-g1-mb1-mem"


def _row_job(model: str, tech: str) -> dict:
    row = next(r for r in measured.load_rows("memory")
               if r["id"] == ROW.format(model=model, tech=tech))
    job, why = measured.row_to_job(row)
    assert job is not None, why
    return job


def _setup(job_dict: dict):
    job = job_from_dict(job_dict)
    return E.job_setup(job, new_engine(*PLUGINS).context(job))


def _per_adapter_layer_bytes_per_token(job_dict: dict) -> float:
    """What one adapter layer saves per token (the layer average times the layers over the
    adapter layers, as the trace's difference of two depths measures it)."""
    setup = _setup(job_dict)
    model = setup.model
    saved, _ = layer_activation_bytes(model, setup.dims, setup.lora, E._layer_inputs(setup))
    layers = model.num_layers
    if setup.training.technique in ("adapter", "qadapter"):   # the others save nothing
        return saved * layers / (layers - ADAPTER_START_LAYER) / setup.tokens
    # v2: every layer saves; the prefix attention's output (bf16) and fp32 log-sum-exp only
    # in the adapter layers
    prefix = model.num_attention_heads * model.head_dim * 2 + model.num_attention_heads * 4
    return saved / setup.tokens + prefix * ADAPTER_START_LAYER / layers


def test_techniques_are_accepted_and_quantized_forms_named():
    for tech in ("adapter", "adapter_v2", "qadapter", "qadapter_v2"):
        assert tech in TECHNIQUES
        assert Training(technique=tech).technique == tech
    assert [quantized_base(Training(technique=t)) for t in ("adapter", "qadapter",
                                                            "adapter_v2", "qadapter_v2")] \
        == [False, True, False, True]
    with pytest.raises(InputError):
        Training(technique="adapter-v3")


@pytest.mark.parametrize("model,tech,expected", [
    # "Number of trainable parameters" as Lit-GPT's resource tables print them
    ("stablelm-alpha-3-b", "adapter", 573_888),
    ("stablelm-alpha-3-b", "adapter-v2", 2_125_248),
    ("llama-2-7-b", "adapter", 1_229_760),
    ("llama-2-7-b", "adapter-v2", 4_279_744),
])
def test_trainable_parameters_match_litgpt(model, tech, expected):
    job = job_from_dict(_row_job(model, tech))
    spec = new_engine(*PLUGINS).resolve_model(job)
    assert trainable_params(spec, job.training) == expected
    # the base stays; v1 adds prefix + gates, v2 also scale + bias per linear output (its
    # trainable norms are base parameters)
    added = adapter_new_params(spec, job.training)
    assert total_params(spec, job.training) == spec.param_counts().total + added
    if tech == "adapter":
        assert added == expected == (spec.num_layers - ADAPTER_START_LAYER) * (
            ADAPTER_PROMPT_LENGTH * spec.hidden_size + spec.num_attention_heads)
    else:
        assert added == expected - spec.param_counts().norms


@pytest.mark.parametrize("tech,traced", [("adapter", 140_182), ("adapter-v2", 241_746)])
def test_llama_adapter_layer_saves_what_the_litgpt_trace_saves(tech, traced):
    got = _per_adapter_layer_bytes_per_token(_row_job("llama-2-7-b", tech))
    assert got == pytest.approx(traced, rel=0.01)


def test_stablelm_v2_adds_what_the_litgpt_trace_adds():
    """StableLM-Alpha-3B (GPT-NeoX: LayerNorm, parallel residual): the trace saves 98,747
    B/token per adapter layer under v1 and 172,712 under v2. v2's pre-scale outputs
    (qkv 3h + proj h + fc 4h + proj h, bf16) add 73,728; LayerNorm keeps its input, mean and
    rstd whatever its weight does, so the trainable norms add nothing. (The v1 layer itself
    is within 10 %: both parallel-residual norms read the same block input, one tensor that
    the per-norm count holds twice, a base-model term shared with LoRA and full training.)"""
    v1 = _per_adapter_layer_bytes_per_token(_row_job("stablelm-alpha-3-b", "adapter"))
    v2 = _per_adapter_layer_bytes_per_token(_row_job("stablelm-alpha-3-b", "adapter-v2"))
    assert v2 - v1 == pytest.approx(172_712 - 98_747, rel=0.01)
    assert v1 == pytest.approx(98_747, rel=0.1)


def test_v1_layers_below_the_start_layer_save_nothing():
    job = _row_job("llama-2-7-b", "adapter")
    setup = _setup(job)
    inputs = E._layer_inputs(setup)
    assert inputs.saved_layer_share == pytest.approx(
        (setup.model.num_layers - ADAPTER_START_LAYER) / setup.model.num_layers)
    v2 = E._layer_inputs(_setup(_row_job("llama-2-7-b", "adapter-v2")))
    assert v2.saved_layer_share == 1.0     # v2's norms train from layer 0 up


def test_adapter_states_cover_the_trainable_parameters_only():
    """AdamW on the adapter parameters (finetune/adapter.py: ``trainable_params = [p for p in
    model.parameters() if p.requires_grad]``): gradients and states scale with 1.2 M
    parameters, not the 6.7 B of the frozen base."""
    setup = _setup(_row_job("llama-2-7-b", "adapter"))
    stage = E.Stage(name="all", layers=setup.model.num_layers, has_embedding=True,
                    has_head=True, inflight=1)
    state = E.model_state_terms(setup, E.stage_params(setup, stage))
    assert state.trainable_params == pytest.approx(1_229_760)
    assert state.grads_full < 1e7 and state.states < 1e8


def test_quantized_adapter_rows_map_to_q_techniques():
    rows = {r["id"]: r for r in measured.load_rows("memory")}
    nf4 = measured.row_to_job(rows["r1-litgpt-llama-2-7-b-adapter-4bit-bnb-nf4-g1-mb1-mem"])[0]
    dq = measured.row_to_job(rows["r1-litgpt-llama-2-7-b-adapter-v2-4bit-bnb-nf4-dq-g1-mb1-mem"])[0]
    assert nf4["training"]["technique"] == "qadapter"
    assert nf4["training"]["double_quantization"] is False
    assert dq["training"]["technique"] == "qadapter_v2"
    assert "double_quantization" not in dq["training"]
    # finetune/adapter.py runs the head and the loss in chunks of 128 as lora.py does
    assert nf4["training"]["loss"] == "chunked"
    assert "lora_target_modules" not in nf4["training"]


def test_quantized_base_weights_are_quantized():
    plain = _setup(_row_job("llama-2-7-b", "adapter"))
    quant_job = _row_job("llama-2-7-b", "adapter")
    quant_job["training"] = {**quant_job["training"], "technique": "qadapter"}
    quant = _setup(quant_job)
    stage = E.Stage(name="all", layers=32, has_embedding=True, has_head=True, inflight=1)
    w_plain = E.model_state_terms(plain, E.stage_params(plain, stage)).weights
    w_quant = E.model_state_terms(quant, E.stage_params(quant, stage)).weights
    assert w_quant < 0.35 * w_plain


def test_adapter_flops_prefix_attention_and_v2_scale_bias():
    spec = new_engine(*PLUGINS).resolve_model(job_from_dict(_row_job("llama-2-7-b", "adapter")))
    heads, hd, layers = spec.num_attention_heads, spec.head_dim, spec.num_layers
    prefix = (layers - ADAPTER_START_LAYER) * (
        2 * heads * 2 * hd * ADAPTER_PROMPT_LENGTH + 2 * heads * hd)
    assert TF.adapter_forward_flops_per_token(spec, "adapter") == pytest.approx(prefix)
    assert TF.adapter_forward_flops_per_token(spec, "lora") == 0.0
    outs = sum(lin.out_features * lin.layers for lin in spec.linears)
    assert TF.adapter_forward_flops_per_token(spec, "adapter_v2") == pytest.approx(
        prefix + 2 * outs)
    base = TF.training_flops_per_token(spec, seq_len=T_LLAMA, technique="lora")
    ada = TF.training_flops_per_token(spec, seq_len=T_LLAMA, technique="adapter")
    assert ada["model"] - base["model"] == pytest.approx(3 * prefix)


def test_cli_accepts_the_adapter_techniques():
    from fmest.flags import JOB_FLAGS

    flag = next(f for f in JOB_FLAGS if "--technique" in f.names)
    assert set(flag.choices) == set(TECHNIQUES)
