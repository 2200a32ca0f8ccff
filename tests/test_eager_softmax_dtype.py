"""Eager attention's saved probabilities follow the model's own softmax code (issue 21): GPT-2,
T5, BART and Falcon run ``softmax`` in the scores' dtype, Llama-family code upcasts to fp32
(``fmest.models.spec.EAGER_SOFTMAX_INPUT_DTYPE_MODEL_TYPES``, transformers 5.24.0); under
torch.autocast softmax is fp32 either way."""

from __future__ import annotations

import pytest

import fmest
from fmest.engine import Engine
from fmest.models.presets import load_preset
from fmest_memory_theory import formulas as F


def test_which_models_keep_the_scores_dtype():
    assert load_preset("openai-community/gpt2").eager_softmax_upcast is False
    assert load_preset("meta-llama/Llama-3.2-1B").eager_softmax_upcast is True
    assert load_preset("Qwen/Qwen2.5-0.5B").eager_softmax_upcast is True


def test_core_bytes_per_score():
    kw = dict(tokens=1024, batch=1, seq=1024, heads=1, q_dim=64, attention="eager", dropout=0.0)
    scores = 1024 * 1024
    assert F.attention_core_bytes(act_bytes=2, **kw) == 6 * scores      # fp32 probs + bf16 copy
    assert F.attention_core_bytes(act_bytes=2, softmax_fp32=False, **kw) == 2 * scores
    assert F.attention_core_bytes(act_bytes=4, softmax_fp32=False, **kw) == 4 * scores
    drop = dict(kw, dropout=0.1)   # + the bool mask and the dropped probabilities
    assert F.attention_core_bytes(act_bytes=2, softmax_fp32=False, **drop) == 5 * scores


@pytest.mark.parametrize("precision,per_score", [("pure", 2 + 1 + 2), ("amp", 4 + 2 + 1 + 2)])
def test_gpt2_eager_over_sdpa(precision, per_score):
    """GPT-2 (attention dropout 0.1) under pure bf16 keeps bf16 probabilities; under autocast
    the fp32 ones and their bf16 copy. Eager minus SDPA activations = layers x (the s^2 core
    minus the kernel's output and log-sum-exp)."""
    engine = Engine()
    model = load_preset("openai-community/gpt2")
    b, s = 2, 1024

    def activations(attention: str) -> float:
        job = fmest.to_job({"model": "openai-community/gpt2",
                            "training": {"dtype": "bf16", "precision": precision, "seq_len": s,
                                         "micro_batch_size": b, "attention": attention,
                                         "stack": "pytorch"},
                            "hardware": {"gpu": "A100-SXM-80GB"}})
        return engine.estimate(job, quantities=("memory",)).memory.components["activations"]

    h, layers = model.num_attention_heads, model.num_layers
    sdpa_core = b * s * model.hidden_size * 2 + b * h * s * 4
    expected = layers * (b * h * s * s * per_score - sdpa_core)
    assert activations("eager") - activations("sdpa") == pytest.approx(expected, rel=1e-9)
