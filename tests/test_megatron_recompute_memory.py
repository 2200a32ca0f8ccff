"""Memory of Megatron-Core's selective ``--recompute-modules`` (issue 21): each listed module
keeps only its checkpoint input (NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553,
transformer_layer.py, attention.py, multi_latent_attention.py, moe/moe_layer.py,
moe/experts.py); hand-derived per module against the layer's ``none`` count."""

from __future__ import annotations

import attrs
import pytest

import fmest_memory_theory.estimator as estimator
from fmest.models.hf import spec_from_hf_config
from fmest_memory_theory import formulas as F
from fmest_memory_theory.layer import (
    LayerInputs,
    _moe_parts,
    _needs,
    dense_mlp_bytes,
    layer_activation_bytes,
)

SEQ, BATCH = 4096, 1

LLAMA = spec_from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2,
                             "num_attention_heads": 32, "num_key_value_heads": 8,
                             "intermediate_size": 14336, "vocab_size": 32000,
                             "max_position_embeddings": SEQ}, name="llama-layer", source="test")
MIXTRAL = spec_from_hf_config({"model_type": "mixtral", "hidden_size": 4096,
                               "num_hidden_layers": 2, "num_attention_heads": 32,
                               "num_key_value_heads": 8, "intermediate_size": 14336,
                               "num_local_experts": 8, "num_experts_per_tok": 2,
                               "vocab_size": 32000, "max_position_embeddings": SEQ},
                              name="mixtral-layer", source="test")


def _inputs(modules, attention="flash", tp=1, sp=False):
    return LayerInputs(tokens=SEQ * BATCH, batch=BATCH, seq=SEQ, act_bytes=2, tp=tp,
                       sequence_parallel=sp, attention=attention, compiled=False,
                       trainable_all=True, adapter_bytes=2,
                       checkpointing="selective" if modules is not None else "none",
                       fused_norm=True, fused_activation=True, fused_layout=True,
                       recompute_modules=None if modules is None else frozenset(modules))


def _saved(spec, modules, **kw):
    return layer_activation_bytes(spec, estimator.model_numbers(spec), None,
                                  _inputs(modules, **kw))[0]


def test_no_module_keeps_the_none_count():
    for spec in (LLAMA, MIXTRAL):
        assert _saved(spec, ()) == pytest.approx(_saved(spec, None))


@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_mlp_frees_exactly_the_dense_mlp(tp, sp):
    dims = estimator.model_numbers(LLAMA)
    inputs = _inputs(("mlp",), tp=tp, sp=sp)
    mlp = dense_mlp_bytes(LLAMA, dims, LLAMA.intermediate_size, inputs, _needs(None, inputs))
    # fused SwiGLU: fc1's output (gate, up) and the product fc2 keeps, i/t each
    assert mlp == pytest.approx(SEQ * 3 * 14336 / tp * 2)
    assert _saved(LLAMA, None, tp=tp, sp=sp) - _saved(LLAMA, ("mlp",), tp=tp, sp=sp) \
        == pytest.approx(mlp)


def test_layernorm_frees_both_norm_outputs():
    # the norms' outputs are what linear_qkv and linear_fc1 save: 2 x T h bytes
    assert _saved(LLAMA, None) - _saved(LLAMA, ("layernorm",)) \
        == pytest.approx(2 * SEQ * 4096 * 2)


def test_core_attn_frees_the_scores_not_the_projection_input():
    # eager: the b a s^2 scores (fp32 + bf16 copy) go; flash under sbhd: only the log-sum-exp
    eager = _saved(LLAMA, None, attention="eager") - _saved(LLAMA, ("core_attn",),
                                                             attention="eager")
    assert eager == pytest.approx(BATCH * 32 * SEQ * SEQ * (4 + 2))
    flash = _saved(LLAMA, None) - _saved(LLAMA, ("core_attn",))
    assert flash == pytest.approx(BATCH * 32 * SEQ * F.LSE_BYTES)


def test_moe_modules():
    dims = estimator.model_numbers(MIXTRAL)
    inputs = _inputs(("moe",))
    experts, dispatch, shared, router = _moe_parts(MIXTRAL, dims, inputs,
                                                   _needs(None, inputs))
    none = _saved(MIXTRAL, None)
    assert none - _saved(MIXTRAL, ("moe",)) == pytest.approx(
        experts + dispatch + shared + router)
    # moe_act keeps fc1's output (gate and up: 2 i per routed token)
    assert none - _saved(MIXTRAL, ("moe_act",)) == pytest.approx(
        experts - SEQ * 2 * 2 * 14336 * 2)
    # every Mixtral layer is MoE: mlp (dense layers only) and shared_experts free nothing
    assert _saved(MIXTRAL, ("mlp", "shared_experts")) == pytest.approx(none)
    assert _saved(MIXTRAL, ("moe", "moe_act")) == pytest.approx(_saved(MIXTRAL, ("moe",)))


def test_the_op_level_rule_stays_without_modules():
    inputs = attrs.evolve(_inputs(("core_attn",)), recompute_modules=None)
    dims = estimator.model_numbers(LLAMA)
    generic = layer_activation_bytes(LLAMA, dims, None, inputs)[0]
    assert generic < _saved(LLAMA, ("core_attn",))


# -- the estimator ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine():
    import fmest_memory_theory.plugin as plugin
    from fmest.testing import new_engine
    return new_engine((plugin, "memory_theory"))


def _peak(engine, modules, stack="megatron-core"):
    from fmest.convert import job_from_dict
    training = {"seq_len": 4096, "micro_batch_size": 1, "grad_accum_steps": 8, "dtype": "bf16",
                "stack": stack, "attention": "flash", "activation_checkpointing": "selective"}
    if modules is not None:
        training["recompute_modules"] = list(modules)
    job = job_from_dict({"model": "deepseek-ai/DeepSeek-V3", "training": training,
                         "parallelism": {"tp": 1, "pp": 8, "ep": 32, "dp": 32},
                         "hardware": {"gpu": "H100-SXM-80GB", "nodes": 32}})
    return engine.estimate(job, quantities=("memory",)).memory.total_bytes


def test_estimator_prices_the_listed_modules(engine):
    default = _peak(engine, None)
    assert default == pytest.approx(_peak(engine, ("core_attn",)))
    assert _peak(engine, ("core_attn", "moe_act", "mla_up_proj", "layernorm")) < default
    assert _peak(engine, ("moe",)) < _peak(engine, ("moe_act",)) < default
